"""Write the random MoE benchmark model (tests/archsupport/specs.py BENCH: Qwen3-30B-A3B scaled
down, 128 experts, top 8) and quantize it with llama.cpp's own quantizer (Q4_K_M, no imatrix).
Run with the llama.cpp oracle's python (llama-cpp-python 0.3.36):

    /work/oracle/bin/python bench/moe_model.py OUT.gguf [--name qwen3moe-a3b-mini]

then `PYTHONPATH=. /work/oracle/bin/python bench/side_by_side.py --models OUT.gguf --pairs 3`.
"""
import argparse
import ctypes
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "archsupport"))
import specs  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--name", default="qwen3moe-a3b-mini")
    a = ap.parse_args()
    import llama_cpp as L
    src = a.out + ".f32.tmp"
    specs.write_model(src, a.name)
    L.llama_backend_init()
    qp = L.llama_model_quantize_default_params()
    qp.ftype, qp.nthread = 15, 2                       # LLAMA_FTYPE_MOSTLY_Q4_K_M
    rc = L.llama_model_quantize(src.encode(), a.out.encode(), ctypes.byref(qp))
    os.remove(src)
    if rc:
        raise SystemExit(f"llama_model_quantize failed: {rc}")
    print(a.out)


if __name__ == "__main__":
    main()
