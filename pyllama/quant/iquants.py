"""numpy dequantizers of the i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
IQ4_XS), the ternary types (TQ1_0, TQ2_0) and MXFP4.

Ports of ggml's dequantize_row_* (ggml-quants.c), vectorised over blocks: each takes the block
fields by name (layout.BLOCK_LAYOUT) and returns float32 [n_blocks, 256] (MXFP4: [n, 32]). The
float32 operations are ggml's, in its order (scale products left to right, signs applied by an
exact multiplication), so the values are bit-identical to ggml's (tests/quant/test_quant_ggml.py).
The lattice grids come from ggml-common.h through grids.py (scripts/gen_iq_grids.py).
"""
from __future__ import annotations

import numpy as np

from . import grids as G

F32 = np.float32
_BYTE = np.arange(8, dtype=np.uint64) * np.uint64(8)


def grid_bytes(table: np.ndarray, width: int, signed: bool = False) -> np.ndarray:
    """A grid of uint64 / uint32 entries -> [n_entries, width] of its little-endian bytes."""
    b = np.ascontiguousarray(table).view(np.uint8).reshape(len(table), width)
    return b.view(np.int8) if signed else b


IQ2XXS = grid_bytes(G.IQ2XXS_GRID, 8).astype(F32)
IQ2XS = grid_bytes(G.IQ2XS_GRID, 8).astype(F32)
IQ2S = grid_bytes(G.IQ2S_GRID, 8).astype(F32)
IQ3XXS = grid_bytes(G.IQ3XXS_GRID, 4).astype(F32)
IQ3S = grid_bytes(G.IQ3S_GRID, 4).astype(F32)
IQ1S = grid_bytes(G.IQ1S_GRID, 8, signed=True).astype(F32)
# sign byte -> [8] of +-1 (ggml: `signs & kmask_iq2xs[j] ? -1.f : 1.f`)
_SIGN8 = np.where((np.arange(256)[:, None] >> np.arange(8)[None, :]) & 1, F32(-1), F32(1))
KV_IQ4NL = G.KVALUES_IQ4NL.astype(F32)
KV_FP4 = G.KVALUES_FP4.astype(F32)


def _f16(v) -> np.ndarray:
    return np.asarray(v).astype(F32)


def _sign7(bits7: np.ndarray) -> np.ndarray:
    """7 packed sign bits -> [.., 8] of +-1 through ggml's ksigns_iq2xs (8th bit: parity)."""
    return _SIGN8[G.KSIGNS_IQ2XS[bits7 & 127]]


def _half_scale(d, s, mul):
    """ggml's d * (0.5f + s) * mul (IQ2: mul 0.25, IQ3_XXS: 0.5) in float32."""
    return (d * (F32(0.5) + s.astype(F32))) * F32(mul)


def dequantize_iq2_xxs(b) -> np.ndarray:
    n = len(b["d"])
    q = np.ascontiguousarray(b["qs"]).view("<u4").reshape(n, 8, 2)   # aux32[0], aux32[1]
    idx = q[:, :, 0:1].view(np.uint8).reshape(n, 8, 4)               # aux8[l]
    a1 = q[:, :, 1].astype(np.int64)
    db = _half_scale(_f16(b["d"])[:, None], a1 >> 28, 0.25)           # [n, 8]
    signs = _sign7(a1[:, :, None] >> (7 * np.arange(4)))              # [n, 8, 4, 8]
    y = (db[:, :, None, None] * IQ2XXS[idx]) * signs
    return y.reshape(n, 256)


def _two_scales(d, scales):
    """IQ2_XS / IQ2_S: db[0], db[1] per 32 -> [n, 8, 4] (the scale of each group of 8)."""
    lo = _half_scale(d[:, None], scales & 0xF, 0.25)
    hi = _half_scale(d[:, None], scales >> 4, 0.25)
    return np.stack([lo, lo, hi, hi], axis=2)


def dequantize_iq2_xs(b) -> np.ndarray:
    n = len(b["d"])
    qs = b["qs"].reshape(n, 8, 4).astype(np.int64)
    db = _two_scales(_f16(b["d"]), b["scales"])
    y = (db[..., None] * IQ2XS[qs & 511]) * _SIGN8[G.KSIGNS_IQ2XS[qs >> 9]]
    return y.reshape(n, 256)


def dequantize_iq2_s(b) -> np.ndarray:
    n = len(b["d"])
    qs = b["qs"][:, :32].reshape(n, 8, 4).astype(np.int64)
    signs = b["qs"][:, 32:].reshape(n, 8, 4)
    qh = b["qh"].astype(np.int64)[:, :, None]
    idx = qs | ((qh << (8 - 2 * np.arange(4))) & 0x300)
    db = _two_scales(_f16(b["d"]), b["scales"])
    y = (db[..., None] * IQ2S[idx]) * _SIGN8[signs]
    return y.reshape(n, 256)


