"""pp/tg speed of a backend on one model, llama-bench style (prompt processing of -p tokens in
one ubatch, then -n single-token decode steps; t/s mean +- std over -r runs), plus an optional
check of the CUDA logits against the CPU backend on the same tokens.

    PYTHONPATH=. python bench/cuda_bench.py MODEL [--backend cuda] [-p 512] [-n 128] [-r 3]
                                            [--check]

MODEL: a path or bundled alias; a synthetic copy (python -m pyllama.synthetic) measures the same
shapes without the real weights. Reports times, asserts nothing.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import pyllama
from pyllama import Context


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def run(model, n_prompt: int, n_gen: int, reps: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    ctx = Context(model, n_ctx=n_prompt + n_gen + 16, n_batch=max(n_prompt, 1),
                  n_ubatch=max(n_prompt, 1))
    toks = rng.integers(0, model.n_vocab, n_prompt + n_gen).astype(np.int32)
    ctx.eval(toks[:8])                                 # warm-up: kernels loaded, pools filled
    pp, tg = [], []
    for _ in range(reps):
        ctx.memory.clear()
        if n_prompt:
            pp.append(n_prompt / _timed(lambda: ctx.eval(toks[:n_prompt])))
        ctx.memory.clear()
        ctx.eval(toks[:1])

        def gen():
            for t in toks[n_prompt:n_prompt + n_gen]:
                ctx.eval([t])
        if n_gen:
            tg.append(n_gen / _timed(gen))
    return {"pp": pp, "tg": tg}


def check(path: str, backend: str, n: int = 16) -> str:
    """Max |logit difference| and argmax agreement, backend vs cpu, over n prompt tokens."""
    rng = np.random.default_rng(1)
    a_model = pyllama.load_model(path, backend=backend)
    toks = rng.integers(0, a_model.n_vocab, n).astype(np.int32)
    a = Context(a_model, n_ctx=64).eval(toks, logits_all=True)
    b = Context(pyllama.load_model(path, backend="cpu"), n_ctx=64).eval(toks, logits_all=True)
    agree = float((a.argmax(-1) == b.argmax(-1)).mean())
    return (f"check {backend} vs cpu: max |dlogit| {np.abs(a - b).max():.4g} "
            f"(logit range {np.abs(b).max():.4g}), argmax agreement {agree:.2f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cuda_bench.py")
    ap.add_argument("model")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args(argv)
    path = pyllama.models.resolve(a.model)
    model = pyllama.load_model(path, backend=a.backend)
    res = run(model, a.p, a.n, a.r)
    print("| model | backend | test | t/s |\n|---|---|---|---|")
    for key, n in (("pp", a.p), ("tg", a.n)):
        if res[key]:
            v = np.asarray(res[key])
            print(f"| {model.desc} | {a.backend} | {key}{n} | {v.mean():.2f} +- {v.std():.2f} |")
    if a.check:
        print(check(path, a.backend))
    return 0


if __name__ == "__main__":
    sys.exit(main())
