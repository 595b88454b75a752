"""Regenerate tests/data/quant/ggml_quantize_ref.npz from a real ggml build (not a test).

    PYTHONPATH=. python tests/quant/make_ggml_ref.py /path/to/libggml-base.so /path/to/libggml-cpu.so

Calls ggml's own `quantize_row_*_ref` (and `ggml_fp32_to_{fp16,bf16}_row`) through ctypes on a
fixed set of inputs, plus the CPU backend's activation quantizers (`from_float` of the q8_0 /
q8_1 / q8_K type traits: what llama.cpp's matmul runs), and stores inputs and outputs;
test_quant_ggml.py compares pyllama.quant with them. The committed file came from ggml 0.25.3 (llama-cpp-python 0.3.36's vendored llama.cpp):
libggml-base built with gcc -O3 -std=gnu11 for plain x86-64 (no FMA contraction), libggml-cpu
with -march=native on an AVX2 (znver3) machine.
"""
import ctypes
import os
import sys

import numpy as np

TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q8_K",
         "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL"]
OUT = os.path.join(os.path.dirname(__file__), "..", "data", "quant", "ggml_quantize_ref.npz")


def inputs() -> np.ndarray:
    """38 rows of 256: edge cases (zeros, constants, exact ties, tiny/huge), 4 distributions,
    and 6 extreme rows (|x| ~ 1e25 where x^2 overflows, 1e-30, sparse, subnormal, -0.0, mixed
    signed zeros)."""
    sys.path.insert(0, os.path.dirname(__file__))
    from test_quant_reference import quant_inputs
    rng = np.random.default_rng(2024)
    x = quant_inputs(rng)[:16]
    extra = [rng.standard_normal((4, 256)),
             rng.standard_normal((4, 256)) * rng.exponential(1, (4, 256)),
             rng.standard_t(2, (4, 256)),
             rng.integers(-8, 8, (2, 256)) * 0.5,
             rng.standard_normal((2, 256)) * 1e-3 + 0.01,
             rng.standard_normal((1, 256)) * 1e25, rng.standard_normal((1, 256)) * 1e-30,
             np.where(rng.random((1, 256)) < 0.9, 0, rng.standard_normal((1, 256))),
             rng.standard_normal((1, 256)) * 1e-40,
             np.full((1, 256), -0.0), np.where(np.arange(256) % 3, 0.0, -0.0)[None]]
    with np.errstate(under="ignore"):
        return np.concatenate([x] + [e.astype(np.float32) for e in extra]).astype(np.float32)


def ggml_quantize(lib, t: str, x: np.ndarray, row_bytes: int) -> np.ndarray:
    v = ctypes.c_void_p
    out = np.zeros((x.shape[0], row_bytes), np.uint8)
    fn = {"F16": "ggml_fp32_to_fp16_row", "BF16": "ggml_fp32_to_bf16_row_ref"}.get(t)
    fn = fn or f"quantize_row_{t[:-2].lower() + '_K' if t.endswith('_K') else t.lower()}_ref"
    for i in range(x.shape[0]):
        row = np.ascontiguousarray(x[i])
        getattr(lib, fn)(row.ctypes.data_as(v), out[i].ctypes.data_as(v), ctypes.c_int64(256))
    return out


class _Traits(ctypes.Structure):
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]


def cpu_from_float(cpu, t, x: np.ndarray, row_bytes: int) -> np.ndarray:
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(_Traits)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        cpu.ggml_get_type_traits_cpu(int(t)).contents.from_float)
    out = np.zeros((x.shape[0], row_bytes), np.uint8)
    for i in range(x.shape[0]):
        row = np.ascontiguousarray(x[i])
        fn(row.ctypes.data, out[i].ctypes.data, x.shape[1])
    return out


def main(so_path: str, cpu_path: str) -> None:
    from pyllama.gguf import GGMLType
    from pyllama.quant import BLOCK_LAYOUT
    lib = ctypes.CDLL(so_path, mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(cpu_path)
    cpu.ggml_cpu_init()
    x = inputs()
    res = {"x": x}
    for t in TYPES:
        res[t] = ggml_quantize(lib, t, x, BLOCK_LAYOUT[GGMLType[t]].row_bytes(256))
    for t in ("Q8_0", "Q8_1", "Q8_K", "IQ4_NL"):
        res[t + "_cpu"] = cpu_from_float(cpu, GGMLType[t], x, BLOCK_LAYOUT[GGMLType[t]].row_bytes(256))
    res["IQ4_NL_ntry7"] = np.zeros_like(res["IQ4_NL"])       # quantize_iq4_nl (llama-quantize)
    lib.quantize_iq4_nl(x.ctypes.data_as(ctypes.c_void_p),
                        res["IQ4_NL_ntry7"].ctypes.data_as(ctypes.c_void_p),
                        ctypes.c_int64(x.shape[0]), ctypes.c_int64(256), None)
    np.savez_compressed(OUT, **res)
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
