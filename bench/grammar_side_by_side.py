"""Constrained generation speed: pyllama vs llama.cpp through llama-cpp-python's LlamaGrammar,
side by side: tg unconstrained, with grammars/json.gbnf and with a 10-property JSON schema, on the
bundled models.

    python bench/grammar_side_by_side.py [--models gemma-3-270m,qwen2.5-coder-0.5b] [-n 96]
        [--pairs 2] [-t 2] [--oracle-python /work/oracle/bin/python]

Each run is a fresh subprocess; the two runtimes alternate (A B A B ...). Greedy, same prompt,
context size and thread count. tg = (tokens - 1) / (time from the first generated token to the
last), so prompt processing is out; generation stops at n tokens or end of generation (both
runtimes stop at the same place only when their tokens agree, so the token counts are printed).
llama-cpp-python runs the grammar over the whole vocabulary inside its sampler chain on every
token; pyllama samples first and applies the grammar only when it rejects the sampled token
(llama.cpp's common sampler, llama-completion's order). CPU seconds per token are recorded too
(meaningful on a shared machine). Results (markdown + JSON) go to bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
N_CTX = 1024
SCHEMA_10 = json.load(open(os.path.join(REPO, "tests", "data", "grammar", "schema10.json")))
PROMPT = "Write a detailed JSON record for a library user, with many fields:\n"

WORKER = r'''
import json, sys, time
runtime, path, n_threads, n, gbnf = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
prompt = sys.argv[6]
gbnf = open(gbnf).read() if gbnf != "-" else ""
stamps, cpu = [], []
if runtime == "pyllama":
    import pyllama
    from pyllama.generate import generate
    from pyllama.sampling import SamplerChain, SamplerParams
    model = pyllama.load_model(path, n_threads=n_threads)
    ctx = pyllama.Context(model, n_ctx=N_CTX, n_threads=n_threads)
    sp = SamplerChain(SamplerParams(temp=0.0, seed=1, grammar=gbnf), model.n_vocab,
                      eog_ids=tuple(model.vocab.eog_ids), vocab=model.vocab)
    ids = model.tokenize(prompt, True, False)
    toks = []
    for t in generate(ctx, ids, sp, n_predict=n):
        stamps.append(time.perf_counter()); cpu.append(time.process_time()); toks.append(int(t))
else:
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=N_CTX, n_threads=n_threads, n_threads_batch=n_threads,
                          n_batch=512, verbose=False)
    grammar = llama_cpp.LlamaGrammar.from_string(gbnf, verbose=False) if gbnf else None
    toks = []
    for ch in llm.create_completion(prompt, max_tokens=n, temperature=0.0, top_k=40, top_p=0.95,
                                    min_p=0.05, repeat_penalty=1.0, seed=1, grammar=grammar,
                                    stream=True):
        stamps.append(time.perf_counter()); cpu.append(time.process_time())
        toks.append(ch["choices"][0]["text"])
k = len(stamps)
tg = (k - 1) / (stamps[-1] - stamps[0]) if k > 1 else 0.0
cpu_tok = (cpu[-1] - cpu[0]) / (k - 1) if k > 1 else 0.0
print(json.dumps({"tg": tg, "n": k, "cpu_ms_per_token": cpu_tok * 1e3}))
'''.replace("N_CTX", str(N_CTX))


def run(python, runtime, path, threads, n, gbnf_file, env):
    r = subprocess.run([python, "-c", WORKER, runtime, path, str(threads), str(n), gbnf_file,
                        PROMPT], capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{runtime} failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="gemma-3-270m,qwen2.5-coder-0.5b")
    ap.add_argument("-n", type=int, default=96)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--oracle-python", default="/work/oracle/bin/python")
    ap.add_argument("--grammars", default="none,json,schema10")
    args = ap.parse_args()
    sys.path.insert(0, REPO)
    from pyllama.grammar import json_schema_to_gbnf
    from pyllama.models import resolve
    import tempfile
    tmp = tempfile.mkdtemp()
    files = {"none": "-"}
    jpath = os.path.join(tmp, "json.gbnf")
    src = json.load(open(os.path.join(REPO, "tests", "data", "grammar", "llamacpp-cases.json")))
    open(jpath, "w").write(src["grammars"]["json.gbnf"])
    files["json"] = jpath
    spath = os.path.join(tmp, "schema10.gbnf")
    open(spath, "w").write(json_schema_to_gbnf(SCHEMA_10))
    files["schema10"] = spath
    env = {**os.environ, "PYTHONPATH": REPO}
    have_oracle = os.path.exists(args.oracle_python)
    rows = []
    for alias in args.models.split(","):
        path = resolve(alias, progress=False)
        for g in args.grammars.split(","):
            res = {"pyllama": [], "llama.cpp": []}
            for _ in range(args.pairs):
                res["pyllama"].append(run(sys.executable, "pyllama", path, args.threads, args.n,
                                          files[g], env))
                if have_oracle:
                    res["llama.cpp"].append(run(args.oracle_python, "llama_cpp", path,
                                                args.threads, args.n, files[g], env))
            row = {"model": alias, "grammar": g}
            for rt, runs in res.items():
                if runs:
                    row[rt] = {"tg": statistics.median(r["tg"] for r in runs),
                               "cpu_ms_per_token": statistics.median(r["cpu_ms_per_token"]
                                                                     for r in runs),
                               "n": [r["n"] for r in runs]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    stamp = time.strftime("%Y%m%d-%H%M")
    out = os.path.join(HERE, "results", f"grammar-side-by-side-{stamp}")
    meta = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "threads": args.threads, "n": args.n, "pairs": args.pairs, "loadavg": load,
            "prompt": PROMPT}
    with open(out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
    lines = [f"# Constrained generation, pyllama vs llama-cpp-python LlamaGrammar ({stamp})", "",
             f"{meta['cpus']} CPUs, {args.threads} threads, greedy, up to {args.n} tokens, "
             f"{args.pairs} interleaved pairs (medians), load average {load}.", "",
             "| model | grammar | pyllama tg t/s | llama.cpp tg t/s | pyllama CPU ms/tok | "
             "llama.cpp CPU ms/tok | tokens (pyllama / llama.cpp) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        p, l = r.get("pyllama", {}), r.get("llama.cpp", {})
        lines.append(f"| {r['model']} | {r['grammar']} | {p.get('tg', 0):.1f} | "
                     f"{l.get('tg', 0):.1f} | {p.get('cpu_ms_per_token', 0):.1f} | "
                     f"{l.get('cpu_ms_per_token', 0):.1f} | {p.get('n')} / {l.get('n')} |")
    with open(out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
