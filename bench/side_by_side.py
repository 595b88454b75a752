"""pp512 / tg128 / load time: pyllama vs llama.cpp (through llama-cpp-python), side by side.

    python bench/side_by_side.py [--models gemma-3-270m,qwen2.5-coder-0.5b] [--pairs 5] [-t 2]
        [--depth 4096]                            # also pp4096 (the prompt, 512-token
                                                  # ubatches) and tg128 after it
        [--numerics invariant|llama.cpp]          # pyllama's arithmetic (default invariant)
        [--flash-attn on|off]                     # both runtimes (default on: llama.cpp's -fa auto)
        [--llama-cpp-python /path/to/python]      # --models also takes GGUF paths

Runs the two runtimes interleaved (A B A B ...) in fresh subprocesses, reports medians and per-pair
ratios, and writes a JSON + markdown report with machine info under bench/results/. Besides the
wall-clock rates it records the process CPU time of each phase (all threads; *_cpu rows: lower is
better), which stays meaningful when the machine is shared. The load average is recorded. pp512 = one
decode of 512 prompt tokens (logits for the last), tg128 = 128 single-token decodes, same thread
count and context size for both. llama-cpp-python is optional (pip install llama-cpp-python==0.3.36
builds llama.cpp from source, ~10 minutes); without it only pyllama's figures are reported.
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
N_CTX = 1024      # raised to depth + 256 with --depth

WORKER = r'''
import json, os, sys, time
import numpy as np
runtime, path, n_threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
depth = int(sys.argv[4]) if len(sys.argv) > 4 else 0
rng = np.random.default_rng(0)
out = {}
t0, c0 = time.perf_counter(), time.process_time()
if runtime == "pyllama":
    import pyllama
    from pyllama.batch import Batch
    model = pyllama.load_model(path, n_threads=n_threads)
    n_vocab = model.n_vocab
    def new_ctx():
        return pyllama.Context(model, n_ctx=N_CTX, n_batch=512, n_ubatch=512, n_threads=n_threads,
                               numerics=os.environ.get("PYLLAMA_BENCH_NUMERICS", "invariant"),
                               flash_attn=os.environ.get("PYLLAMA_BENCH_FA", "on") == "on")
    def decode(ctx, toks, p0):
        flags = np.zeros(len(toks), bool); flags[-1] = True
        rc = ctx.decode(Batch(np.asarray(toks, np.int32), pos=np.arange(p0, p0 + len(toks), dtype=np.int32),
                              seq_ids=[0] * len(toks), logits=flags))
        assert rc == 0, rc
        ctx.get_logits_ith(-1)
    ctx = new_ctx()
    decode(ctx, [1], 0)
else:
    import llama_cpp as L                      # low-level C API only (works with a bare libllama)
    L.llama_backend_init()
    _quiet = L.llama_log_callback(lambda lvl, txt, ud: None)
    L.llama_log_set(_quiet, None)
    lmodel = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(lmodel))
    lbatch = L.llama_batch_init(512, 0, 1)
    def new_ctx():
        cp = L.llama_context_default_params()
        cp.n_ctx = N_CTX; cp.n_batch = 512; cp.n_ubatch = 512
        cp.n_threads = n_threads; cp.n_threads_batch = n_threads
        cp.flash_attn_type = {"on": 1, "off": 0}[os.environ.get("PYLLAMA_BENCH_FA", "on")]
        return L.llama_init_from_model(lmodel, cp)
    def decode(ctx, toks, p0):
        lbatch.n_tokens = len(toks)
        for j, t in enumerate(toks):
            lbatch.token[j] = t; lbatch.pos[j] = p0 + j; lbatch.n_seq_id[j] = 1
            lbatch.seq_id[j][0] = 0; lbatch.logits[j] = j == len(toks) - 1
        rc = L.llama_decode(ctx, lbatch)
        assert rc == 0, rc
        L.llama_get_logits_ith(ctx, len(toks) - 1)
    decode(new_ctx(), [1], 0)
out["load_s"] = time.perf_counter() - t0
out["load_cpu_s"] = time.process_time() - c0
toks = [int(t) for t in rng.integers(100, min(n_vocab, 30000), 512)]
ctx = new_ctx(); decode(ctx, toks[:16], 0)                 # warm-up
ctx = new_ctx()
t, c = time.perf_counter(), time.process_time()
decode(ctx, toks, 0)
out["pp512"] = 512 / (time.perf_counter() - t)
out["pp512_cpu_s"] = time.process_time() - c
ctx = new_ctx(); decode(ctx, toks[:1], 0)
t, c = time.perf_counter(), time.process_time()
for i in range(128):
    decode(ctx, [toks[i + 1]], i + 1)
out["tg128"] = 128 / (time.perf_counter() - t)
if runtime == "pyllama":
    from pyllama import omp
    out["poll"] = omp.current()              # the OpenMP wait policy the run got (--poll level)
out["tg_cpu_ms"] = (time.process_time() - c) / 128 * 1e3
if depth:                                    # tg128 after a depth-token prompt (llama-bench -d)
    ctx = new_ctx()
    dtoks = [int(t) for t in rng.integers(100, min(n_vocab, 30000), depth)]
    t = time.perf_counter()
    for j in range(0, depth, 512):             # the prompt in 512-token ubatches: pp{depth}
        decode(ctx, dtoks[j:j + 512], j)
    out[f"pp{depth}"] = depth / (time.perf_counter() - t)
    t = time.perf_counter()
    for i in range(128):
        decode(ctx, [toks[i + 1]], depth + i)
    out[f"tg128_d{depth}"] = 128 / (time.perf_counter() - t)
print(json.dumps(out))
'''.replace("N_CTX", str(N_CTX))


LLAMA_CPP_PYTHON = None      # --llama-cpp-python: another interpreter for the llama.cpp worker


DEPTH = 0          # --depth


def run(runtime: str, path: str, threads: int) -> dict:
    env = dict(os.environ)
    exe = LLAMA_CPP_PYTHON if runtime == "llama.cpp" and LLAMA_CPP_PYTHON else sys.executable
    worker = WORKER if not DEPTH else WORKER.replace(
        "n_ctx=1024", f"n_ctx={DEPTH + 256}").replace(
        "cp.n_ctx = 1024", f"cp.n_ctx = {DEPTH + 256}")
    r = subprocess.run([exe, "-c", worker, runtime, path, str(threads), str(DEPTH)],
                       capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{runtime} failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def have_llama_cpp() -> bool:
    if LLAMA_CPP_PYTHON:
        return subprocess.run([LLAMA_CPP_PYTHON, "-c", "import llama_cpp"]).returncode == 0
    try:
        import llama_cpp  # noqa: F401
        return True
    except ImportError:
        return False


def machine_info() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"), "loadavg": os.getloadavg()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gemma-3-270m,qwen2.5-coder-0.5b")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--depth", type=int, default=0,
                    help="also tg128 after a prompt of this many tokens (e.g. 4096)")
    ap.add_argument("--numerics", default="invariant", choices=["invariant", "llama.cpp"],
                    help="pyllama's numerics (the library default is invariant)")
    ap.add_argument("--flash-attn", default="on", choices=["on", "off"],
                    help="flash attention for both runtimes (default on: what llama.cpp's default "
                         "-fa auto picks on its CPU backend)")
    ap.add_argument("--llama-cpp-python", default=None,
                    help="python with llama-cpp-python for the llama.cpp side (default: this one)")
    args = ap.parse_args()
    global LLAMA_CPP_PYTHON, DEPTH
    LLAMA_CPP_PYTHON = args.llama_cpp_python
    DEPTH = args.depth
    os.environ["PYLLAMA_BENCH_NUMERICS"] = args.numerics
    os.environ["PYLLAMA_BENCH_FA"] = args.flash_attn
    sys.path.insert(0, os.path.dirname(HERE))
    from pyllama.models import resolve
    runtimes = ["pyllama"] + (["llama.cpp"] if have_llama_cpp() else [])
    report = {"machine": machine_info(), "threads": args.threads, "numerics": args.numerics,
              "flash_attn": args.flash_attn, "results": {}}
    for alias in args.models.split(","):
        path = resolve(alias)
        rows = {rt: [] for rt in runtimes}
        for i in range(args.pairs):
            for rt in runtimes:
                rows[rt].append(run(rt, path, args.threads))
                print(f"{alias} pair {i} {rt}: {rows[rt][-1]}", file=sys.stderr)
        report["results"][alias] = rows
    write_report(report, runtimes)
    return 0


def write_report(report: dict, runtimes: list) -> None:
    lines = [f"# pyllama vs llama.cpp, {report['machine']['date']}",
             f"{report['machine']['cpu']}, {report['machine']['cores']} cores, "
             f"{report['threads']} threads, pyllama numerics {report['numerics']}, flash attention "
             f"{report.get('flash_attn', 'off')}, load average at start "
             f"{report['machine']['loadavg'][0]:.1f}", "",
             "| model | test | pyllama | llama.cpp | ratio (median of pair ratios) |",
             "|---|---|---|---|---|"]
    for alias, rows in report["results"].items():
        tests = ["pp512", "tg128"] + [t for t in rows["pyllama"][0]
                                      if t.startswith("tg128_d") or (t.startswith("pp") and
                                                                    t not in ("pp512", "pp512_cpu_s"))]
        for test in tests + ["load_s", "pp512_cpu_s", "tg_cpu_ms", "load_cpu_s"]:
            a = [r[test] for r in rows["pyllama"]]
            if "llama.cpp" in rows:
                b = [r[test] for r in rows["llama.cpp"]]
                ratios = [x / y for x, y in zip(a, b)]
                lines.append(f"| {alias} | {test} | {statistics.median(a):.2f} | "
                             f"{statistics.median(b):.2f} | {statistics.median(ratios):.2f} |")
            else:
                lines.append(f"| {alias} | {test} | {statistics.median(a):.2f} | n/a | n/a |")
    text = "\n".join(lines) + "\n"
    print(text)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", f"side_by_side-{stamp}.json"), "w") as f:
        json.dump(report, f, indent=1)
    with open(os.path.join(HERE, "results", f"side_by_side-{stamp}.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    sys.exit(main())
