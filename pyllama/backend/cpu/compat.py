"""CPU kernels of llama.cpp's one-token arithmetic (numerics="llama.cpp"; _compat.pyx +
pyl_compat.h). Bit-identical to the numpy oracle pyllama.backend.ref_compat; results do not depend
on the thread count."""
from __future__ import annotations

import numpy as np

from ...errors import BackendError
from ...gguf import GGML_BLOCK, GGMLType
from ...quant import quantize_q8_0_rows
from ..base import KV_BLOCK, kv_type
from ..ref_compat import fa_kernel, fa_one_chunk_q
from . import _KV_GGML, _MIN_PARALLEL_ATTN, _compat


def _raw2d(w) -> np.ndarray:
    raw = w.raw
    if raw.ndim != 2 or raw.dtype != np.uint8:
        raw = raw.reshape(raw.shape[0] if raw.ndim > 1 else 1, -1).view(np.uint8)
    return np.ascontiguousarray(raw)


def _kernel(wtype, rows: int) -> int:
    if wtype == GGMLType.Q4_K:
        return _compat.GEMV_Q4_K if rows % 8 == 0 else _compat.VEC_Q4_K
    if wtype == GGMLType.Q5_K:
        return _compat.VEC_Q5_K
    if wtype == GGMLType.Q6_K:
        return _compat.VEC_Q6_K
    if wtype == GGMLType.Q2_K:
        return _compat.VEC_Q2_K
    if wtype == GGMLType.Q3_K:
        return _compat.VEC_Q3_K
    if wtype == GGMLType.IQ4_XS:
        return _compat.VEC_IQ4_XS
    raise BackendError(f"no one-token kernel for {GGMLType(wtype).name}")


_IQ_VEC = frozenset({GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ2_S, GGMLType.IQ3_XXS,
                     GGMLType.IQ3_S, GGMLType.IQ1_S, GGMLType.IQ1_M})


