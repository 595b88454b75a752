"""llama.cpp's batch-size dependent kernel choice, for Context(numerics="llama.cpp").

llama.cpp 0c1e570's CPU backend (x86 AVX2, flash attention off) computes a mul_mat with
different arithmetic depending on its number of rows n (docs/numerics.md):
- Q4_K weights (repacked q4_K_8x8 when rows % 8 == 0): rows below n - n % 4 by the gemm (pyllama's
  default arithmetic), the last n % 4 rows by the gemv;
- Q2_K, Q3_K, Q5_K and Q6_K weights (and Q4_K that is not repacked): the tiled kernel from 8 rows
  (pyllama's default), ggml_vec_dot_q*_K_q8_K below;
- f16 attention (kq and kqv mul_mats): tinyBLAS from 2 query rows (pyllama's default),
  ggml_vec_dot_f16 for one;
- with flash attention (`-fa on`, and `auto` on the CPU: llama-perplexity's default), f16/f32
  caches: ggml_compute_forward_flash_attn_ext_tiled from 64 query rows, the one_chunk kernel below
  (f16 caches), one_chunk for q8_0 / q4_0 K (q as q8_0, vec_dot_q*_0_q8_0; a quantized V
  dequantized and summed in f32; other KV types keep the backend's attention),
  and for one query over a KV view of >= 512 cells (n_kv: used cells padded to 256) the split-KV
  path, one chunk per thread.
Q8_0 / Q5_0 / Q4_0 weights give the same bits either way (vec_dot and tinyBLAS share the lanes).
F32/F16 weights for one row (tinyBLAS needs 2): ggml_vec_dot_f32 / ggml_vec_dot_f16 (x rounded
to f16), e.g. a MoE router (ffn_gate_inp stays F32 in llama.cpp's quantized files).
Not covered (pyllama's default arithmetic is used): BF16 weights and f32 caches for one row, IQ
types.

`matmul(be, w, x)` and `attention(be, ...)` apply that choice on top of a backend; the one-token
kernels are the backend's `matmul_vec` / `attention_vec` / `attention_fa`: native on the CPU backend
(cpu/compat.py), the numpy oracle (ref_compat.py) by default (ref; Context refuses the mode on
CUDA).
"""
from __future__ import annotations

import numpy as np

from ..gguf import GGMLType
from . import ref_compat
from .base import kv_type


def vec_row_start(wtype, n_rows_w: int, n: int) -> int:
    """First of the n activation rows that llama.cpp computes with its one-token kernel for a
    weight of type wtype with n_rows_w rows (n: none)."""
    if wtype == GGMLType.Q4_K and n_rows_w % 8 == 0:      # repacked: gemm + gemv tail
        return n - n % 4
    if wtype in ref_compat.VEC_TYPES and n < 8:          # the tiled kernel needs 8 rows
        return 0
    if wtype == GGMLType.IQ4_NL and n_rows_w % 8 and n == 1:   # vec_dot, tinyBLAS from 2 rows
        return 0
    return n


_FLOATS = (GGMLType.F32, GGMLType.F16, GGMLType.BF16)


def tinyblas_float(w) -> bool:
    """Whether llamafile_sgemm takes this F32/F16/BF16 weight from 2 activation rows (AVX2:
    tinyBLAS<8> needs rows % 4 == 0 and k % 8 == 0); otherwise llama.cpp computes every element
    by ggml_vec_dot_<type> (ggml_compute_forward_mul_mat_one_chunk), as for one row."""
    return w.shape[-2] % 4 == 0 and w.shape[-1] % 8 == 0


