"""Per-type CPU quant matmul kernel throughput, in the llama.cpp numerics (the kernel llama.cpp's
CPU backend picks for that shape: pyllama.backend.compat.matmul) and the invariant numerics
(backend.matmul).

Weights: the ggml-quantized rows of tests/data/quant/ggml_iq_ref.npz (real quantizer output,
16 rows x 512 columns), tiled to ROWS x K (blocks are self-contained, so tiling keeps every block
valid). Activations: gaussian. Figures: best of several rounds, one thread, microseconds per call
and weight GB/s. On a shared machine only the ratios between two builds run back to back mean
something: `--compare DIR` imports a second build (a directory holding a pyllama tree with
built extensions, e.g. a git worktree) in a subprocess and interleaves the rounds.

`--callgrind` counts instructions instead (valgrind's callgrind, load-independent): one call of
the row-tile driver `_tiles` of _matmul (backend.matmul's kernels: the invariant numerics, and
the llama.cpp numerics' kernels for the repacked 8x8 types and from 8 tokens) per type and token
count. Valgrind decodes no AVX-512, so this needs an AVX2 build (PYLLAMA_MARCH=x86-64-v3).

Run: PYTHONPATH=$PWD python bench/quant_kernels.py [--types Q4_0,IQ4_XS] [--n 1,64]
     [--compare /path/to/other/tree] [--callgrind] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REF = os.path.join(ROOT, "tests", "data", "quant", "ggml_iq_ref.npz")
TYPES = ["Q4_0", "Q8_0", "IQ4_XS", "IQ4_NL", "MXFP4", "Q3_K", "Q2_K", "IQ3_S", "IQ2_XS"]
ROWS, K = 1024, 2048


def _weight(name: str, rows: int, k: int):
    from pyllama.backend.base import Weight
    from pyllama.gguf import GGMLType
    with np.load(REF) as z:
        raw = z["raw_" + name]
    reps_r, reps_c = rows // raw.shape[0], k // 512
    raw = np.ascontiguousarray(np.tile(raw, (reps_r, reps_c)))
    return Weight("w." + name, GGMLType[name], (rows, k), raw)


def measure(types, ns, rounds: int, rows: int, k: int) -> dict:
    """{f"{type}/{mode}/n{n}": best seconds per call}"""
    from pyllama.backend import compat
    from pyllama.backend.cpu import CpuBackend
    be = CpuBackend(1)
    out = {}
    rng = np.random.default_rng(0)
    for name in types:
        w = _weight(name, rows, k)
        for n in ns:
            x = rng.standard_normal((n, k)).astype(np.float32)
            for mode, fn in (("llama.cpp", lambda: compat.matmul(be, w, x)),
                             ("invariant", lambda: be.matmul(w, x))):
                fn()
                reps = max(1, int(2e-3 / max(1e-6, _once(fn))))
                best = float("inf")
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    for _ in range(reps):
                        fn()
                    best = min(best, (time.perf_counter() - t0) / reps)
                out[f"{name}/{mode}/n{n}"] = best
    return out


def _once(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _calls(types, ns, rows: int, k: int) -> None:
    """One backend.matmul call per (type, n), in order (the --callgrind driver's workload)."""
    from pyllama.backend.cpu import CpuBackend
    be = CpuBackend(1)
    rng = np.random.default_rng(0)
    for name in types:
        w = _weight(name, rows, k)
        for n in ns:
            be.matmul(w, rng.standard_normal((n, k)).astype(np.float32))


def callgrind(tree: str, args) -> dict:
    """{f"{type}/tiles/n{n}": instructions of one _tiles call} under valgrind --tool=callgrind"""
    import glob
    import tempfile
    fn = "*_matmul__tiles"
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
        cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--toggle-collect={fn}",
               f"--dump-after={fn}", f"--callgrind-out-file={tmp}/cg.out", sys.executable,
               os.path.abspath(__file__), "--types", ",".join(args.types),
               "--n", ",".join(map(str, args.n)), "--raw-calls"]
        subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=tree)
        counts = []
        for path in sorted(glob.glob(f"{tmp}/cg.out.*"), key=lambda p: int(p.rsplit(".", 1)[1])):
            with open(path) as f:
                tot = [ln for ln in f if ln.startswith(("totals:", "summary:"))]
            counts.append(int(tot[-1].split()[1]))
    keys = [f"{t}/tiles/n{n}" for t in args.types for n in args.n]
    if len(counts) != len(keys):
        raise RuntimeError(f"expected {len(keys)} callgrind dumps, got {len(counts)}")
    return dict(zip(keys, counts))


def _child(tree: str, args) -> dict:
    env = dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS="1")
    cmd = [sys.executable, os.path.abspath(__file__), "--types", ",".join(args.types),
           "--n", ",".join(map(str, args.n)), "--rounds", str(args.rounds), "--raw"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True, cwd=tree)
    return json.loads(r.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--types", type=lambda s: s.split(","), default=TYPES)
    ap.add_argument("--n", type=lambda s: [int(v) for v in s.split(",")], default=[1, 64])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--compare", help="a second source tree with built extensions (baseline)")
    ap.add_argument("--pairs", type=int, default=3, help="interleaved runs per build (--compare)")
    ap.add_argument("--json")
    ap.add_argument("--callgrind", action="store_true", help="instruction counts (AVX2 builds)")
    ap.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--raw-calls", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.raw_calls:
        _calls(args.types, args.n, ROWS, K)
        return
    if args.callgrind:
        res = {"this": callgrind(os.path.abspath(ROOT), args)}
        if args.compare:
            res["base"] = callgrind(os.path.abspath(args.compare), args)
        print(f"{'kernel':28s} {'instr':>12s}" + ("  base instr  ratio" if args.compare else ""))
        for key, c in res["this"].items():
            line = f"{key:28s} {c:12d}"
            if args.compare:
                line += f" {res['base'][key]:11d} {res['base'][key] / c:6.2f}x"
            print(line)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"rows": ROWS, "k": K, "instructions": res}, f, indent=1)
        return
    if args.raw:
        print(json.dumps(measure(args.types, args.n, args.rounds, ROWS, K)))
        return
    if not args.compare:
        res = {"this": measure(args.types, args.n, args.rounds, ROWS, K)}
    else:
        runs = {"this": [], "base": []}
        for _ in range(args.pairs):
            runs["this"].append(_child(os.path.abspath(ROOT), args))
            runs["base"].append(_child(os.path.abspath(args.compare), args))
        res = {b: {key: min(r[key] for r in rs) for key in rs[0]} for b, rs in runs.items()}
    wbytes = {name: _weight(name, ROWS, K).raw.nbytes for name in args.types}
    print(f"{'kernel':28s} {'us/call':>9s} {'GB/s':>6s}" + ("  base us  speedup" if args.compare else ""))
    for key, s in res["this"].items():
        line = f"{key:28s} {s * 1e6:9.1f} {wbytes[key.split('/')[0]] / s / 1e9:6.2f}"
        if args.compare:
            b = res["base"][key]
            line += f" {b * 1e6:8.1f} {b / s:7.2f}x"
        print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": ROWS, "k": K, **res}, f, indent=1)


if __name__ == "__main__":
    main()
