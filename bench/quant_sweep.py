"""Accuracy sweep over every weight type: pyllama vs llama.cpp on the same random-weight llama.

    python bench/quant_sweep.py [--types Q4_0,IQ4_XS,...] [--numerics llama.cpp|invariant]
                                [--oracle /work/oracle/bin/python] [--work DIR]

A random-weight llama (tests/tiny.py's writer, llama.cpp's tensor and metadata names, F32,
n_embd 256, n_ff 512, 2 layers, 276-token vocab) is quantized by llama.cpp's own quantizer
(llama_model_quantize, pure: every 2D tensor in the type; IQ1/IQ2 with an importance matrix)
through llama-cpp-python (bench/quant_sweep_llamacpp.py), and llama.cpp (2 threads, flash
attention off) and pyllama (2 threads) run the same tokens: a 24-token prompt as one batch, then
8 single-token decodes. Reported per type: mean |Δ log p(next token)| over the 31 predicted
positions, max |Δ logit|, top-1 agreement, and whether every logit is bit-identical.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
         "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
         "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0"]
DIMS = {"embedding_length": 256, "feed_forward_length": 512, "block_count": 2,
        "attention.head_count": 4, "attention.head_count_kv": 2}
N_PROMPT, N_DECODE = 24, 8
ORACLE = os.environ.get("LLAMACPP_ORACLE_PY", "/work/oracle/bin/python")


def base_model(work: str) -> str:
    from tiny import write_tiny_gguf
    path = os.path.join(work, "base-f32.gguf")
    if not os.path.exists(path):
        write_tiny_gguf(path, "llama", seed=15, overrides=DIMS, all_f32=True, embd_std=0.5)
    return path


def tokens() -> np.ndarray:
    from tiny import random_tokens
    return random_tokens(N_PROMPT + N_DECODE, seed=3)


def run_llamacpp(base: str, work: str, types, toks) -> None:
    todo = [t for t in types if not os.path.exists(os.path.join(work, f"{t}.npz"))]
    if todo:
        subprocess.run([ORACLE, os.path.join(ROOT, "bench", "quant_sweep_llamacpp.py"), base, work,
                        ",".join(todo), ",".join(map(str, toks)), str(N_PROMPT)], check=True)


def run_pyllama(path: str, toks, numerics: str) -> np.ndarray:
    import pyllama
    model = pyllama.load_model(path, n_threads=2)
    ctx = pyllama.Context(model, n_ctx=256, n_batch=256, n_ubatch=256, n_threads=2,
                          numerics=numerics)
    out = [ctx.eval(toks[:N_PROMPT], logits_all=True)]
    for i in range(N_PROMPT, len(toks)):
        out.append(ctx.eval(toks[i:i + 1]))
    return np.concatenate(out)


def log_softmax(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.float64)
    m = z.max(axis=1, keepdims=True)
    return z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))


def compare(ref: np.ndarray, ours: np.ndarray, toks) -> dict:
    nxt = np.asarray(toks[1:])
    lr, lo = log_softmax(ref[:-1]), log_softmax(ours[:-1])
    i = np.arange(len(nxt))
    return {"mean_dlogp": float(np.abs(lr[i, nxt] - lo[i, nxt]).mean()),
            "max_dlogit": float(np.abs(ref - ours).max()),
            "top1": float((ref.argmax(1) == ours.argmax(1)).mean()),
            "bitexact": bool(np.array_equal(ref.view(np.uint32), ours.view(np.uint32)))}


def sweep(types, numerics: str, work: str) -> dict:
    base = base_model(work)
    toks = tokens()
    run_llamacpp(base, work, types, toks)
    res = {}
    for t in types:
        with np.load(os.path.join(work, f"{t}.npz")) as z:
            if "error" in z.files:
                res[t] = {"error": "llama.cpp: " + str(z["error"])}
                continue
            ref = z["logits"]
        try:
            ours = run_pyllama(os.path.join(work, f"{t}.gguf"), toks, numerics)
        except Exception as e:          # reported, not hidden
            res[t] = {"error": f"pyllama: {type(e).__name__}: {e}"}
            continue
        res[t] = compare(ref, ours, toks)
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--numerics", default="llama.cpp")
    ap.add_argument("--work", default=os.path.join(tempfile.gettempdir(), "pyllama-quant-sweep"))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    res = sweep(a.types.split(","), a.numerics, a.work)
    print(f"| type | mean abs dlogp | max abs dlogit | top-1 | bit-identical |  ({a.numerics})")
    print("|---|---|---|---|---|")
    for t, r in res.items():
        if "error" in r:
            print(f"| {t} | {r['error']} | | | |")
        else:
            print(f"| {t} | {r['mean_dlogp']:.2e} | {r['max_dlogit']:.2e} | {r['top1']:.3f} | "
                  f"{'yes' if r['bitexact'] else 'no'} |")


if __name__ == "__main__":
    main()
