"""Constrained generation, executable against executable: pyllama's `llama-completion` and
llama.cpp's own `llama-completion --grammar-file` (its common sampler: sample first, apply the
grammar only when it rejects the sampled token), unconstrained, with grammars/json.gbnf and with
the 10-property JSON schema of tests/data/grammar/schema10.json (converted to GBNF by
json_schema_to_gbnf, the text llama.cpp's converter gives), on the bundled models.

    PYTHONPATH=. python bench/grammar_llamacpp_completion.py \\
        [--exe /work/llamacpp/build/bin/llama-completion] [-n 128] [-t 2] [--pairs 1]

Same prompt, model file, -n, -t, -c, greedy (--temp 0) for both; runs alternate (pyllama,
llama.cpp, pyllama, ...). Time per token = (sampling time + eval time) / eval runs from the
common_perf_print lines both executables print, so loading and the prompt are out; sampling time
is shown alone too (it holds the grammar's cost). Medians over --pairs. pyllama runs with its
tool defaults (--numerics llama.cpp). Results (markdown + JSON) go to bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PROMPT = "Write a detailed JSON record for a library user, with many fields:\n"
_PERF = {k: re.compile(rf"common_perf_print:\s+{k} time =\s+([0-9.]+) ms(?: /\s+(\d+))?")
         for k in ("sampling", "eval")}


def grammars() -> dict[str, str]:
    sys.path.insert(0, REPO)
    from pyllama.grammar import json_schema_to_gbnf
    cases = json.load(open(os.path.join(REPO, "tests", "data", "grammar", "llamacpp-cases.json")))
    schema = json.load(open(os.path.join(REPO, "tests", "data", "grammar", "schema10.json")))
    return {"none": "", "json": cases["grammars"]["json.gbnf"],
            "schema10": json_schema_to_gbnf(schema)}


def perf(stderr: str) -> dict:
    out = {}
    for k, rx in _PERF.items():
        found = rx.findall(stderr)
        if not found:
            raise RuntimeError(f"no '{k} time' line in:\n{stderr[-1500:]}")
        ms, n = found[-1]
        out[k + "_ms"], out[k + "_n"] = float(ms), int(n or 0)
    runs = max(1, out["eval_n"])
    out["ms_per_token"] = (out["sampling_ms"] + out["eval_ms"]) / runs
    out["sampling_ms_per_token"] = out["sampling_ms"] / runs
    return out


def run(cmd: list[str], env=None) -> dict:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({r.returncode}): {r.stderr[-1500:]}")
    res = perf(r.stderr)
    res["wall_s"] = round(time.perf_counter() - t0, 2)
    res["text"] = r.stdout[:200]
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--exe", default="/work/llamacpp/build/bin/llama-completion")
    ap.add_argument("--models", default="gemma-3-270m,qwen2.5-coder-0.5b")
    ap.add_argument("--grammars", default="none,json,schema10")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-c", "--ctx-size", type=int, default=1024)
    ap.add_argument("--pairs", type=int, default=1)
    ap.add_argument("--pyllama-args", default="",
                    help="extra flags for pyllama's runs, e.g. '--numerics invariant'")
    ap.add_argument("--out", default=os.path.join(HERE, "results", time.strftime(
        "grammar-llamacpp-completion-%Y%m%d-%H%M", time.gmtime())))
    args = ap.parse_args(argv)
    from pyllama.models import resolve
    gs = {k: v for k, v in grammars().items() if k in args.grammars.split(",")}
    env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
    rows, load0 = [], [round(x, 2) for x in os.getloadavg()]
    extra = shlex.split(args.pyllama_args)
    with tempfile.TemporaryDirectory() as tmp:
        for alias in args.models.split(","):
            path = resolve(alias)
            cmds = {}
            for gname, text in gs.items():
                common = ["-m", path, "-p", PROMPT, "-n", str(args.n), "--temp", "0", "-t",
                          str(args.threads), "-c", str(args.ctx_size), "--no-display-prompt"]
                if text:
                    gf = os.path.join(tmp, gname + ".gbnf")
                    with open(gf, "w", encoding="utf-8") as f:
                        f.write(text)
                    common += ["--grammar-file", gf]
                cmds[gname] = {"pyllama": [sys.executable, "-m", "pyllama", "completion",
                                           *common, "-no-cnv", *extra],
                               "llama.cpp": [args.exe, *common, "-no-cnv"]}
            # round robin over (grammar, executable) within each pair, so that a change in the
            # machine's load falls on every row alike rather than on one grammar's runs
            res = {g: {"pyllama": [], "llama.cpp": []} for g in cmds}
            for _ in range(args.pairs):
                for gname, c in cmds.items():
                    for who in ("pyllama", "llama.cpp"):
                        res[gname][who].append(run(c[who], None if who == "llama.cpp" else env))
            for gname, rr in res.items():
                row = {"model": alias, "grammar": gname}
                for who, rs in rr.items():
                    row[who] = {k: statistics.median(r[k] for r in rs) for k in
                                ("ms_per_token", "sampling_ms_per_token", "eval_n")}
                    row[who]["text"] = rs[-1]["text"]
                print(json.dumps(row), flush=True)
                rows.append(row)
    report = {"args": vars(args), "loadavg_before": load0,
              "loadavg_after": [round(x, 2) for x in os.getloadavg()], "rows": rows,
              "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime())}
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    md = markdown(report)
    with open(args.out + ".md", "w") as f:
        f.write(md)
    print(md)
    return 0


def markdown(rep: dict) -> str:
    a = rep["args"]
    base = {(r["model"], w): r[w]["ms_per_token"] for r in rep["rows"] if r["grammar"] == "none"
            for w in ("pyllama", "llama.cpp")}
    base_s = {(r["model"], w): r[w]["sampling_ms_per_token"] for r in rep["rows"]
              if r["grammar"] == "none" for w in ("pyllama", "llama.cpp")}
    lines = [f"# Constrained generation: pyllama's llama-completion vs llama.cpp's "
             f"llama-completion --grammar-file ({rep['date_utc']} UTC)", "",
             f"{os.cpu_count()} CPUs, -t {a['threads']}, greedy, -n {a['n']}, -c {a['ctx_size']}, "
             f"{a['pairs']} interleaved pair(s) (medians); load average before "
             f"{rep['loadavg_before']}, after {rep['loadavg_after']} (shared machine).",
             "ms/token = (sampling + eval time) / eval runs, from each executable's "
             "common_perf_print lines; grammar cost = sampling ms/token minus the unconstrained "
             "run's (the grammar's own time, apart from the model's eval).",
             f"pyllama's extra flags: {a.get('pyllama_args') or 'none'} (tool defaults "
             "otherwise: --numerics llama.cpp).", "",
             "| model | grammar | pyllama ms/token | llama.cpp ms/token | pyllama sampling "
             "ms/token | llama.cpp sampling ms/token | vs unconstrained (pyllama / llama.cpp) "
             "| grammar cost ms/token (pyllama / llama.cpp) | eval runs (pyllama / llama.cpp) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rep["rows"]:
        p, c = r["pyllama"], r["llama.cpp"]
        rel = [f"{x['ms_per_token'] / base[(r['model'], w)]:.2f}x"
               if base.get((r["model"], w)) else "-" for w, x in (("pyllama", p),
                                                                    ("llama.cpp", c))]
        cost = [f"{x['sampling_ms_per_token'] - base_s[(r['model'], w)]:.2f}"
                if (r["model"], w) in base_s else "-" for w, x in (("pyllama", p),
                                                                  ("llama.cpp", c))]
        lines.append(f"| {r['model']} | {r['grammar']} | {p['ms_per_token']:.1f} | "
                     f"{c['ms_per_token']:.1f} | {p['sampling_ms_per_token']:.2f} | "
                     f"{c['sampling_ms_per_token']:.2f} | {rel[0]} / {rel[1]} | {cost[0]} / {cost[1]} | "
                     f"{p['eval_n']} / {c['eval_n']} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