def mmid_uses_vec(wtype, n_rows_w: int, n: int) -> bool:
    """Whether llama.cpp's CPU mul_mat_id computes the n rows routed to one expert with its
    one-token kernel: a repacked Q4_K always (repack.cpp forward_mul_mat_id: gemv row by row),
    the other K-quants below 8 rows (tiled.cpp takes an expert from 8 rows, vec_dot below),
    F32/F16/BF16 always (mul_mat_id_one_chunk: vec_dot, no tinyBLAS)."""
    if (wtype == GGMLType.Q4_K and n_rows_w % 8 == 0) or wtype in _FLOATS:
        return True
    return wtype in ref_compat.VEC_TYPES and n < 8


_PLAIN: dict = {}     # (ids of the weights, n) -> (the weights, plain_matmuls' answer)


def plain_matmuls(ws, x: np.ndarray, one_row: bool = False) -> bool:
    """Whether matmul(be, w, x, one_row) is be.matmul(w, x) for every w (no float mat-vec, no
    vec_dot rows): then the weights may go to be.matmul_many."""
    n = 1 if one_row else x.shape[0]
    if x.ndim != 2:
        return True
    key = (tuple(map(id, ws)), n)
    hit = _PLAIN.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], ws)):
        return hit[1]
    if len(_PLAIN) > 4096:
        _PLAIN.clear()
    r = _PLAIN[key] = (tuple(ws), _plain(ws, n))
    return r[1]


def _plain(ws, n: int) -> bool:
    for w in ws:
        if w.type in _FLOATS and (n == 1 or not tinyblas_float(w)):
            return False
        if vec_row_start(w.type, w.shape[0], n) < n:
            return False
    return True


_VEC_START: dict = {}  # (id(w), n_choice) -> (w, -1 for the float mat-vec, else vec_row_start)


def matmul(be, w, x: np.ndarray, one_row: bool = False) -> np.ndarray:
    """be.matmul(w, x) with llama.cpp's kernel choice for these n = len(x) rows; one_row: the
    choice for one row, applied to every row (each row gets the bits a one-token decode of it
    would: the one-row kernels compute the rows independently, reading each weight block once)."""
    n = x.shape[0]
    n_choice = 1 if one_row else n
    if x.ndim == 2:
        hit = _VEC_START.get((id(w), n_choice))
        if hit is None or hit[0] is not w:
            if len(_VEC_START) > 4096:
                _VEC_START.clear()
            hit = _VEC_START[id(w), n_choice] = (w, -1 if w.type in _FLOATS and (
                n_choice == 1 or not tinyblas_float(w)) else vec_row_start(w.type, w.shape[0],
                                                                           n_choice))
        if hit[1] < 0:
            return be.matvec_float(w, x)
        s = hit[1]
    else:
        s = n_choice
    if one_row:
        return be.matmul(w, x) if s >= 1 else be.matmul_vec(w, x)
    if s >= n:
        return be.matmul(w, x)
    if s == 0:
        return be.matmul_vec(w, x)
    return np.concatenate([be.matmul(w, x[:s]), be.matmul_vec(w, x[s:])])


def _fa_reproduced(k_cache, v_cache, n_q: int) -> bool:
    """Whether attention_fa reproduces llama.cpp's flash attention for these cache types: f16
    K = V, f32 K = V from 64 queries (tiled), q8_0 / q4_0 K with q8_0 / q4_0 / f16 V and f16 K with
    q8_0 / q4_0 V (one_chunk)."""
    kt, vt = kv_type(k_cache), kv_type(v_cache)
    if ref_compat.fa_one_chunk_q(kt, vt):
        return True
    return kt == vt and (kt == "f16" or (kt == "f32" and n_q >= ref_compat.FA_TILE_Q))


def attention(be, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap=0.0,
              flash_attn: bool = False, view: tuple[int, int] | None = None, views=None):
    """be.attention with llama.cpp's kernel choice: flash attention -> attention_fa where llama.cpp
    has the f16/f32 kernels (view: the (base cell, n_kv) KV view llama.cpp attends over); else
    one query row over f16 caches -> vec_dot_f16. views: one (base cell, n_kv) per query row:
    every row computed as a one-query ubatch over its own view (speculative verification)."""
    if views is not None:
        return _attention_rows(be, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap,
                               flash_attn, views)
    if flash_attn and _fa_reproduced(k_cache, v_cache, q.shape[0]):
        return be.attention_fa(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap,
                               view)
    if q.shape[0] == 1 and k_cache.dtype == np.float16 and v_cache.dtype == np.float16:
        return be.attention_vec(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap)
    return be.attention(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap)


