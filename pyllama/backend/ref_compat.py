"""numpy oracle for llama.cpp's one-token (small-batch) CPU arithmetic, numerics="llama.cpp".

llama.cpp 0c1e570 (x86 AVX2 build, flash attention off) picks its kernels by the number of rows of
each mul_mat (docs/numerics.md); pyllama's default arithmetic is its n >= 8 (prefill) one. These
are the others, operation for operation (the CPU kernels in cpu/_compat.pyx + pyl_compat.h are
bit-identical to them):
- `matvec_k(wtype, raw, x)`: Q4_K rows as ggml_gemv_q4_K_8x8_q8_K (the repacked Q4_K's kernel for
  the rows past n - n % 4; Q4_K with rows % 8 != 0 is not repacked: vec_dot under 8 rows), Q2_K,
  Q3_K, Q5_K and Q6_K as ggml_vec_dot_q*_K_q8_K (batches under 8 rows); activations by
  quantize_row_q8_K_ref;
- `attention_vec(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap)`: f16 attention of
  one-token ubatches: mul_mat with one src1 row runs ggml_vec_dot_f16 (4 accumulators x 8 lanes
  over 32-element steps) for q.k over the head dimension and for p.v over the cell index;
- `attention_fa(...)`: llama.cpp's flash attention (`-fa on`, and `auto` on the CPU): the tiled
  kernel for ubatches of >= 64 queries, one_chunk below (ops.cpp ggml_compute_forward_flash_attn_*).
"""
from __future__ import annotations

import numpy as np

from ..gguf import GGMLType
from .ref import _fma, ggml_expf, ggml_hsum8, ggml_softmax_probs
from .ref_matmul import _blocks, _unpack_k, quantize_q8_K_ref

_F32 = np.float32
# llama.cpp's AVX2 vec_dot of the grid i-quants: 8 int32 lanes per super-block (lane l of each
# 32-block: its elements 4l..4l+3, times the integer scale of their 16), acc8 = fma(f32(d*d8),
# (float)lanes, acc8), the result mult * hsum_float_8(acc8)
IQ_VEC_MULT = {GGMLType.IQ2_XXS: 0.125, GGMLType.IQ2_XS: 0.125, GGMLType.IQ2_S: 0.125,
               GGMLType.IQ3_XXS: 0.25, GGMLType.IQ3_S: 1.0, GGMLType.IQ4_XS: 1.0}
VEC_TYPES = (GGMLType.Q2_K, GGMLType.Q3_K, GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K,
             GGMLType.IQ1_S, GGMLType.IQ1_M) + tuple(IQ_VEC_MULT)