def dequantize_iq3_xxs(b) -> np.ndarray:
    n = len(b["d"])
    qs = b["qs"][:, :64].reshape(n, 8, 4, 2)
    aux = np.ascontiguousarray(b["qs"][:, 64:]).view("<u4").astype(np.int64)   # [n, 8]
    db = _half_scale(_f16(b["d"])[:, None], aux >> 28, 0.5)
    signs = _sign7(aux[:, :, None] >> (7 * np.arange(4)))                       # [n, 8, 4, 8]
    g = IQ3XXS[qs].reshape(n, 8, 4, 8)
    return ((db[:, :, None, None] * g) * signs).reshape(n, 256)


def dequantize_iq3_s(b) -> np.ndarray:
    n = len(b["d"])
    qs = b["qs"].reshape(n, 8, 4, 2).astype(np.int64)
    qh = b["qh"].astype(np.int64)[:, :, None]                                  # [n, 8, 1]
    l2 = 2 * np.arange(4)
    idx = qs | np.stack([(qh << (8 - l2)) & 256, (qh << (7 - l2)) & 256], axis=3)
    s = (b["scales"][:, :, None] >> np.array([0, 4], np.uint8)) & 0xF           # [n, 4, 2]
    db = _f16(b["d"])[:, None] * (1 + 2 * s.reshape(n, 8).astype(np.int32)).astype(F32)
    g = IQ3S[idx].reshape(n, 8, 4, 8)
    signs = _SIGN8[b["signs"].reshape(n, 8, 4)]
    return ((db[:, :, None, None] * g) * signs).reshape(n, 256)


def dequantize_iq1_s(b) -> np.ndarray:
    n = len(b["d"])
    qh = b["qh"].astype(np.int64)                                              # [n, 8]
    dl = _f16(b["d"])[:, None] * (2 * ((qh >> 12) & 7) + 1).astype(F32)
    delta = np.where(qh & 0x8000, -G.IQ1S_DELTA, G.IQ1S_DELTA).astype(F32)
    idx = b["qs"].reshape(n, 8, 4).astype(np.int64) | \
        (((qh[:, :, None] >> (3 * np.arange(4))) & 7) << 8)
    y = dl[:, :, None, None] * (IQ1S[idx] + delta[:, :, None, None])
    return y.reshape(n, 256)


def iq1m_scale(scales: np.ndarray) -> np.ndarray:
    """IQ1_M's f16 super-block scale, assembled from the top nibbles of its 4 scale words."""
    sc = np.ascontiguousarray(scales).view("<u2").astype(np.uint16)           # [n, 4]
    u = (sc[:, 0] >> 12) | ((sc[:, 1] >> 8) & 0x00F0) | ((sc[:, 2] >> 4) & 0x0F00) | \
        (sc[:, 3] & 0xF000)
    return u.astype(np.uint16).view(np.float16).astype(F32)


