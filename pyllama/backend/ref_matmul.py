"""numpy oracle for the matmul / get_rows ops with llama.cpp's numerics.

`matmul_ref(wtype, w_raw, x)`: the activations x [n, k] f32 are quantized per row into the
weight type's vec_dot type, exactly as llama.cpp does on x86 (q8_0/q8_1: d = amax/127 as f16,
q = round-half-even(x * 127/amax); q8_K: quantize_row_q8_K_ref, or for Q4_K the 4x8 repack
rule; f16/bf16: x rounded), then per block the integer dot products are computed exactly (int64)
and multiplied by the scales. 32-blocks: block contributions accumulated in order in float32
(the kernels sum 8 SIMD lanes, so compare with a ~1e-5 relative tolerance). K-quants: llama.cpp's
prefill fma chains (see _dot_k), the same float operations as the CPU kernels (bit-equal).
`get_rows_ref(wtype, w_raw, ids)`: ggml's dequantize_row_* arithmetic in float32.

w_raw is the reader's view: uint8 [rows, row_bytes] for block types, float32 / float16 /
uint16 (BF16) [rows, k] for float types.
"""
from __future__ import annotations

import numpy as np

from ..gguf import GGML_BLOCK, GGMLType
from ..quant import dequantize

T = GGMLType
FAMILY_A = (T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.IQ4_NL, T.MXFP4)  # q8_0 / q8_1 acts
# repacked by llama.cpp on AVX2 when rows % 8 == 0 (ggml-cpu/repack.cpp): ggml_gemm/gemv_*_8x8_q8_0
REPACKED_8X8 = (T.Q4_0, T.IQ4_NL, T.MXFP4)
FAMILY_K = (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K)      # vec_dot type q8_K
FLOATS = (T.F32, T.F16, T.BF16)
# i-quants with llama.cpp's tiled-kernel arithmetic (q8_K activations)
FAMILY_IQ = (T.IQ2_XXS, T.IQ2_XS, T.IQ2_S, T.IQ3_XXS, T.IQ3_S, T.IQ1_S, T.IQ1_M, T.IQ4_XS)
TERNARY = (T.TQ1_0, T.TQ2_0)     # ggml_vec_dot_tq*_q8_K at every row count
SUPPORTED = FAMILY_A + FAMILY_K + FLOATS + FAMILY_IQ + TERNARY


def _f16(b: np.ndarray) -> np.ndarray:
    """uint8 [..., 2] little-endian halves -> float32 [...]"""
    return np.ascontiguousarray(b).view(np.float16)[..., 0].astype(np.float32)