def _lane_order() -> np.ndarray:
    """Q6_K vec_dot's int32 lane of element e of a super-block is (e % 32) // 4: the elements
    sorted by lane (stable)."""
    return np.argsort((np.arange(256) % 32) // 4, kind="stable")


def _q4k_gemv(blk, x):
    q, sc, mn, d, dmin = _unpack_k(GGMLType.Q4_K, blk)
    wq = (q.astype(np.int64) * np.repeat(sc.astype(np.int64), 16, axis=-1)).astype(np.float64)
    qa, da, bs = quantize_q8_K_ref(x)
    n, nb = da.shape
    qa = qa.reshape(n, nb, 256).astype(np.float64)
    bs = bs.reshape(n, nb, 16).astype(np.float64)
    acc = np.zeros((n, q.shape[0]), _F32)
    accm = np.zeros_like(acc)
    for b in range(nb):                                    # exact integer sums, one fma each
        isum = (qa[:, b] @ wq[:, b].T).astype(_F32)
        imin = (bs[:, b] @ mn[:, b].astype(np.float64).T).astype(_F32)
        acc = _fma(isum, (d[None, :, b] * da[:, None, b]).astype(_F32), acc)
        accm = _fma(imin, (dmin[None, :, b] * da[:, None, b]).astype(_F32), accm)
    return (acc - accm).astype(_F32)


def _q6k_vecdot(blk, x):
    q, sc, _, d, _ = _unpack_k(GGMLType.Q6_K, blk)
    rows, nb = q.shape[:2]
    order = _lane_order()
    wq = ((q + 32).astype(np.int64) * np.repeat(sc.astype(np.int64), 16, axis=-1))
    wl = wq[:, :, order].reshape(rows, nb, 8, 32).astype(np.float64)
    qa, da, bs = quantize_q8_K_ref(x)
    n = x.shape[0]
    qa = qa.reshape(n, nb, 256)[:, :, order].reshape(n, nb, 8, 32).astype(np.float64)
    bs = bs.reshape(n, nb, 8, 2).astype(np.int64)
    sc2 = sc.astype(np.int64).reshape(rows, nb, 8, 2)
    acc = np.zeros((n, rows, 8), _F32)
    for b in range(nb):
        lanes = np.einsum("rml,nml->nrm", wl[:, b], qa[:, b]).astype(np.int64)
        lanes -= 32 * (bs[:, None, b] * sc2[None, :, b]).sum(-1)
        dd = (da[:, None, b] * d[None, :, b]).astype(_F32)[..., None]
        acc = _fma(np.broadcast_to(dd, lanes.shape), lanes.astype(_F32), acc)
    return ggml_hsum8(acc)


def _q45k_vecdot(wtype, blk, x):
    """ggml_vec_dot_q4_K_q8_K / _q5_K_q8_K (AVX2): 8 int32 lanes of sc*q*q8 per super-block,
    acc8 = fma(f32(d8*d), lanes, acc8); mins p_i = mn[2i]*S[2i] + mn[2i+1]*S[2i+1] (S: sub-block
    sums of q8) with dm = f32(-d8*dmin): Q4_K acc4 = fma(dm, p, acc4), + (a0+a2)+(a1+a3);
    Q5_K summs = fma(dm, sum p, summs), + summs."""
    q, sc, mn, d, dmin = _unpack_k(wtype, blk)
    rows, nb = q.shape[:2]
    order = _lane_order()
    wq = q.astype(np.int64) * np.repeat(sc.astype(np.int64), 16, axis=-1)
    wl = wq[:, :, order].reshape(rows, nb, 8, 32).astype(np.float64)
    mn8 = mn[:, :, ::2].astype(np.int64)                             # per 32-element sub-block
    qa, da, bs = quantize_q8_K_ref(x)
    n = x.shape[0]
    qa = qa.reshape(n, nb, 256)[:, :, order].reshape(n, nb, 8, 32).astype(np.float64)
    s8 = bs.reshape(n, nb, 8, 2).astype(np.int64).sum(-1)
    acc = np.zeros((n, rows, 8), _F32)
    acc4 = np.zeros((n, rows, 4), _F32)
    summs = np.zeros((n, rows), _F32)
    for b in range(nb):
        lanes = np.einsum("rml,nml->nrm", wl[:, b], qa[:, b]).astype(_F32)
        dd = (da[:, None, b] * d[None, :, b]).astype(_F32)[..., None]
        acc = _fma(np.broadcast_to(dd, lanes.shape), lanes, acc)
        p = (mn8[None, :, b] * s8[:, None, b]).reshape(n, rows, 4, 2).sum(-1)
        dm = ((-da[:, None, b]) * dmin[None, :, b]).astype(_F32)
        if wtype == GGMLType.Q4_K:
            acc4 = _fma(np.broadcast_to(dm[..., None], p.shape), p.astype(_F32), acc4)
        else:
            summs = _fma(dm, p.sum(-1).astype(_F32), summs)
    if wtype == GGMLType.Q5_K:
        return (ggml_hsum8(acc) + summs).astype(_F32)
    m = ((acc4[..., 0] + acc4[..., 2]).astype(_F32) + (acc4[..., 1] + acc4[..., 3]).astype(_F32))
    return (ggml_hsum8(acc) + m.astype(_F32)).astype(_F32)


def _q23k_vecdot(wtype, blk, x):
    """ggml_vec_dot_q2_K_q8_K / _q3_K_q8_K (AVX2): per super-block (Q2_K first the mins:
    acc8 = fma(f32(-d8*dmin), mn[2m]*bs[2m] + mn[2m+1]*bs[2m+1], acc8)), then
    acc8 = fma(f32(d8*d), lanes of sc*q*q8, acc8); hsum."""
    q, sc, mn, d, dmin = _unpack_k(wtype, blk)
    rows, nb = q.shape[:2]
    order = _lane_order()
    wq = q.astype(np.int64) * np.repeat(sc.astype(np.int64), 16, axis=-1)
    wl = wq[:, :, order].reshape(rows, nb, 8, 32).astype(np.float64)
    qa, da, bs = quantize_q8_K_ref(x)
    n = x.shape[0]
    qa = qa.reshape(n, nb, 256)[:, :, order].reshape(n, nb, 8, 32).astype(np.float64)
    bs = bs.reshape(n, nb, 8, 2).astype(np.int64)
    acc = np.zeros((n, rows, 8), _F32)
    for b in range(nb):
        if mn is not None:
            p = (mn[None, :, b].astype(np.int64).reshape(1, rows, 8, 2) * bs[:, None, b]).sum(-1)
            dm = ((-da[:, None, b]) * dmin[None, :, b]).astype(_F32)[..., None]
            acc = _fma(np.broadcast_to(dm, p.shape), p.astype(_F32), acc)
        lanes = np.einsum("rml,nml->nrm", wl[:, b], qa[:, b]).astype(_F32)
        dd = (da[:, None, b] * d[None, :, b]).astype(_F32)[..., None]
        acc = _fma(np.broadcast_to(dd, lanes.shape), lanes, acc)
    return ggml_hsum8(acc)


def matvec_k(wtype, raw, x: np.ndarray) -> np.ndarray:
    """y [n, rows] = x [n, k] @ W^T with llama.cpp's one-token kernel of wtype: Q4_K gemv
    (rows % 8 == 0: llama.cpp repacks those) or vec_dot, Q2_K/Q3_K/Q5_K/Q6_K vec_dot."""
    wtype = GGMLType(wtype)
    blk, k = _blocks(wtype, raw)
    x = np.atleast_2d(np.asarray(x, _F32))
    if x.shape[1] != k:
        raise ValueError(f"x has {x.shape[1]} columns, weight rows have {k}")
    if wtype == GGMLType.Q4_K and blk.shape[0] % 8 == 0:
        return _q4k_gemv(blk, x)
    if wtype in (GGMLType.Q4_K, GGMLType.Q5_K):
        return _q45k_vecdot(wtype, blk, x)
    if wtype in (GGMLType.Q2_K, GGMLType.Q3_K):
        return _q23k_vecdot(wtype, blk, x)
    if wtype == GGMLType.Q6_K:
        return _q6k_vecdot(blk, x)
    if wtype in IQ_VEC_MULT:
        return _iq_grid_vecdot(wtype, blk, x)
    if wtype in (GGMLType.IQ1_S, GGMLType.IQ1_M):
        return _iq1_vecdot(wtype, blk, x)
    if wtype in (GGMLType.IQ4_NL, GGMLType.MXFP4):      # not repacked (rows % 8 != 0)
        from .ref_matmul import dot_v2
        return dot_v2(wtype, blk, x)
    raise NotImplementedError(f"one-token kernel for {wtype.name}")


def _iq_unpack(wtype, blk, x):
    """i-quant rows and q8_K activations in lane form: (v int64 [rows, nb, 8, 8, 4] values of
    32-block j, lane l, sc [rows, nb, 8, 8, 1] their integer scales, d0 [rows, nb] (tiled_ints),
    q8 [n, nb, 8, 8, 4] float64, d8 [n, nb])."""
    from ..quant import BLOCK_LAYOUT
    from ..quant.iquants import tiled_ints
    rows, nb = blk.shape[:2]
    b = np.ascontiguousarray(blk).reshape(-1).view(BLOCK_LAYOUT[wtype].dtype)
    v, sc, d0 = tiled_ints(wtype, {f: np.ascontiguousarray(b[f]) for f in b.dtype.names})
    sc8 = np.repeat(sc.reshape(rows, nb, 8, 2), 4, axis=-1).reshape(rows, nb, 8, 8, 1)
    qa, da, _ = quantize_q8_K_ref(x)
    return (v.astype(np.int64).reshape(rows, nb, 8, 8, 4), sc8.astype(np.int64),
            d0.reshape(rows, nb), qa.reshape(x.shape[0], nb, 8, 8, 4).astype(np.float64), da)


def _lane_chain(w, qa, d, da, acc=None):
    """acc8 [n, rows, 8] = fma(f32(d*d8), (float)lanes, acc8) over super-blocks, lanes the exact
    dots of w [rows, nb, 8, 8, 4] with qa [n, nb, 8, 8, 4] per lane."""
    n, rows, nb = qa.shape[0], w.shape[0], w.shape[1]
    acc = np.zeros((n, rows, 8), _F32) if acc is None else acc
    for i in range(nb):
        lanes = np.einsum("rjlk,njlk->nrl", w[:, i], qa[:, i]).astype(_F32)
        dd = (d[None, :, i] * da[:, None, i]).astype(_F32)[..., None]
        acc = _fma(np.broadcast_to(dd, lanes.shape), lanes, acc)
    return acc


def _iq_grid_vecdot(wtype, blk, x):
    """ggml_vec_dot_iq{2_xxs,2_xs,2_s,3_xxs,3_s,4_xs}_q8_K (AVX2), see IQ_VEC_MULT."""
    v, sc, d0, qa, da = _iq_unpack(wtype, blk, x)
    mult = _F32(IQ_VEC_MULT[wtype])
    acc = _lane_chain((v * sc).astype(np.float64), qa, (d0 / mult).astype(_F32), da)
    return (mult * ggml_hsum8(acc)).astype(_F32)


def _iq1_vecdot(wtype, blk, x):
    """ggml_vec_dot_iq1_{s,m}_q8_K (AVX2): the grid part as _iq_grid_vecdot's lanes (values -1,
    0, 1); the +-1 deltas: IQ1_S one exact integer per super-block (bsums x sign x scale),
    acc1 = fma(d, (float)sum, acc1) (gcc contracts `accum1 += d * sumi1`); IQ1_M a second set of
    8 lanes and fma chain. Result hsum8(acc) + 0.125 * (acc1 or hsum8(acc2))."""
    v, sc, d0, qa, da = _iq_unpack(wtype, blk, x)       # v = 8 * grid + delta
    delta = np.where(v % 8 == 1, 1, -1)
    d = (d0 / _F32(0.125)).astype(_F32)
    wd = (delta * sc).astype(np.float64)
    acc = _lane_chain(((v - delta) // 8 * sc).astype(np.float64), qa, d, da)
    if wtype == GGMLType.IQ1_M:
        other = ggml_hsum8(_lane_chain(wd, qa, d, da))
    else:
        other = np.zeros(acc.shape[:2], _F32)
        for i in range(v.shape[1]):
            dd = (da[:, None, i] * d[None, :, i]).astype(_F32)
            other = _fma(dd, np.einsum("rjlk,njlk->nr", wd[:, i], qa[:, i]).astype(_F32), other)
    return (ggml_hsum8(acc) + _F32(0.125) * other).astype(_F32)


def matvec_float(wtype, raw, x: np.ndarray) -> np.ndarray:
    """y [1, rows] = x [1, k] @ W^T for an F32 or F16 weight as llama.cpp computes one row:
    ggml_vec_dot_f32 (AVX2: the 4x8 FMA lanes and reduction of vec_dot_f16, the k % 32 rest
    added in f32) or, x rounded to f16 first, ggml_vec_dot_f16."""
    x = np.asarray(x, _F32)
    if GGMLType(wtype) == GGMLType.BF16:
        return _vec_dot_bf16(x, np.asarray(raw))
    w = np.asarray(raw).astype(_F32)
    if GGMLType(wtype) == GGMLType.F16:
        x = x.astype(np.float16).astype(_F32)
        return vec_dot_f16(x[:, None, :], w[None])
    k = x.shape[-1]
    np_ = k - k % 32
    out = vec_dot_f16(x[:, None, :np_], w[None, :, :np_]) if np_ else np.zeros((1, w.shape[0]), _F32)
    # the k % 32 rest (`sumf += x[i]*y[i]`): gcc unrolls the loop by 4 without contracting
    # (product rounded, then added), the last (k % 32) % 4 elements fused (measured against
    # llama.cpp's libggml-cpu: bit for bit for k = 1..72)
    q = np_ + (k - np_) // 4 * 4
    for t in range(np_, q):
        out = (out + (x[:, None, t] * w[None, :, t]).astype(_F32)).astype(_F32)
    for t in range(q, k):
        out = _fma(x[:, None, t], w[None, :, t], out)
    return out


def _vec_dot_bf16(x: np.ndarray, raw: np.ndarray) -> np.ndarray:
    """ggml_vec_dot_bf16 (AVX2) of x [1, k] (rounded to bf16, the vec_dot type) with BF16 rows
    raw [rows, k] (uint16 bits): 4 accumulators of 8 lanes over 32-element steps (gcc contracts
    `c = mul + c` into fma), (c1 + c3) + (c2 + c4), hsum_float_8; the k % 32 rest in double."""
    from .ref_matmul import round_bf16
    w = (np.asarray(raw).view(np.uint16).astype(np.uint32) << 16).view(_F32)
    xb = round_bf16(x)
    k = x.shape[-1]
    np_ = k - k % 32
    acc = np.zeros((x.shape[0], w.shape[0], 4, 8), _F32)
    for t in range(0, np_, 32):
        acc = _fma(xb[:, None, t:t + 32].reshape(x.shape[0], 1, 4, 8),
                   w[None, :, t:t + 32].reshape(1, w.shape[0], 4, 8), acc)
    c = ((acc[..., 0, :] + acc[..., 2, :]).astype(_F32) +
         (acc[..., 1, :] + acc[..., 3, :]).astype(_F32)).astype(_F32)
    s = ggml_hsum8(c).astype(np.float64)
    for t in range(np_, k):
        s = s + (xb[:, None, t] * w[None, :, t]).astype(_F32).astype(np.float64)
    return s.astype(_F32)


def vec_dot_f16_reduce(acc: np.ndarray) -> np.ndarray:
    """GGML_F32x8_REDUCE of acc [..., 4, 8]: x0 += x2, x1 += x3, x0 += x1, then
    ((l0+l4)+(l1+l5)) + ((l2+l6)+(l3+l7)) (f32 throughout)."""
    x = ((acc[..., 0, :] + acc[..., 2, :]).astype(_F32)
         + (acc[..., 1, :] + acc[..., 3, :]).astype(_F32)).astype(_F32)
    t = (x[..., 0:4] + x[..., 4:8]).astype(_F32)
    lo = (t[..., 0] + t[..., 1]).astype(_F32)
    return (lo + (t[..., 2] + t[..., 3]).astype(_F32)).astype(_F32)


def vec_dot_f16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ggml_vec_dot_f16 over the last axis of f16-valued f32 arrays (broadcast): 4x8 FMA lanes over
    the first K - K % 32 elements, reduced, the rest added in double."""
    k = a.shape[-1]
    np_ = k - k % 32
    shape = np.broadcast_shapes(a.shape[:-1], b.shape[:-1])
    acc = np.zeros(shape + (4, 8), _F32)
    for t in range(0, np_, 32):
        acc = _fma(a[..., t:t + 32].reshape(a.shape[:-1] + (4, 8)),
                   b[..., t:t + 32].reshape(b.shape[:-1] + (4, 8)), acc)
    s = vec_dot_f16_reduce(acc).astype(np.float64)
    for t in range(np_, k):
        s = s + (a[..., t] * b[..., t]).astype(_F32).astype(np.float64)
    return s.astype(_F32)


def _attend_vec(qh, K, V, cells, scale, softcap, sinks=None):
    """One query, heads qh [H, dk] (f16 values), K [L, H, dk], V [L, H, dv] (listed cells,
    ascending) -> [H, dv]."""
    s = (_F32(scale) * vec_dot_f16(qh[:, None, :], K.transpose(1, 0, 2))).astype(_F32)   # [H, L]
    if softcap > 0:
        c = _F32(softcap)
        s = (np.tanh((s * (_F32(1.0) / c)).astype(np.float64)).astype(_F32) * c).astype(_F32)
    C = (int(cells[-1]) // 32 + 1) * 32                    # whole 32-cell steps from cell 0
    dense = np.full((s.shape[0], C), -np.inf, _F32)
    dense[:, cells] = s
    p = ggml_softmax_probs(dense, True, sinks)             # 0 for unlisted cells
    Vd = np.zeros((C,) + V.shape[1:], _F32)
    Vd[cells] = V
    acc = np.zeros((s.shape[0], V.shape[2], 4, 8), _F32)
    for t in range(0, C, 32):
        pt = p[:, t:t + 32].reshape(-1, 1, 4, 8)
        vt = Vd[t:t + 32].transpose(1, 2, 0).reshape(V.shape[1], V.shape[2], 4, 8)
        acc = _fma(pt, vt, acc)
    return vec_dot_f16_reduce(acc)


def _queries(q, k_cache, v_cache, kv_cells, q_start, q_end):
    """(zeroed output [n_q, n_head, d_v], and per query with cells (i, its cells ascending as
    llama.cpp's cache rows are, K [L, n_head, d_k], V [L, n_head, d_v] as f32 values with the KV
    heads repeated for their query heads))."""
    n_q, n_head, d_k = q.shape
    n_kv = k_cache.shape[1] // d_k
    d_v = v_cache.shape[1] // n_kv
    g = n_head // n_kv

    def rows():
        for i in range(n_q):
            cells = np.sort(np.asarray(kv_cells[q_start[i]:q_end[i]], np.int64))
            if len(cells):
                K = np.repeat(k_cache[cells].astype(_F32).reshape(-1, n_kv, d_k), g, axis=1)
                V = np.repeat(v_cache[cells].astype(_F32).reshape(-1, n_kv, d_v), g, axis=1)
                yield i, cells, K, V
    return np.zeros((n_q, n_head, d_v), _F32), rows()


def attention_vec(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap=0.0, sinks=None):
    """backend.attention with llama.cpp's one-token arithmetic (f16 caches): each query's listed
    cells are taken in ascending cell index, as llama.cpp's rows of the cache are."""
    q16 = np.asarray(q, _F32).astype(np.float16).astype(_F32)
    out, rows = _queries(q, k_cache, v_cache, kv_cells, q_start, q_end)
    for i, cells, K, V in rows:
        out[i] = _attend_vec(q16[i], K, V, cells, scale, softcap, sinks)
    return out


FA_TILE_Q = 64      # ggml_fa_tile_config: query rows from which llama.cpp's CPU FA is tiled
FA_TILE_KV = 64     # cells per KV tile
FA_SPLIT_MIN = 512  # one query over a KV view of this many cells: the split-KV path
FA_TILED, FA_CHUNK, FA_SPLIT = range(3)
FA_QUANT = ("q8_0", "q4_0")         # quantized KV types with llama.cpp's one_chunk reproduced


def fa_one_chunk_q(kt: str, vt: str) -> bool:
    """Cache types whose flash attention is one_chunk with a quantized K or V (attention_fa_q):
    q8_0 / q4_0 K with a q8_0 / q4_0 / f16 V, f16 K with a q8_0 / q4_0 V."""
    return (kt in FA_QUANT and (vt in FA_QUANT or vt == "f16")) or (kt == "f16" and vt in FA_QUANT)


def fa_kernel(n_q: int, f16: bool, view: tuple[int, int] | None) -> int:
    """Which of llama.cpp's CPU flash-attention kernels runs: FA_SPLIT for one query over a KV
    view (base cell, n_kv) of >= 512 cells (f16/f32 caches; here f16), FA_TILED from 64 queries,
    FA_CHUNK otherwise."""
    if n_q == 1 and f16 and view is not None and view[1] >= FA_SPLIT_MIN:
        return FA_SPLIT
    return FA_TILED if n_q >= FA_TILE_Q else FA_CHUNK


def _libm(name: str):
    """The C library's float function `name` (expf, tanhf: what ggml's scalar code calls; glibc's
    are not always correctly rounded), elementwise over f32 arrays; numpy's float64 version
    rounded to f32 where there is no C library to load."""
    import ctypes
    import ctypes.util
    try:
        f = getattr(ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6"), name)
        f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
        vf = np.frompyfunc(f, 1, 1)
        return lambda x: np.asarray(vf(np.asarray(x, _F32)), dtype=_F32)
    except (OSError, AttributeError):
        g = {"expf": np.exp, "tanhf": np.tanh}[name]
        return lambda x: g(np.asarray(x, np.float64)).astype(_F32)


_expf, _tanhf = _libm("expf"), _libm("tanhf")


def _fa_tiled(q, K, V, cells, scale, softcap):
    """ggml_compute_forward_flash_attn_ext_tiled for one query: q [H, dk] f32, K [L, H, dk],
    V [L, H, dv] (listed cells, ascending, as f32 values) -> [H, dv]."""
    H, dv = q.shape[0], V.shape[2]
    sc = _F32(scale / _F32(softcap)) if softcap else _F32(scale)
    M = np.full(H, -np.inf, _F32)
    S = np.zeros(H, _F32)
    acc = np.zeros((H, dv), _F32)
    tiles = cells // FA_TILE_KV
    for t in np.unique(tiles):
        sel = np.flatnonzero(tiles == t)
        s = np.zeros((H, len(sel)), _F32)
        for d in range(q.shape[1]):                            # FMA chain over d
            s = _fma(K[sel, :, d].T, q[:, d, None], s)
        s = (s * sc).astype(_F32)
        if softcap:
            s = (_tanhf(s) * _F32(softcap)).astype(_F32)
        row = np.full((H, FA_TILE_KV), -np.inf, _F32)
        row[:, cells[sel] % FA_TILE_KV] = s
        Mnew = np.maximum(M, row.max(axis=1))
        grow = Mnew > M
        ms = _expf((M - Mnew).astype(_F32))
        acc[grow] = (acc[grow] * ms[grow, None]).astype(_F32)
        S[grow] = (S[grow] * ms[grow]).astype(_F32)
        M = Mnew
        e = ggml_expf((row - M[:, None]).astype(_F32))
        blocks = ggml_hsum8(e.reshape(H, -1, 8)).astype(np.float64)
        tot = S.astype(np.float64)
        for b in range(blocks.shape[1]):
            tot = tot + blocks[:, b]
        S = tot.astype(_F32)
        for j in sel:                                          # FMA chains over the lanes
            acc = _fma(V[j], e[:, cells[j] % FA_TILE_KV, None], acc)
    return _normalise(acc, S)


def _normalise(acc, S):
    """VKQ [H, dv] * (1/S) per head (0 where S == 0), as the kernels end."""
    inv = np.where(S == 0, _F32(0), (_F32(1) / np.where(S == 0, _F32(1), S)).astype(_F32))
    return (acc * inv[:, None]).astype(_F32)


def _fa_chunk(q, K, V, scale, softcap):
    """ggml_compute_forward_flash_attn_ext_f16_one_chunk for one query over f16 K/V (values as f32):
    q [H, dk], K [L, H, dk], V [L, H, dv] -> [H, dv]."""
    _, S, acc = _fa_chunk_part(q, K, V, scale, softcap)
    return _normalise(acc, S)


def _fa_split(q, K, V, cells, base, nek1, nth, scale, softcap):
    """The split-KV decode path: one_chunk on each of nth chunks of ceil(nek1 / nth) cells of
    the view, then ggml_flash_attn_ext_reduce_partials (first products fused, as gcc compiles
    it)."""
    H, dv = q.shape[0], V.shape[2]
    cs = -(-nek1 // nth)
    Mf = np.full(H, -np.inf, _F32)
    Sf = np.zeros(H, _F32)
    out = np.zeros((H, dv), _F32)
    for ch in range(nth):
        sel = np.flatnonzero((cells - base >= ch * cs) & (cells - base < (ch + 1) * cs))
        if ch * cs >= nek1 or len(sel) == 0:
            continue
        Mc, Sc, part = _fa_chunk_part(q, K[sel], V[sel], scale, softcap)
        live = Sc != 0
        Mn = np.maximum(Mf, Mc)
        so = _expf((Mf - Mn).astype(_F32))
        sn = _expf((Mc - Mn).astype(_F32))
        out = np.where(live[:, None], _fma(out, so[:, None], (part * sn[:, None]).astype(_F32)),
                       out)
        Sf = np.where(live, _fma(Sf, so, (Sc * sn).astype(_F32)), Sf)
        Mf = np.where(live, Mn, Mf)
    return _normalise(out, Sf)


def _fa_chunk_part(q, K, V, scale, softcap):
    """one_chunk over f16 K/V before its normalisation: (M [H], S [H], f32(VKQ) [H, dv])."""
    raw = vec_dot_f16(q.astype(np.float16).astype(_F32)[:, None, :], K.transpose(1, 0, 2))
    return _fa_online(raw, V, scale, softcap, True)


def _fa_online(raw, V, scale, softcap, v16):
    """one_chunk's online softmax over raw scores [H, L] (the K dot products, cells in order) and
    V [L, H, dv] (values as f32): s = raw * scale (softcap: softcap * tanhf), on a new max the
    accumulator is scaled by expf(M - s), else the cell weighs expf(s - M); VKQ = fma(v, w, VKQ)
    (rounded to f16 each step when v16: ggml_vec_scale_f16 / ggml_vec_mad_f16), S = fma(S, ms, w).
    Returns (M [H], S [H], VKQ [H, dv]) before the normalisation."""
    H, dv = raw.shape[0], V.shape[2]
    sc = _F32(scale / _F32(softcap)) if softcap else _F32(scale)
    scores = (raw * sc).astype(_F32)
    if softcap:
        scores = (_F32(softcap) * _tanhf(scores)).astype(_F32)
    M = np.full(H, -np.inf, _F32)
    S = np.zeros(H, _F32)
    acc = np.zeros((H, dv), _F32)

    def rnd(x):
        return x.astype(np.float16).astype(_F32) if v16 else x
    for j in range(scores.shape[1]):
        s = scores[:, j]
        grow = s > M
        ms = np.where(grow, _expf((M - s).astype(_F32)), _F32(1))
        w = np.where(grow, _F32(1), _expf((s - M).astype(_F32)))
        M = np.where(grow, s, M)
        acc = np.where(grow[:, None], rnd((acc * ms[:, None]).astype(_F32)), acc)
        acc = rnd(_fma(V[j], w[:, None], acc))
        S = _fma(S, ms, w)
    return M, S, acc


def _vdot_q8(kb: np.ndarray, qq: np.ndarray, qd: np.ndarray) -> np.ndarray:
    """ggml_vec_dot_{q8_0,q4_0}_q8_0 (AVX2): K values kb [L, nb, 32] (ints) and their block
    scales via the caller, q as q8_0 (qq [nb, 32], qd [nb]): per block 8 lanes of 4-element
    integer sums; returns the lanes [L, nb, 8] as f32 (exact)."""
    return (kb.astype(np.int64) * qq.astype(np.int64)).reshape(kb.shape[:-1] + (8, 4)).sum(-1) \
        .astype(_F32)


def _kv_blocks(raw: np.ndarray, t: str) -> tuple[np.ndarray, np.ndarray]:
    """q8_0 / q4_0 rows as bytes [L, nb * bb] -> (values int [L, nb, 32], d f32 [L, nb])."""
    bb = 34 if t == "q8_0" else 18
    b = raw.reshape(raw.shape[0], -1, bb)
    d = b[..., :2].copy().view(np.float16)[..., 0].astype(_F32)
    if t == "q8_0":
        return b[..., 2:].view(np.int8).astype(np.int64), d
    lo, hi = (b[..., 2:] & 15).astype(np.int64) - 8, (b[..., 2:] >> 4).astype(np.int64) - 8
    return np.concatenate([lo, hi], axis=-1), d


def _q8_scores(qq, qd, kv, kd):
    """ggml_vec_dot_{q8_0,q4_0}_q8_0 of every K row (kv [L, nb, 32], kd [L, nb]) with q as q8_0
    (qq [nb, 32], qd [nb]) -> [L]."""
    lanes = _vdot_q8(kv, qq, qd)                                 # [L, nb, 8]
    dd = (kd * qd[None, :]).astype(_F32)                         # [L, nb]
    acc8 = np.zeros((kv.shape[0], 8), _F32)
    for b in range(kv.shape[1]):
        acc8 = _fma(dd[:, b, None], lanes[:, b], acc8)
    return ggml_hsum8(acc8)


def attention_fa_q(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap=0.0):
    """attention_fa over a q8_0 / q4_0 K cache (and a q8_0 / q4_0 / f16 V cache), or an f16 K
    with a q8_0 / q4_0 V: llama.cpp runs one_chunk for every ubatch there, q quantized to q8_0
    (quantize_row_q8_0, AVX2) and scores by ggml_vec_dot_{q8_0,q4_0}_q8_0 (f16 K: q rounded to
    f16, ggml_vec_dot_f16), a quantized V dequantized and summed in f32."""
    from ..quant import quantize_q8_0_rows
    from .base import kv_type
    kt, vt = kv_type(k_cache), kv_type(v_cache)
    n_q, n_head, d_k = q.shape
    n_kv = k_cache.shape[1] * (1 if kt == "f16" else 32) // d_k
    g = n_head // n_kv
    kraw = np.ascontiguousarray(k_cache).view(np.uint8).reshape(k_cache.shape[0], n_kv, -1)
    vraw = np.ascontiguousarray(v_cache).view(np.uint8).reshape(v_cache.shape[0], n_kv, -1)
    d_v = (v_cache.shape[1] * (1 if vt == "f16" else 32)) // n_kv
    qs, qdd = quantize_q8_0_rows(np.asarray(q, _F32).reshape(-1, d_k), simd=True)
    qs, qdd = qs.reshape(n_q, n_head, -1, 32), qdd.reshape(n_q, n_head, -1)
    q16 = np.asarray(q, _F32).astype(np.float16).astype(_F32)
    out = np.zeros((n_q, n_head, d_v), _F32)
    for i in range(n_q):
        cells = np.sort(np.asarray(kv_cells[q_start[i]:q_end[i]], np.int64))
        if len(cells) == 0:
            continue
        raw, vval = [], []
        for h in range(n_head):
            if kt == "f16":
                kh = kraw[cells, h // g].copy().view(np.float16).astype(_F32)
                raw.append(vec_dot_f16(q16[i, h][None, :], kh))
            else:
                raw.append(_q8_scores(qs[i, h], qdd[i, h], *_kv_blocks(kraw[cells, h // g], kt)))
            if vt == "f16":
                vval.append(vraw[cells, h // g].copy().view(np.float16).astype(_F32))
            else:
                vv, vd = _kv_blocks(vraw[cells, h // g], vt)
                vval.append((vv.astype(_F32) * vd[..., None]).astype(_F32).reshape(len(cells), -1))
        _, S, acc = _fa_online(np.stack(raw), np.stack(vval, axis=1), scale, softcap, vt == "f16")
        out[i] = _normalise(acc, S)
    return out


def attention_fa(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap=0.0, view=None,
                 n_threads=1):
    """backend.attention with llama.cpp's flash-attention arithmetic (f16 or f32 caches of one
    type): ubatches of >= FA_TILE_Q queries the tiled kernel (f32 q, FMA chains, ggml_v_expf per
    64-cell tile), smaller ones one_chunk (f16 q, ggml_vec_dot_f16, expf online softmax, V summed
    in f16; f16 caches only), one query over a view (base cell, n_kv) of >= 512 cells the split-KV
    path with n_threads chunks (llama.cpp's threads). Each query's cells in ascending cell
    index."""
    from .base import kv_type
    if fa_one_chunk_q(kv_type(k_cache), kv_type(v_cache)):
        return attention_fa_q(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap)
    kernel = fa_kernel(q.shape[0], k_cache.dtype == np.float16, view)
    tiled = kernel == FA_TILED
    if not tiled and k_cache.dtype != np.float16:
        raise ValueError("attention_fa: one_chunk needs f16 caches")
    out, rows = _queries(q, k_cache, v_cache, kv_cells, q_start, q_end)
    for i, cells, K, V in rows:
        qi = np.asarray(q[i], _F32)
        if kernel == FA_SPLIT:
            out[i] = _fa_split(qi, K, V, cells, view[0], view[1], max(1, n_threads), scale,
                               softcap)
        else:
            out[i] = _fa_tiled(qi, K, V, cells, scale, softcap) if tiled else \
                _fa_chunk(qi, K, V, scale, softcap)
    return out