def dequantize_iq1_m(b) -> np.ndarray:
    n = len(b["qs"])
    sc = np.ascontiguousarray(b["scales"]).view("<u2").astype(np.int64)       # [n, 4]
    d = iq1m_scale(b["scales"])
    ib = np.arange(8)
    s = sc[:, ib // 2]                                                         # [n, 8]
    sh = 6 * (ib % 2)
    dl1 = d[:, None] * (2 * ((s >> sh) & 7) + 1).astype(F32)
    dl2 = d[:, None] * (2 * ((s >> (sh + 3)) & 7) + 1).astype(F32)
    qh = b["qh"].reshape(n, 8, 2).astype(np.int64)
    qs = b["qs"].reshape(n, 8, 4).astype(np.int64)
    hi = np.stack([(qh[..., 0] << 8) & 0x700, (qh[..., 0] << 4) & 0x700,
                   (qh[..., 1] << 8) & 0x700, (qh[..., 1] << 4) & 0x700], axis=2)
    dbit = np.stack([qh[..., 0] & 0x08, qh[..., 0] & 0x80, qh[..., 1] & 0x08, qh[..., 1] & 0x80],
                    axis=2)
    delta = np.where(dbit != 0, -G.IQ1M_DELTA, G.IQ1M_DELTA).astype(F32)     # [n, 8, 4]
    dl = np.stack([dl1, dl1, dl2, dl2], axis=2)
    y = dl[..., None] * (IQ1S[qs | hi] + delta[..., None])
    return y.reshape(n, 256)


def iq4_xs_scales(b) -> np.ndarray:
    """IQ4_XS 6-bit sub-block scales [n, 8] (value ls, the multiplier is ls - 32)."""
    ib = np.arange(8)
    lo = (b["scales_l"][:, ib // 2] >> (4 * (ib % 2)).astype(np.uint8)) & 0xF
    hi = (b["scales_h"].astype(np.int64)[:, None] >> (2 * ib)) & 3
    return lo.astype(np.int64) | (hi << 4)


def dequantize_iq4_xs(b) -> np.ndarray:
    n = len(b["d"])
    dl = _f16(b["d"])[:, None] * (iq4_xs_scales(b) - 32).astype(F32)         # [n, 8]
    qs = b["qs"].reshape(n, 8, 16)
    idx = np.concatenate([qs & 0xF, qs >> 4], axis=2)                         # [n, 8, 32]
    return (dl[:, :, None] * KV_IQ4NL[idx]).reshape(n, 256)


_POW3 = np.array([1, 3, 9, 27, 81, 243], np.uint16)


def tq1_trits(b) -> np.ndarray:
    """TQ1_0 values in {0, 1, 2} (the value is trit - 1) [n, 256], in ggml's element order."""
    n = len(b["d"])

    def trits(q, k):     # q [n, m] bytes -> [n, k, m]: digit n of the base-3 fixed point
        p = (q[:, None, :].astype(np.uint16) * _POW3[:k, None]) & 0xFF
        return (p * 3) >> 8

    a = trits(b["qs"][:, :32], 5).reshape(n, 160)
    c = trits(b["qs"][:, 32:48], 5).reshape(n, 80)
    h = trits(b["qh"], 4).reshape(n, 16)
    return np.concatenate([a, c, h], axis=1).astype(np.int16)


def dequantize_tq1_0(b) -> np.ndarray:
    return (tq1_trits(b) - 1).astype(F32) * _f16(b["d"])[:, None]


def tq2_values(b) -> np.ndarray:
    """TQ2_0 2-bit values [n, 256] (the value is q - 1): element 128j + 32l + m is bits 2l of
    qs[32j + m]."""
    n = len(b["d"])
    q = (b["qs"].reshape(n, 2, 1, 32) >> (2 * np.arange(4, dtype=np.uint8))[None, None, :, None]) & 3
    return q.reshape(n, 256).astype(np.int16)


def dequantize_tq2_0(b) -> np.ndarray:
    return (tq2_values(b) - 1).astype(F32) * _f16(b["d"])[:, None]


def e8m0_half(e: np.ndarray) -> np.ndarray:
    """ggml_e8m0_to_fp32_half: 2^(e - 128) as float32 (e < 2: the subnormals 2^-128, 2^-127)."""
    e = np.asarray(e).astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - 1) << 23).astype(np.uint32)
    return bits.view(F32)


def dequantize_mxfp4(b) -> np.ndarray:
    d = e8m0_half(b["e"])[:, None]
    idx = np.concatenate([b["qs"] & 0xF, b["qs"] >> 4], axis=1)
    return KV_FP4[idx] * d


# ------------------------------------------------------------------ integer (tiled) form ---
# llama.cpp's CPU backend multiplies i-quant weights by q8_K activations in integers: per
# super-block a signed value per element, an odd integer scale per 16 or 32 elements and one
# float scale d0 (the f16 scale times the power of two the integer scales leave out), as its
# tiled kernel unpacks them (ggml-cpu/tiled/tiled.cpp, tiled_unpack_src0).
_SIGNI = np.where(_SIGN8 < 0, -1, 1).astype(np.int16)


def _per16(s32: np.ndarray) -> np.ndarray:
    return np.repeat(s32, 2, axis=1)


def tiled_ints(qtype, b) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Block fields -> (values int16 [n, 256], scales int32 [n, 16] per 16 elements,
    d0 float32 [n]); the weight is d0 * scale * value."""
    from ..gguf import GGMLType as T
    qtype = T(qtype)
    if qtype == T.IQ4_XS:
        n = len(b["d"])
        qs = b["qs"].reshape(n, 8, 16)
        v = G.KVALUES_IQ4NL.astype(np.int16)[np.concatenate([qs & 0xF, qs >> 4], axis=2)]
        return v.reshape(n, 256), _per16(iq4_xs_scales(b) - 32), _f16(b["d"])
    if qtype in (T.IQ1_S, T.IQ1_M):
        return _tiled_iq1(qtype, b)
    if qtype in (T.TQ1_0, T.TQ2_0):      # ternary: value trit - 1, scale 1
        q = tq1_trits(b) if qtype == T.TQ1_0 else tq2_values(b)
        return q - 1, np.ones((len(q), 16), np.int64), _f16(b["d"])
    n = len(b["d"])
    d = _f16(b["d"])
    if qtype == T.IQ2_XXS:
        q = np.ascontiguousarray(b["qs"]).view("<u4").reshape(n, 8, 2)
        idx = q[:, :, 0:1].view(np.uint8).reshape(n, 8, 4)
        a1 = q[:, :, 1].astype(np.int64)
        g = grid_bytes(G.IQ2XXS_GRID, 8)[idx].astype(np.int16)
        sg = _SIGNI[G.KSIGNS_IQ2XS[(a1[:, :, None] >> (7 * np.arange(4))) & 127]]
        return (g * sg).reshape(n, 256), _per16(2 * (a1 >> 28) + 1), d * F32(0.125)
    if qtype in (T.IQ2_XS, T.IQ2_S):
        if qtype == T.IQ2_XS:
            qs = b["qs"].reshape(n, 8, 4).astype(np.int64)
            g = grid_bytes(G.IQ2XS_GRID, 8)[qs & 511]
            sg = _SIGNI[G.KSIGNS_IQ2XS[qs >> 9]]
        else:
            qs = b["qs"][:, :32].reshape(n, 8, 4).astype(np.int64)
            qh = b["qh"].astype(np.int64)[:, :, None]
            g = grid_bytes(G.IQ2S_GRID, 8)[qs | ((qh << (8 - 2 * np.arange(4))) & 0x300)]
            sg = _SIGNI[b["qs"][:, 32:].reshape(n, 8, 4)]
        sc = b["scales"].astype(np.int64)
        s16 = np.stack([2 * (sc & 0xF) + 1, 2 * (sc >> 4) + 1], axis=2).reshape(n, 16)
        return (g.astype(np.int16) * sg).reshape(n, 256), s16, d * F32(0.125)
    if qtype == T.IQ3_XXS:
        qs = b["qs"][:, :64].reshape(n, 8, 4, 2)
        aux = np.ascontiguousarray(b["qs"][:, 64:]).view("<u4").astype(np.int64)
        g = grid_bytes(G.IQ3XXS_GRID, 4)[qs].reshape(n, 8, 4, 8).astype(np.int16)
        sg = _SIGNI[G.KSIGNS_IQ2XS[(aux[:, :, None] >> (7 * np.arange(4))) & 127]]
        return (g * sg).reshape(n, 256), _per16(2 * (aux >> 28) + 1), d * F32(0.25)
    if qtype == T.IQ3_S:
        qs = b["qs"].reshape(n, 8, 4, 2).astype(np.int64)
        qh = b["qh"].astype(np.int64)[:, :, None]
        l2 = 2 * np.arange(4)
        idx = qs | np.stack([(qh << (8 - l2)) & 256, (qh << (7 - l2)) & 256], axis=3)
        g = grid_bytes(G.IQ3S_GRID, 4)[idx].reshape(n, 8, 4, 8).astype(np.int16)
        sg = _SIGNI[b["signs"].reshape(n, 8, 4)]
        s = (b["scales"][:, :, None] >> np.array([0, 4], np.uint8)) & 0xF
        return (g * sg).reshape(n, 256), _per16(1 + 2 * s.reshape(n, 8).astype(np.int64)), d
    raise NotImplementedError(f"tiled_ints: {qtype.name}")


def _tiled_iq1(qtype, b):
    from ..gguf import GGMLType as T
    n = len(b["qs"])
    qs = b["qs"].reshape(n, 8, 4).astype(np.int64)
    grid = grid_bytes(G.IQ1S_GRID, 8, signed=True).astype(np.int16)
    if qtype == T.IQ1_S:
        qh = b["qh"].astype(np.int64)
        idx = qs | (((qh[:, :, None] >> (3 * np.arange(4))) & 7) << 8)
        delta = np.where(qh & 0x8000, -1, 1)[:, :, None]
        s16 = _per16(2 * ((qh >> 12) & 7) + 1)
        d0 = _f16(b["d"]) * F32(0.125)
    else:
        sc = np.ascontiguousarray(b["scales"]).view("<u2").astype(np.int64)
        ib = np.arange(8)
        w = sc[:, ib // 2]
        sh = 6 * (ib % 2)
        s16 = np.stack([2 * ((w >> sh) & 7) + 1, 2 * ((w >> (sh + 3)) & 7) + 1], axis=2).reshape(n, 16)
        qh = b["qh"].reshape(n, 8, 2).astype(np.int64)
        idx = qs | np.stack([(qh[..., 0] << 8) & 0x700, (qh[..., 0] << 4) & 0x700,
                             (qh[..., 1] << 8) & 0x700, (qh[..., 1] << 4) & 0x700], axis=2)
        delta = np.where(np.stack([qh[..., 0] & 0x08, qh[..., 0] & 0x80, qh[..., 1] & 0x08,
                                   qh[..., 1] & 0x80], axis=2) != 0, -1, 1)
        d0 = iq1m_scale(b["scales"]) * F32(0.125)
    v = 8 * grid[idx] + delta[..., None]
    return v.reshape(n, 256).astype(np.int16), s16, d0