def _round_f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """f32 -> bf16 (round to nearest even, NaN kept quiet) -> f32, as ggml_compute_fp32_to_bf16."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + (0x7FFF + ((u >> 16) & 1))) >> 16) & 0xFFFF
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    r = np.where(nan, (u >> 16) | 64, r).astype(np.uint32)
    return (r << 16).view(np.float32)


# ----------------------------------------------------------------------------- unpacking ---
def _blocks(wtype, raw):
    be, bb = GGML_BLOCK[GGMLType(wtype)]
    raw = np.ascontiguousarray(raw).view(np.uint8)
    raw = raw.reshape(raw.shape[0], -1)
    return raw.reshape(raw.shape[0], -1, bb), raw.shape[1] // bb * be


def _nibbles(qs):
    """[..., 16] bytes -> [..., 32]: low nibbles then high nibbles (ints)."""
    qs = qs.astype(np.int16)
    return np.concatenate([qs & 0xF, qs >> 4], axis=-1)


def _bits32(qh):
    """[..., 4] bytes (uint32 LE) -> [..., 32] bits."""
    v = np.ascontiguousarray(qh).view("<u4")[..., 0].astype(np.int64)
    return ((v[..., None] >> np.arange(32)) & 1).astype(np.int16)


def _unpack_a(wtype, blk):
    """-> q int16 [rows, nb, 32] (signed values), d, m (or None) f32 [rows, nb]"""
    d, m = _f16(blk[..., 0:2]), None
    if wtype == T.Q4_0:
        q = _nibbles(blk[..., 2:18]) - 8
    elif wtype == T.Q4_1:
        m, q = _f16(blk[..., 2:4]), _nibbles(blk[..., 4:20])
    elif wtype == T.Q5_0:
        q = (_nibbles(blk[..., 6:22]) | (_bits32(blk[..., 2:6]) << 4)) - 16
    elif wtype == T.Q5_1:
        m = _f16(blk[..., 2:4])
        q = _nibbles(blk[..., 8:24]) | (_bits32(blk[..., 4:8]) << 4)
    elif wtype == T.IQ4_NL:
        from ..quant.iquants import KV_IQ4NL
        q = KV_IQ4NL.astype(np.int16)[_nibbles(blk[..., 2:18])]
    elif wtype == T.MXFP4:
        from ..quant.iquants import KV_FP4, e8m0_half
        d = e8m0_half(blk[..., 0])
        q = KV_FP4.astype(np.int16)[_nibbles(blk[..., 1:17])]
    else:
        q = blk[..., 2:34].view(np.int8).astype(np.int16)
    return q, d, m


def _scale_min_k4(sc):
    """Q4_K/Q5_K 12 scale bytes [..., 12] -> scales, mins [..., 8]"""
    sc = sc.astype(np.int16)
    lo_s, lo_m = sc[..., 0:4] & 63, sc[..., 4:8] & 63
    hi_s = (sc[..., 8:12] & 0xF) | ((sc[..., 0:4] >> 6) << 4)
    hi_m = (sc[..., 8:12] >> 4) | ((sc[..., 4:8] >> 6) << 4)
    return np.concatenate([lo_s, hi_s], -1), np.concatenate([lo_m, hi_m], -1)


def _q3k_scales(sc):
    sc = sc.astype(np.int16)
    s = np.arange(16)
    lo = np.where(s < 8, sc[..., s % 8] & 0xF, sc[..., s % 8] >> 4)
    hi = (sc[..., 8 + (s & 3)] >> (2 * (s >> 2))) & 3
    return (lo | (hi << 4)) - 32


def _unpack_k(wtype, blk):
    """-> q int16 [rows, nsb, 256] (values entering the dot: signed for Q3_K/Q6_K),
    sc int16 [rows, nsb, 16] (per 16 elements), mn (per 16, or None), d, dmin f32 [rows, nsb]"""
    b = blk.astype(np.int16)
    shp = b.shape[:-1]
    if wtype == T.Q2_K:
        qs = b[..., 16:80].reshape(*shp, 2, 1, 32)
        q = ((qs >> (2 * np.arange(4)).reshape(4, 1)) & 3).reshape(*shp, 256)
        return q, b[..., 0:16] & 0xF, b[..., 0:16] >> 4, _f16(blk[..., 80:82]), _f16(blk[..., 82:84])
    if wtype == T.Q3_K:
        qs = b[..., 32:96].reshape(*shp, 2, 1, 32)
        low = (qs >> (2 * np.arange(4)).reshape(4, 1)) & 3
        shift = (4 * np.arange(2)[:, None] + np.arange(4)[None, :])[..., None]
        hbit = (b[..., None, None, 0:32] >> shift) & 1
        q = (low + 4 * hbit - 4).reshape(*shp, 256)
        return q, _q3k_scales(b[..., 96:108]), None, _f16(blk[..., 108:110]), None
    if wtype in (T.Q4_K, T.Q5_K):
        s8, m8 = _scale_min_k4(b[..., 4:16])
        if wtype == T.Q4_K:
            qs = b[..., 16:144].reshape(*shp, 4, 32)
            q = np.stack([qs & 0xF, qs >> 4], -2)
        else:
            qs, qh = b[..., 48:176].reshape(*shp, 4, 32), b[..., None, 16:48]
            sh = 2 * np.arange(4)[:, None]
            q = np.stack([(qs & 0xF) | (((qh >> sh) & 1) << 4),
                          (qs >> 4) | (((qh >> (sh + 1)) & 1) << 4)], -2)
        return (q.reshape(*shp, 256), np.repeat(s8, 2, -1), np.repeat(m8, 2, -1),
                _f16(blk[..., 0:2]), _f16(blk[..., 2:4]))
    # Q6_K
    ql, qh = b[..., 0:128].reshape(*shp, 2, 64), b[..., 128:192].reshape(*shp, 2, 32)
    parts = [(ql[..., 0:32] & 0xF) | ((qh & 3) << 4),
             (ql[..., 32:64] & 0xF) | (((qh >> 2) & 3) << 4),
             (ql[..., 0:32] >> 4) | (((qh >> 4) & 3) << 4),
             (ql[..., 32:64] >> 4) | (((qh >> 6) & 3) << 4)]
    q = np.stack(parts, -2).reshape(*shp, 256) - 32
    sc = blk[..., 192:208].view(np.int8).astype(np.int16)
    return q, sc, None, _f16(blk[..., 208:210]), None


def _floats(wtype, raw):
    raw = np.asarray(raw)
    if wtype == T.F32:
        return raw.astype(np.float32)
    if wtype == T.F16:
        return raw.view(np.float16).astype(np.float32)
    return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def dequantize_ref(wtype, w_raw) -> np.ndarray:
    """All rows -> float32 [rows, k] with ggml's dequantize_row_* float expressions."""
    wtype = GGMLType(wtype)
    if wtype in FLOATS:
        return _floats(wtype, w_raw).reshape(np.asarray(w_raw).shape[0], -1)
    blk, k = _blocks(wtype, w_raw)
    rows = blk.shape[0]
    if wtype in FAMILY_A:
        q, d, m = _unpack_a(wtype, blk)
        y = q.astype(np.float32) * d[..., None]
        if m is not None:
            y = y + m[..., None]
        return y.reshape(rows, k)
    if wtype not in FAMILY_K:
        return dequantize(np.ascontiguousarray(w_raw).view(np.uint8), wtype).reshape(rows, k)
    q, sc, mn, d, dmin = _unpack_k(wtype, blk)
    q16 = q.reshape(*q.shape[:-1], 16, 16).astype(np.float32)
    dl = (d[..., None] * sc.astype(np.float32))[..., None]
    y = dl * q16
    if mn is not None:
        y = y - (dmin[..., None] * mn.astype(np.float32))[..., None]
    return y.reshape(rows, k)


