"""Requantize a bundled model with llama.cpp's own quantizer (llama_model_quantize through
llama-cpp-python 0.3.36, requantize allowed): the IQ4_XS / Q4_0 / Q8_0 variants of Gemma 3 270M
that issue 15's speed rows compare. Run it with the llama.cpp oracle's python:

    /work/oracle/bin/python bench/quant_variants.py OUTDIR [--model gemma-3-270m] [--types IQ4_XS,Q4_0,Q8_0]

then `PYTHONPATH=. /work/oracle/bin/python bench/side_by_side.py --models OUTDIR/gemma-IQ4_XS.gguf,...`.
The source is the bundled Q4_K_M file, so every variant is a requantization (as a user who only
has that file would make it); no importance matrix (the IQ1/IQ2 types would need one).
"""
import argparse
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

# llama.h's enum llama_ftype
FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_M": 12,
          "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18, "IQ3_S": 26, "IQ4_NL": 25, "IQ4_XS": 30}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("outdir")
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("--types", default="IQ4_XS,Q4_0,Q8_0")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    from pyllama.models import resolve          # the bundled file (no pyllama kernels needed)
    import llama_cpp as L
    src = resolve(a.model, progress=False)
    os.makedirs(a.outdir, exist_ok=True)
    L.llama_backend_init()
    stem = a.model.split("-")[0]
    for t in a.types.split(","):
        out = os.path.join(a.outdir, f"{stem}-{t}.gguf")
        qp = L.llama_model_quantize_default_params()
        qp.ftype, qp.nthread, qp.allow_requantize = FTYPES[t], a.threads, True
        rc = L.llama_model_quantize(src.encode(), out.encode(), ctypes.byref(qp))
        if rc:
            raise SystemExit(f"llama_model_quantize {t} failed: {rc}")
        print(out)


if __name__ == "__main__":
    main()
