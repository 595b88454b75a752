"""Record llama.cpp 0c1e570's llama-perplexity on the scoring-task files of tests/data/ppltasks/
(HellaSwag, Winogrande, multiple choice) and the strided perplexity (--ppl-stride) of the GPL-3
text into tests/data/ppltasks-llamacpp.json (read by tests/tools/test_ppltasks.py), with the
random task picks of the C++ standard library (std::mt19937, libstdc++'s
uniform_int_distribution, compiled here with g++) that pyllama.scoring reproduces.

Usage: python tests/make_ppltasks_fixture.py [--data] [/work/llamacpp/build/bin]
--data first rewrites tests/data/ppltasks/mc-20.bin from mc-20.json (llama.cpp's binary format).
What is kept of a run: its whole stdout (the figures; the ETA's minutes blanked) and the stderr
messages of the scoring functions (log prefixes removed; see `messages`).
"""
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data", "ppltasks")
GPL3 = os.path.join(HERE, "data", "GPL-3.txt")
G, Q = "gemma-3-270m", "qwen2.5-coder-0.5b"
HS, WG, MC = "hellaswag-20.txt", "winogrande-20.csv", "mc-20.bin"

# name: (model, task file (or None), args); -t 2 is added. `fast`: run by the default test run.
CASES = {
    "hs-gemma-np8-t6": (G, HS, ["--hellaswag", "--hellaswag-tasks", "6", "-c", "128",
                                "-np", "8"], "fast"),
    "hs-gemma": (G, HS, ["--hellaswag", "-c", "128"], "slow"),
    "hs-gemma-np16": (G, HS, ["--hellaswag", "-c", "128", "-np", "16"], "slow"),
    "hs-qwen": (Q, HS, ["--hellaswag", "-c", "128"], "slow"),
    "wg-gemma-t6": (G, WG, ["--winogrande", "--winogrande-tasks", "6", "-c", "128"], "fast"),
    "wg-gemma": (G, WG, ["--winogrande", "-c", "128"], "slow"),
    "wg-qwen-np8": (Q, WG, ["--winogrande", "-c", "128", "-np", "8"], "slow"),
    "mc-gemma-np16-t6": (G, MC, ["--multiple-choice", "--multiple-choice-tasks", "6", "-c",
                                 "128", "-np", "16"], "fast"),
    "mc-gemma-np16": (G, MC, ["--multiple-choice", "-c", "128", "-np", "16"], "slow"),
    "mc-qwen-np5": (Q, MC, ["--multiple-choice", "-c", "128", "-np", "5"], "slow"),
    "stride-gemma-c128-k2": (G, None, ["--ppl-stride", "128", "-c", "128", "-b", "128",
                                       "--chunks", "2"], "fast"),
    "stride-gemma-c128": (G, None, ["--ppl-stride", "128", "-c", "128", "-b", "128",
                                    "--chunks", "8"], "slow"),
    "stride-qwen-c256": (Q, None, ["--ppl-stride", "128", "-c", "256", "-b", "256",
                                   "--chunks", "4", "--ppl-output-type", "1"], "slow"),
    # llama.cpp's own handling of bad input (its messages; it returns 0, pyllama exits 1)
    "bad-hs-lines": (G, "bad-hs-lines.txt", ["--hellaswag", "-c", "128"], "bad"),
    "bad-wg-none": (G, "bad-wg-none.csv", ["--winogrande", "-c", "128"], "bad"),
    "bad-mc-truncated": (G, "bad-mc-truncated.bin", ["--multiple-choice", "-c", "128"], "bad"),
    "bad-mc-np4": (G, MC, ["--multiple-choice", "-c", "128"], "bad"),    # 5 answers, 4 seqs
    # -b 2048 -c 512: 4 sequences of 768 cells, a 3072-token window: llama.cpp stops silently
    "bad-stride-b2048": (G, None, ["--ppl-stride", "128", "-c", "512", "--chunks", "1"],
                         "silent"),
}
# the scoring functions' stderr messages (after the log prefix)
MESSAGE = re.compile(r"^(hellaswag_score|winogrande_score|load_winogrande_from_csv|"
                     r"multiple_choice_score|multiple_choice_prepare_one_task|perplexity_v2|"
                     r"Final|Random chance|Will perform|=====)")
PREFIX = re.compile(r"\d+\.\d\d\.\d\d\d\.\d\d\d [IWED] ")


def messages(stderr: str) -> list[str]:
    """The scoring functions' stderr messages: split at log prefixes and newlines (a LOG_INF
    without a newline runs into the next message), kept when MESSAGE matches, timings dropped."""
    out = []
    for piece in PREFIX.split(stderr):
        for line in piece.split("\n"):
            line = line.rstrip()
            if MESSAGE.match(line) and "seconds per pass" not in line:
                out.append(line)
    return out


def stdout_text(data: bytes) -> str:
    return re.sub(r"\d+\.\d\d minutes", "N minutes", data.decode("utf-8", "replace"))


# ---- the task files -----------------------------------------------------------------------------
def _s(b: bytes) -> bytes:
    return struct.pack("<I", len(b)) + b