def matvec_k(w, x: np.ndarray, n_threads: int) -> np.ndarray:
    """y [n, rows] = x [n, k] @ W^T by llama.cpp's one-token kernel for w: Q4_K
    ggml_gemv_q4_K_8x8_q8_K (rows % 8 == 0, llama.cpp repacks those) or vec_dot, Q2_K / Q3_K /
    Q5_K / Q6_K vec_dot."""
    e = _VEC_W.get(id(w))
    if e is None or e[0] is not w or e[1] is not w.raw:
        if len(_VEC_W) > 8192:
            _VEC_W.clear()
        raw = _raw2d(w)
        be, bb = GGML_BLOCK[w.type]
        kern = -1 if w.type in (GGMLType.IQ4_NL, GGMLType.MXFP4) or w.type in _IQ_VEC \
            else _kernel(w.type, raw.shape[0])
        e = _VEC_W[id(w)] = (w, w.raw, raw, raw.shape[1] // bb * be, kern)
    raw, k, kern = e[2], e[3], e[4]
    x = np.ascontiguousarray(x, dtype=np.float32).reshape(-1, k)
    n = x.shape[0]
    if kern < 0 and w.type not in _IQ_VEC:           # IQ4_NL, MXFP4: ggml_vec_dot_*_q8_0
        from . import matmul as mm
        return mm.matmul(w, x, ktype=int(w.type) | mm.V2)
    out = np.empty((n, raw.shape[0]), np.float32)
    q, d, bs = _q8_K_scratch(n, k)
    if kern < 0:
        from . import _matmul
        _compat.quant_q8_K(x, q, d, bs)
        _matmul.vecdot_iq(int(w.type), raw, q, d, out, max(1, n_threads or 1))
        return out
    _compat.matvec_k(kern, raw, k, x, out, q, d, bs, max(1, n_threads or 1))
    return out


_VEC_W: dict = {}     # id(w) -> (w, w.raw, raw [rows, row bytes], k, kernel or -1): per weight


def _q8_K_scratch(n: int, k: int) -> tuple:
    """q8_K activation buffers (q int8 [n, k], d f32 [n, k/256], bsums int16 [n, k/16]): views
    of the matmul module's per-thread buffers (the kernels only write them)."""
    from .matmul import _view
    return (_view("k_q", (n, k), np.int8), _view("k_d", (n, k // 256), np.float32),
            _view("k_bs", (n, k // 16), np.int16))


def attention_vec(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap,
                  n_threads: int) -> np.ndarray:
    """backend.attention for f16 caches with llama.cpp's one-token arithmetic (cells taken in
    ascending cell index per query)."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    n_q, n_head, d_k = q.shape
    n_kv = k_cache.shape[1] // d_k
    d_v = v_cache.shape[1] // n_kv
    cells, starts, ends = _sorted_lists(kv_cells, q_start, q_end)
    out = np.empty((n_q, n_head, d_v), np.float32)
    _compat.attention_vec(q, k_cache.view(np.uint16), v_cache.view(np.uint16), n_kv, cells,
                          starts, ends, float(scale), float(softcap), out,
                          max(1, n_threads or 1))
    return out


_ONE = np.zeros(1, np.int64)


def _threads(n_threads, n_head: int, n_cells: int, d: int) -> int:
    """OpenMP threads for an attention call, by the CPU backend's rule (one below
    _MIN_PARALLEL_ATTN multiply-adds); results never depend on it."""
    return max(1, n_threads or 1) if n_head * n_cells * d >= _MIN_PARALLEL_ATTN else 1


_SORTED: list = [(None, None, None, None)]  # the last call's (kv_cells, q_start, q_end, result)


def _sorted_lists(kv_cells, q_start, q_end):
    """Each query's cells in ascending cell index, packed; (cells, starts, ends). The layers of
    a ubatch that share a cache pass the same plan arrays (KVCache.attn_plan): the last result is
    reused for them."""
    last = _SORTED[0]              # one read: another thread may replace it meanwhile
    if last[0] is kv_cells and last[1] is q_start and last[2] is q_end:
        return last[3]
    r = _sorted_lists_new(kv_cells, q_start, q_end)
    _SORTED[0] = (kv_cells, q_start, q_end, r)
    return r


def _sorted_lists_new(kv_cells, q_start, q_end):
    qs = np.asarray(q_start, np.int64)
    qe = np.asarray(q_end, np.int64)
    cells = np.asarray(kv_cells, np.int32)
    if len(qs) == 1:                   # a one-token decode
        c = np.sort(cells[qs[0]:qe[0]]).astype(np.int32, copy=False)
        return c, _ONE, np.array([len(c)], np.int64)
    if len(qs):
        cells = np.concatenate([np.sort(cells[a:b]) for a, b in zip(qs, qe)])
    starts = np.concatenate([[0], np.cumsum(qe - qs)[:-1]]).astype(np.int64)
    return np.ascontiguousarray(cells[:int((qe - qs).sum())], np.int32), starts, starts + (qe - qs)


def attention_fa(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap,
                 n_threads: int, view: tuple[int, int] | None = None) -> np.ndarray:
    """backend.attention_fa (f16 caches, f32 from 64 queries, q8_0/q4_0 K with q8_0/q4_0/f16 V,
    f16 K with q8_0/q4_0 V): the kernel llama.cpp's CPU backend runs for this shape
    (ref_compat.fa_kernel); view = (base cell, n_kv) of the KV view llama.cpp attends over, the
    split-KV decode path's chunks being n_threads slices of it."""
    q = np.ascontiguousarray(q, dtype=np.float32)
    n_q, n_head, d_k = q.shape
    cells, starts, ends = _sorted_lists(kv_cells, q_start, q_end)
    kt, vt = kv_type(k_cache), kv_type(v_cache)
    if fa_one_chunk_q(kt, vt):
        n_kv = k_cache.shape[1] * KV_BLOCK[kt] // d_k
        d_v = v_cache.shape[1] * KV_BLOCK[vt] // n_kv
        if kt == "f16":          # q rounded to f16 for ggml_vec_dot_f16
            qs = np.zeros((n_q, n_head, d_k), np.int8)
            qd = q.astype(np.float16).astype(np.float32)
        else:
            qs, qd = quantize_q8_0_rows(q.reshape(-1, d_k), simd=True)
        out = np.empty((n_q, n_head, d_v), np.float32)
        _compat.attention_fa_q(qs.reshape(n_q, n_head, d_k), qd.reshape(n_q, n_head, -1),
                               k_cache.view(np.uint8), v_cache.view(np.uint8), _KV_GGML[kt],
                               _KV_GGML[vt], n_kv, d_v, cells, starts, ends, float(scale),
                               float(softcap), out,
                               _threads(n_threads, n_head, len(cells), d_k + d_v))
        return out
    n_kv = k_cache.shape[1] // d_k
    d_v = v_cache.shape[1] // n_kv
    f16 = k_cache.dtype == np.float16
    kernel = fa_kernel(n_q, f16, view)
    base, nek1 = view if view is not None else (0, 0)
    out = np.empty((n_q, n_head, d_v), np.float32)
    _compat.attention_fa(q, k_cache.view(np.uint8), v_cache.view(np.uint8), f16, n_kv, d_v,
                         cells, starts, ends, float(scale), float(softcap), kernel, int(base),
                         int(nek1), max(1, n_threads or 1), out,
                         _threads(n_threads, n_head, len(cells), d_k + d_v))
    return out


def quantize_q8_K(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [n, k] -> (q int8 [n, k], d f32 [n, k/256], bsums int16 [n, k/16]) as the kernels
    quantize activations (quantize_row_q8_K_ref)."""
    x = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
    n, k = x.shape
    q = np.empty((n, k), np.int8)
    d = np.empty((n, k // 256), np.float32)
    bs = np.empty((n, k // 16), np.int16)
    _compat.quant_q8_K(x, q, d, bs)
    return q, d, bs