def _attention_rows(be, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap,
                    flash_attn, views):
    """attention() of each query row alone (the arithmetic of one-token decodes); the rows that
    take the same per-query kernel in one call (vec_dot_f16 and the invariant kernel compute
    every query independently)."""
    n_q = q.shape[0]
    if not (flash_attn and _fa_reproduced(k_cache, v_cache, 1)):
        if k_cache.dtype == np.float16 and v_cache.dtype == np.float16:
            return be.attention_vec(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap)
        return be.attention(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap)
    outs = []
    for i in range(n_q):
        a, b = int(q_start[i]), int(q_end[i])
        cells = np.ascontiguousarray(kv_cells[a:b], np.int32)
        outs.append(be.attention_fa(q[i:i + 1], k_cache, v_cache, cells,
                                    np.zeros(1, np.int32), np.array([b - a], np.int32), scale,
                                    softcap, tuple(views[i])))
    return np.concatenate(outs)


def _not_repacked(be, w, x: np.ndarray, vec: bool) -> np.ndarray:
    """be.matmul_vec(w, x) (vec: ggml_vec_dot_<type>_q8_K) or be.matmul(w, x) (the tiled
    kernel) for a weight llama.cpp does not repack, also a Q4_K of rows % 8 == 0 (the backends
    take those for repacked 2-D weights: gemv / gemm): its rows in two parts whose counts are not
    multiples of 8 (every output element is computed alone, so the split changes no bit)."""
    f = be.matmul_vec if vec else be.matmul
    r = w.shape[0]
    if w.type != GGMLType.Q4_K or r % 8 or r < 2:
        return f(w, x)
    from .base import Weight
    parts = []
    for a, b in ((0, r - 1), (r - 1, r)):
        parts.append(f(Weight(f"{w.name}[{a}:{b}]", w.type, (b - a,) + tuple(w.shape[1:]),
                              w.raw[a:b]), x))
    return np.concatenate(parts, axis=1)


def matmul_heads(be, w, x: np.ndarray, src1_contiguous: bool = True,
                 one_row: bool = False) -> np.ndarray:
    """ggml_mul_mat of a 3-D weight w [n_head, rows, cols] broadcast over x [n, n_head, cols]
    (MLA's attn_k_b / attn_v_b) -> [n, n_head, rows], with llama.cpp's kernel choice per head: a
    3-D weight is never repacked (repack.cpp takes 2-D MUL_MAT weights only), so K-quants (Q4_K
    too) run the tiled kernel from 8 rows and vec_dot below; F32 weights by tinyBLAS only when
    src1 is contiguous (the second llamafile_sgemm call needs a converted src1), else
    ggml_vec_dot_f32; F16 as a 2-D matmul; Q8_0 / Q5_0 / Q4_0 the same bits either way."""
    from .base import expert_weight
    n, h = x.shape[0], x.shape[1]
    n_choice = 1 if one_row else n
    out = np.empty((n, h, w.shape[1]), np.float32)
    for i in range(h):
        wi = expert_weight(w, i)
        xi = np.ascontiguousarray(x[:, i], dtype=np.float32)
        if wi.type == GGMLType.F32 and not src1_contiguous:
            out[:, i] = be.matvec_float(wi, xi)
        elif wi.type in _FLOATS:
            out[:, i] = matmul(be, wi, xi, one_row)
        else:
            out[:, i] = _not_repacked(be, wi, xi,
                                      wi.type in ref_compat.VEC_TYPES and n_choice < 8)
    return out
