"""Record prompt-cache (session) files of an MLA model written by llama.cpp 0c1e570's own
llama-completion into tests/data/session-deepseek2-llamacpp.json (read by
tests/test_arch_deepseek2.py): the random deepseek2 model of tests/archsupport/specs.py (absorbed
MLA: the cache holds K only, V a view of it), F32, one thread, greedy, -c 256, with flash
attention on and off (its v_trans word differs) and q8_0 / q4_0 caches; per run the session
file (base64 of its gzip), the printed text, and llama.cpp's KV cache size log lines
(llama_kv_cache: size = ... K / V; -v), plus those lines alone for -c 4096 (a size printed
exactly in MiB).

Usage: python tests/make_mla_session_fixture.py [/work/llamacpp/build/bin]
"""
import base64
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "archsupport"))
import specs  # noqa: E402

PROMPT = "The capital of France is"
ARGS = ["--temp", "0", "-no-cnv", "-c", "256", "-n", "4", "-t", "1"]
RUNS = {"fa_on": ["-fa", "on"], "fa_off": ["-fa", "off"],     # quantized: K (V its view) needs FA
        "q8_0": ["-fa", "on", "-ctk", "q8_0", "-ctv", "q8_0"],
        "q4_0": ["-fa", "on", "-ctk", "q4_0", "-ctv", "q4_0"]}


def run(bindir, model, session, *extra):
    cmd = [os.path.join(bindir, "llama-completion"), "-m", model, "-p", PROMPT, *ARGS,
           *(["--prompt-cache", session] if session else []), *extra, "-v"]
    r = subprocess.run(cmd, capture_output=True, check=True)
    err = r.stderr.decode("utf-8", "replace")
    return {"stdout": r.stdout.decode("utf-8", "replace"),
            "kv_log": [ln[ln.index("llama_kv_cache:"):].strip() for ln in err.splitlines()
                       if re.search(r"llama_kv_cache: .*(size = |KV buffer size)", ln)]}


def main() -> None:
    bindir = sys.argv[1] if len(sys.argv) > 1 else "/work/llamacpp/build/bin"
    out = {"source": "llama.cpp 0c1e570 llama-completion --prompt-cache",
           "model": "tests/archsupport/specs.py deepseek2, F32, seed 0", "prompt": PROMPT,
           "args": ARGS, "runs": {}}
    with tempfile.TemporaryDirectory() as d:
        model = os.path.join(d, "deepseek2.gguf")
        specs.write_model(model, "deepseek2")
        for name, extra in RUNS.items():
            path = os.path.join(d, name + ".bin")
            rec = run(bindir, model, path, *extra)
            with open(path, "rb") as f:
                data = f.read()
            rec.update(args=extra, size=len(data),
                       session_gz_b64=base64.b64encode(gzip.compress(data, 9, mtime=0)).decode())
            out["runs"][name] = rec
            print(name, len(data), rec["kv_log"], file=sys.stderr)
        out["kv_4096"] = run(bindir, model, None, "-c", "4096")["kv_log"]
        print(out["kv_4096"], file=sys.stderr)
    with open(os.path.join(HERE, "data", "session-deepseek2-llamacpp.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
