"""Regenerate tests/data/quant/ggml_iq_ref.npz from llama.cpp's libggml (not a test).

    PYTHONPATH=. python tests/quant/make_ggml_iq_ref.py /work/oracle/lib/python3.11/site-packages/llama_cpp/lib

Records, for every weight type pyllama reads (F16, BF16, the legacy, K, IQ, TQ and MXFP4 types):
- `deq_<T>`: ggml's own `dequantize_row_*` (ggml_fp16/bf16_to_fp32_row) of the first rows of
  `raw_<T>` [16, row bytes of 512 values], blocks of
  random bytes whose f16 scales are set to finite values (IQ1/IQ2 weights need an importance
  matrix to quantize, so the blocks are built rather than quantized; every bit pattern of the
  other fields is a valid block);
- `vd_<T>`: the CPU backend's `vec_dot` (type_traits_cpu) of each weight row with each row of `x`
  quantized by the vec_dot type's `from_float` (llama.cpp's one-row arithmetic);
- `mm<n>_<T>`: `ggml_mul_mat` through ggml_graph_compute_with_ctx (1 thread) for n activation
  rows: llama.cpp's mul_mat dispatch (tiled kernel from 8 rows for the K and IQ types, llamafile's
  tinyBLAS for the q8_0 family, vec_dot otherwise; no repacking: plain context memory).
The committed file came from llama-cpp-python 0.3.36 (llama.cpp 0c1e570) built for AVX2
(scripts/build_llamacpp.sh python).
"""
import ctypes
import os
import sys

import numpy as np

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "quant", "ggml_iq_ref.npz")
TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
         "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL",
         "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4"]
ROWS, K = 16, 512
NS = (1, 3, 8, 9)
DEQ_ROWS = 4        # dequantized rows kept (2048 values per type)