def _answers(answers, labels) -> bytes:
    return (struct.pack("<I", len(answers)) + b"".join(_s(a.encode()) for a in answers)
            + struct.pack(f"<{len(labels)}i", *labels))


def mc_bytes(tasks) -> bytes:
    """llama-perplexity's multiple-choice format: uint32 n, uint32 offsets[n], then each task:
    question, mc1 (answers, labels: one correct), mc2 (answers, labels: any correct)."""
    bodies = []
    for t in tasks:
        labels = [int(i == t["c"]) for i in range(len(t["a"]))]
        bodies.append(_s(t["q"].encode()) + _answers(t["a"], labels) + _answers(t["a"], labels))
    pos = 4 + 4 * len(tasks)
    offsets = []
    for b in bodies:
        offsets.append(pos)
        pos += len(b)
    return struct.pack(f"<I{len(tasks)}I", len(tasks), *offsets) + b"".join(bodies)


def write_data() -> None:
    """mc-20.bin from mc-20.json, and the bad-* files cut from the good ones."""
    with open(os.path.join(DATA, "mc-20.json"), encoding="utf-8") as f:
        tasks = json.load(f)["tasks"]
    data = mc_bytes(tasks)
    with open(os.path.join(DATA, MC), "wb") as f:
        f.write(data)
    with open(os.path.join(DATA, HS), encoding="utf-8") as f:
        lines = f.read().split("\n")
    with open(os.path.join(DATA, "bad-hs-lines.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines[:9]) + "\n")                 # 9 lines: not 6 per task
    with open(os.path.join(DATA, "bad-wg-none.csv"), "w", encoding="utf-8") as f:
        f.write("index,sentence,option1,option2,answer\n0,no blank here,a,b,1\n1,x _ y,a,b,3\n\n")
    off3 = struct.unpack_from("<I", data, 4 + 4 * 2)[0]
    with open(os.path.join(DATA, "bad-mc-truncated.bin"), "wb") as f:
        f.write(data[:off3 + 10])                              # task 3 cut short


# ---- the C++ standard library's picks ---------------------------------------------------------
RNG_CPP = r"""
#include <cstdio>
#include <random>
#include <vector>
int main() {
    const size_t hs_totals[] = {20, 10042};
    for (size_t total : hs_totals) {            // hellaswag_score: a draw among those left
        std::mt19937 rng(1);
        printf("hs %zu", total);
        for (size_t i = 0; i < 60 && i < total; ++i) {
            std::uniform_int_distribution<size_t> dist(0, total - i - 1);
            printf(" %zu", dist(rng));
        }
        printf("\n");
    }
    const size_t sc_totals[] = {20, 1267, 100000};
    for (size_t total : sc_totals) {            // winogrande / multiple choice: scaled draws
        std::mt19937 rng(1);
        float scale = 1/(1.f + (float)rng.max());
        std::vector<int> aux(total);
        for (size_t i = 0; i < total; ++i) aux[i] = i;
        printf("sc %zu", total);
        for (size_t i = 0; i < 60 && i < total; ++i) {
            int j = int(scale*rng()*aux.size());
            printf(" %d", aux[j]);
            aux[j] = aux.back();
            aux.pop_back();
        }
        printf("\n");
    }
}
"""


def rng_reference() -> dict:
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "rng.cpp"), os.path.join(d, "rng")
        with open(src, "w") as f:
            f.write(RNG_CPP)
        subprocess.run(["g++", "-O2", "-std=c++17", src, "-o", exe], check=True)
        text = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    out = {"hellaswag": {}, "scaled": {}}
    for line in text.splitlines():
        kind, total, *vals = line.split()
        out["hellaswag" if kind == "hs" else "scaled"][total] = [int(v) for v in vals]
    return out


def main() -> None:
    args = sys.argv[1:]
    if "--data" in args:
        args.remove("--data")
        write_data()
    bindir = args[0] if args else "/work/llamacpp/build/bin"
    from pyllama.models import resolve
    out = {"llama.cpp": "0c1e570", "command": "llama-perplexity -m MODEL -f FILE ARGS -t 2 "
           "(multiple choice: -bf FILE; strided: -f tests/data/GPL-3.txt)",
           "rng": rng_reference(), "cases": {}}
    for name, (model, task, extra, kind) in CASES.items():
        path = GPL3 if task is None else os.path.join(DATA, task)
        flag = "-bf" if task and task.endswith(".bin") else "-f"
        cmd = [os.path.join(bindir, "llama-perplexity"), "-m", resolve(model), flag, path,
               *extra, "-t", "2"]
        r = subprocess.run(cmd, capture_output=True)
        err = r.stderr.decode("utf-8", "replace")
        out["cases"][name] = {"model": model, "file": task, "args": extra, "kind": kind,
                              "rc": r.returncode, "stdout": stdout_text(r.stdout),
                              "messages": messages(err)}
        print(name, r.returncode, out["cases"][name]["messages"][-2:], file=sys.stderr)
    with open(os.path.join(HERE, "data", "ppltasks-llamacpp.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