def get_rows_ref(wtype, w_raw, ids) -> np.ndarray:
    ids = np.asarray(ids, np.int64)
    return dequantize_ref(wtype, np.asarray(w_raw)[ids])


# --------------------------------------------------------------- activation quantizers ---
def quantize_q8_0_ref(x: np.ndarray):
    """x [n, k] -> q int8 [n, k], d f32 [n, k/32] (f16 values), s f32 [n, k/32] (q8_1 sums)"""
    x = np.asarray(x, np.float32)
    n, k = x.shape
    xb = x.reshape(n, k // 32, 32)
    amax = np.abs(xb).max(-1)
    with np.errstate(divide="ignore"):
        iscale = np.where(amax != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint(xb * iscale[..., None]).astype(np.int32)
    d = amax / np.float32(127)
    s = _round_f16(d * q.sum(-1).astype(np.float32))
    return q.astype(np.int8).reshape(n, k), _round_f16(d), s


def quantize_q8_K_ref(x: np.ndarray):
    """x [n, k] -> q int8 [n, k], d f32 [n, k/256], bsums int16 [n, k/16]"""
    xb = _q8_K_blocks(x)
    idx = np.abs(xb).argmax(-1)
    return _q8_K_with_max(xb, np.take_along_axis(xb, idx[..., None], -1)[..., 0])


def quantize_q8_K_4x8_ref(x: np.ndarray):
    """ggml_quantize_mat_q8_K_4x8 values (llama.cpp's repacked Q4_K activations): as
    quantize_q8_K_ref but max = +amax if some element equals +amax, else -amax."""
    xb = _q8_K_blocks(x)
    amax = np.abs(xb).max(-1)
    return _q8_K_with_max(xb, np.where((xb == amax[..., None]).any(-1), amax, -amax))


def _q8_K_blocks(x: np.ndarray) -> np.ndarray:
    """x [n, k] -> float32 [n, k/256, 256]"""
    x = np.asarray(x, np.float32)
    return x.reshape(x.shape[0], x.shape[1] // 256, 256)


def _q8_K_with_max(xb: np.ndarray, mx: np.ndarray):
    """Quantize blocks xb [n, nb, 256] given each block's signed max mx [n, nb] (ggml's
    iscale = -127/max rule); returns (q int8 [n, k], d f32 [n, nb], bsums int16 [n, k/16])."""
    n, nb, _ = xb.shape
    mx = mx.astype(np.float32)
    zero = mx == 0
    with np.errstate(divide="ignore"):
        iscale = np.where(zero, np.float32(1), np.float32(-127) / np.where(zero, 1, mx))
    iscale = iscale.astype(np.float32)
    q = np.minimum(127, np.rint(xb * iscale[..., None])).astype(np.int32)
    q[zero] = 0
    d = np.where(zero, np.float32(0), np.float32(1) / iscale).astype(np.float32)
    bs = q.reshape(n, nb * 16, 16).sum(-1).astype(np.int16)
    return q.astype(np.int8).reshape(n, nb * 256), d, bs


# ------------------------------------------------------------------------------ matmul ---
def _dot_a(wtype, blk, x):
    q, dw, mw = _unpack_a(wtype, blk)
    yq, dy, sy = quantize_q8_0_ref(x)
    n, nb = x.shape[0], q.shape[1]
    yq = yq.reshape(n, nb, 32).astype(np.float64)
    qw = q.astype(np.float64)
    acc = np.zeros((n, q.shape[0]), np.float32)
    for b in range(nb):
        isum = (yq[:, b, :] @ qw[:, b, :].T).astype(np.float32)   # exact ints
        term = (dy[:, b, None] * dw[None, :, b]) * isum
        if mw is not None:
            term = term + mw[None, :, b] * sy[:, b, None]
        acc += term
    return acc


def _dot_r8(wtype, blk, x):
    """llama.cpp's repacked 8x8 kernels (ggml_gemm/gemv_{q4_0,iq4_nl,mxfp4}_8x8_q8_0, AVX2): per
    32-block the exact integer dot I, acc = fma((float)I, f32(d_w * d_x), acc) in block order."""
    q, dw, _ = _unpack_a(wtype, blk)
    yq, dy, _ = quantize_q8_0_ref(x)
    n, nb = x.shape[0], q.shape[1]
    yq = yq.reshape(n, nb, 32).astype(np.float64)
    acc = np.zeros((n, q.shape[0]), np.float32)
    for b in range(nb):
        isum = (yq[:, b, :] @ q[:, b, :].T.astype(np.float64)).astype(np.float32)   # exact
        acc = _fma32(isum, (dy[:, b, None] * dw[None, :, b]).astype(np.float32), acc)
    return acc


def dot_v2(wtype, blk, x):
    """ggml_vec_dot_{iq4_nl,mxfp4}_q8_0 (AVX2): block pairs into two chains of 8 lanes
    (lane l: elements 4l..4l+3), acc_h = fma(f32(d_x*d_w), (float)lane, acc_h), then
    hsum8(acc1 + acc2); an odd last block adds fma(d, (float)I, sum)."""
    from .ref import ggml_hsum8
    q, dw, _ = _unpack_a(wtype, blk)
    yq, dy, _ = quantize_q8_0_ref(x)
    n, rows, nb = x.shape[0], q.shape[0], q.shape[1]
    yq = yq.reshape(n, nb, 8, 4).astype(np.float64)
    qw = q.reshape(rows, nb, 8, 4).astype(np.float64)
    acc = np.zeros((2, n, rows, 8), np.float32)
    for b in range(nb & ~1):
        lanes = np.einsum("rlk,nlk->nrl", qw[:, b], yq[:, b]).astype(np.float32)
        dd = (dy[:, b, None] * dw[None, :, b]).astype(np.float32)[..., None]
        acc[b & 1] = _fma32(np.broadcast_to(dd, lanes.shape), lanes, acc[b & 1])
    s = ggml_hsum8((acc[0] + acc[1]).astype(np.float32))
    for b in range(nb & ~1, nb):
        isum = np.einsum("rlk,nlk->nr", qw[:, b], yq[:, b]).astype(np.float32)
        s = _fma32((dy[:, b, None] * dw[None, :, b]).astype(np.float32), isum, s)
    return s


def _fma32(a, b, c):
    """f32 fma(a, b, c) (one rounding; through float64, exact for these operands but for rare
    double-rounding ties)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + c.astype(np.float64)).astype(np.float32)


def _dot_k(wtype, blk, x):
    """llama.cpp's prefill K-quant arithmetic (docs/numerics.md). Q4_K (repacked, gemm): per
    64-element sub-block pair acc = fma(I, f32(d*dy), acc), accm = fma(M, f32(dmin*dy), accm),
    y = acc - accm (activations by the 4x8 repack rule). Q2_K/Q5_K (tiled kernel): per super-block
    res = fma(-dmin, (float)S2, f32(d*(float)S1)), acc = fma(res, dy, acc). Offset types
    (Q3_K/Q6_K, tiled): per super-block acc = fma(f32(d * (float)S), dy, acc)."""
    q, sc, mn, dw, dmin = _unpack_k(wtype, blk)
    gemm = wtype == T.Q4_K and blk.shape[0] % 8 == 0      # repacked by llama.cpp
    quant = quantize_q8_K_4x8_ref if gemm else quantize_q8_K_ref
    yq, dy, bs = quant(x)
    n, rows, nsb = x.shape[0], q.shape[0], q.shape[1]
    yq = yq.reshape(n, nsb, 16, 16).astype(np.float64)
    qw = q.reshape(rows, nsb, 16, 16).astype(np.float64)
    bs = bs.reshape(n, nsb, 16).astype(np.float64)
    acc = np.zeros((n, rows), np.float32)
    accm = np.zeros((n, rows), np.float32)
    for b in range(nsb):
        dot16 = np.einsum("njk,rjk->nrj", yq[:, b], qw[:, b]) * sc[None, :, b, :]   # exact ints
        if mn is None:
            res = (dw[None, :, b] * dot16.sum(-1).astype(np.float32)).astype(np.float32)
            acc = _fma32(res, dy[:, b, None], acc)
            continue
        msum = bs[:, b, None, :] * mn[None, :, b, :]
        if not gemm:     # Q2_K / Q5_K / unrepacked Q4_K: ggml's tiled kernel
            s1 = (dw[None, :, b] * dot16.sum(-1).astype(np.float32)).astype(np.float32)
            res = _fma32(-dmin[None, :, b], msum.sum(-1).astype(np.float32), s1)
            acc = _fma32(res, dy[:, b, None], acc)
            continue
        dd = (dy[:, b, None] * dw[None, :, b]).astype(np.float32)
        dm = (dy[:, b, None] * dmin[None, :, b]).astype(np.float32)
        for p in range(4):
            acc = _fma32(dot16[..., 4 * p:4 * p + 4].sum(-1).astype(np.float32), dd, acc)
            accm = _fma32(msum[..., 4 * p:4 * p + 4].sum(-1).astype(np.float32), dm, accm)
    return acc - accm if gemm else acc


def matmul_ref(wtype, w_raw, x: np.ndarray) -> np.ndarray:
    """y [n, rows] = x [n, k] @ W^T with llama.cpp's activation quantization."""
    wtype = GGMLType(wtype)
    x = np.atleast_2d(np.asarray(x, np.float32))
    if wtype in FLOATS:
        w = dequantize_ref(wtype, w_raw).astype(np.float64)
        xr = {T.F32: x, T.F16: _round_f16(x), T.BF16: round_bf16(x)}[wtype]
        return (xr.astype(np.float64) @ w.T).astype(np.float32)
    blk, k = _blocks(wtype, w_raw)
    if x.shape[1] != k:
        raise ValueError(f"x has {x.shape[1]} columns, weight rows have {k}")
    if wtype in REPACKED_8X8 and blk.shape[0] % 8 == 0:
        return _dot_r8(wtype, blk, x)
    if wtype == T.MXFP4:          # not repacked: ggml_vec_dot_mxfp4_q8_0 for every row count
        return dot_v2(wtype, blk, x)
    if wtype in FAMILY_A:
        return _dot_a(wtype, blk, x)
    if wtype in FAMILY_K:
        return _dot_k(wtype, blk, x)
    if wtype in FAMILY_IQ:
        return _dot_iq(wtype, blk, x)
    if wtype in TERNARY:
        return _dot_tq(wtype, blk, x)
    raise NotImplementedError(f"matmul for {wtype.name}")


def _dot_tq(wtype, blk, x):
    """ggml_vec_dot_tq{1,2}_0_q8_K (AVX2), llama.cpp's only TQ kernel: per super-block 8 lanes,
    lane l the exact sum over the 32-element chunks of trit*q8 on elements 4l..4l+3, minus
    bsums[2l] + bsums[2l+1] (the -1 offset); acc8 = fma((float)lane, f32(d8*d), acc8) (gcc
    contracts `sumf + lane*d`); hsum_float_8."""
    from ..quant import BLOCK_LAYOUT
    from ..quant.iquants import tq1_trits, tq2_values
    from .ref import ggml_hsum8
    rows, nb = blk.shape[0], blk.shape[1]
    b = np.ascontiguousarray(blk).reshape(-1).view(BLOCK_LAYOUT[wtype].dtype)
    f = {n: np.ascontiguousarray(b[n]) for n in b.dtype.names}
    v = (tq1_trits(f) if wtype == T.TQ1_0 else tq2_values(f)).astype(np.float64)
    v = v.reshape(rows, nb, 8, 8, 4)
    d = f["d"].astype(np.float32).reshape(rows, nb)
    yq, dy, bs = quantize_q8_K_ref(x)
    n = x.shape[0]
    yq = yq.reshape(n, nb, 8, 8, 4).astype(np.float64)
    bs = bs.reshape(n, nb, 8, 2).astype(np.int64).sum(-1)
    acc = np.zeros((n, rows, 8), np.float32)
    for i in range(nb):
        lanes = (np.einsum("rcle,ncle->nrl", v[:, i], yq[:, i]) - bs[:, None, i]).astype(np.float32)
        dd = (dy[:, None, i] * d[None, :, i]).astype(np.float32)[..., None]
        acc = _fma32(lanes, np.broadcast_to(dd, lanes.shape), acc)
    return ggml_hsum8(acc)


def _dot_iq(wtype, blk, x):
    """llama.cpp's tiled kernel for the i-quants (ggml-cpu/tiled): per super-block the exact
    integer S = sum over 16-element groups of scale * (values . q8), res = f32(d0 * (float)S),
    acc = fma(res, dy, acc) over super-blocks in order."""
    from ..quant import BLOCK_LAYOUT
    from ..quant.iquants import tiled_ints
    rows, nsb = blk.shape[0], blk.shape[1]
    b = np.ascontiguousarray(blk).reshape(-1).view(BLOCK_LAYOUT[wtype].dtype)
    v, sc, d0 = tiled_ints(wtype, {f: np.ascontiguousarray(b[f]) for f in b.dtype.names})
    v = v.reshape(rows, nsb, 16, 16).astype(np.float64)
    sc = sc.reshape(rows, nsb, 16).astype(np.float64)
    d0 = d0.reshape(rows, nsb)
    yq, dy, _ = quantize_q8_K_ref(x)
    n = x.shape[0]
    yq = yq.reshape(n, nsb, 16, 16).astype(np.float64)
    acc = np.zeros((n, rows), np.float32)
    for s in range(nsb):
        S = (np.einsum("njk,rjk->nrj", yq[:, s], v[:, s]) * sc[None, :, s]).sum(-1)  # exact
        res = (d0[None, :, s] * S.astype(np.float32)).astype(np.float32)
        acc = _fma32(res, dy[:, s, None], acc)
    return acc