def random_blocks(t: str, rows: int, k: int, rng) -> np.ndarray:
    """Random bytes with every f16 scale field finite (IQ1_M: the scale nibbles)."""
    from pyllama.gguf import GGMLType
    from pyllama.quant import BLOCK_LAYOUT
    lay = BLOCK_LAYOUT[GGMLType[t]]
    if t in ("F16", "BF16"):
        v = (rng.standard_normal((rows, k)) * 0.5).astype(np.float32)
        bits = v.astype(np.float16).view(np.uint16) if t == "F16" else (v.view(np.uint32) >> 16).astype(np.uint16)
        return bits.view(np.uint8).reshape(rows, 2 * k)
    nb = rows * (k // lay.block_elems)
    raw = rng.integers(0, 256, (nb, lay.block_bytes), dtype=np.uint8)
    b = raw.view(lay.dtype).reshape(nb)
    scale = (rng.uniform(0.5, 2.0, nb) * 2.0 ** rng.integers(-12, -4, nb)).astype(np.float16)
    for f in ("d", "dmin", "m"):
        if f in lay.dtype.names and lay.dtype[f] == np.dtype("<f2"):
            b[f] = scale if f == "d" else (scale * np.float16(0.5))
    if t == "IQ1_M":
        u = scale.view(np.uint16).astype(np.uint32)
        sc = b["scales"].copy().view("<u2").reshape(nb, 4).astype(np.uint32)
        for i in range(4):
            sc[:, i] = (sc[:, i] & 0x0FFF) | (((u >> (4 * i)) & 0xF) << 12)
        b["scales"] = sc.astype("<u2").view(np.uint8).reshape(nb, 8)
    if t == "MXFP4":
        b["e"] = rng.integers(110, 125, nb)
    raw = b.view(np.uint8).reshape(nb, lay.block_bytes)
    raw[:2] = raw[2:4]                 # (kept simple: no all-zero special cases needed)
    return raw.reshape(rows, -1)


class _Traits(ctypes.Structure):
    _fields_ = [("from_float", ctypes.c_void_p), ("vec_dot", ctypes.c_void_p),
                ("vec_dot_type", ctypes.c_int), ("nrows", ctypes.c_int64)]


class _InitParams(ctypes.Structure):
    _fields_ = [("mem_size", ctypes.c_size_t), ("mem_buffer", ctypes.c_void_p),
                ("no_alloc", ctypes.c_bool)]


def main(libdir: str) -> None:
    from pyllama.gguf import GGML_BLOCK, GGMLType
    base = ctypes.CDLL(os.path.join(libdir, "libggml-base.so"), mode=ctypes.RTLD_GLOBAL)
    cpu = ctypes.CDLL(os.path.join(libdir, "libggml-cpu.so"), mode=ctypes.RTLD_GLOBAL)
    cpu.ggml_cpu_init()
    cpu.ggml_get_type_traits_cpu.restype = ctypes.POINTER(_Traits)
    base.ggml_init.restype = ctypes.c_void_p
    base.ggml_init.argtypes = [_InitParams]
    for fn in ("ggml_new_tensor_2d", "ggml_mul_mat", "ggml_new_graph", "ggml_get_data"):
        getattr(base, fn).restype = ctypes.c_void_p
    base.ggml_new_tensor_2d.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    base.ggml_mul_mat.argtypes = [ctypes.c_void_p] * 3
    base.ggml_new_graph.argtypes = [ctypes.c_void_p]
    base.ggml_build_forward_expand.argtypes = [ctypes.c_void_p] * 2
    base.ggml_get_data.argtypes = [ctypes.c_void_p]
    base.ggml_free.argtypes = [ctypes.c_void_p]
    cpu.ggml_graph_compute_with_ctx.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]

    rng = np.random.default_rng(15)
    x = (rng.standard_normal((max(NS), K)) * rng.uniform(0.2, 3.0, (max(NS), 1))).astype(np.float32)
    x[1, 7] = 5.0 * np.abs(x[1]).max()            # an activation row with one outlier
    res = {"x": x}
    v = ctypes.c_void_p
    for t in TYPES:
        gt = GGMLType[t]
        raw = np.ascontiguousarray(random_blocks(t, ROWS, K, rng))
        res["raw_" + t] = raw
        y = np.zeros((ROWS, K), np.float32)
        fn = {"F16": "ggml_fp16_to_fp32_row", "BF16": "ggml_bf16_to_fp32_row"}.get(t) or \
            "dequantize_row_" + (t[:-2].lower() + "_K" if t.endswith("_K") else t.lower())
        getattr(base, fn)(raw.ctypes.data_as(v), y.ctypes.data_as(v), ctypes.c_int64(ROWS * K))
        res["deq_" + t] = y[:DEQ_ROWS]
        tr = cpu.ggml_get_type_traits_cpu(int(gt)).contents
        vdt = tr.vec_dot_type
        be, bb = GGML_BLOCK[GGMLType(vdt)]
        xq = np.zeros((x.shape[0], K // be * bb), np.uint8)
        ff = ctypes.CFUNCTYPE(None, v, v, ctypes.c_int64)(cpu.ggml_get_type_traits_cpu(vdt).contents.from_float)
        for i in range(x.shape[0]):
            ff(x[i].ctypes.data, xq[i].ctypes.data, K)
        vd = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, v,
                              ctypes.c_size_t, v, ctypes.c_size_t, ctypes.c_int)(tr.vec_dot)
        out = np.zeros((x.shape[0], ROWS), np.float32)
        s = ctypes.c_float()
        for i in range(x.shape[0]):
            for r in range(ROWS):
                vd(K, ctypes.byref(s), 0, raw[r].ctypes.data, 0, xq[i].ctypes.data, 0, 1)
                out[i, r] = s.value
        res["vd_" + t] = out
        for n in NS:
            ctx = base.ggml_init(_InitParams(64 << 20, None, False))
            a = base.ggml_new_tensor_2d(ctx, int(gt), K, ROWS)
            b = base.ggml_new_tensor_2d(ctx, 0, K, n)
            ctypes.memmove(base.ggml_get_data(a), raw.ctypes.data, raw.nbytes)
            ctypes.memmove(base.ggml_get_data(b), x[:n].ctypes.data, x[:n].nbytes)
            c = base.ggml_mul_mat(ctx, a, b)
            gf = base.ggml_new_graph(ctx)
            base.ggml_build_forward_expand(gf, c)
            cpu.ggml_graph_compute_with_ctx(ctx, gf, 1)
            o = np.zeros((n, ROWS), np.float32)
            ctypes.memmove(o.ctypes.data, base.ggml_get_data(c), o.nbytes)
            res[f"mm{n}_{t}"] = o
            base.ggml_free(ctx)
        print(t, "ok", flush=True)
    np.savez_compressed(OUT, **res)
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main(sys.argv[1])
