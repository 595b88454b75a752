"""numpy reference dequantizers for every supported ggml type (the oracle for all kernels).

Mirrors `dequantize_row_*` in ggml-quants.c (the IQ/TQ/MXFP4 types: iquants.py), vectorised over blocks: each function takes the
block fields (layout.BLOCK_LAYOUT[type], as contiguous arrays [n_blocks, ...] by name) and returns
float32 [n_blocks, block_elems]. Float operations happen in the same order as ggml's reference code so results are
bit-identical to it (and to gguf.quants) without FMA contraction.
"""
from __future__ import annotations

import numpy as np

from ..gguf import GGMLType
from . import iquants as iq
from .iq4nl import dequantize_iq4_nl
from .layout import BLOCK_LAYOUT, QK_K

_LO_HI = np.array([0, 4], dtype=np.uint8)
_CRUMBS = np.array([0, 2, 4, 6], dtype=np.uint8)


def _f16(b: np.ndarray) -> np.ndarray:
    """An f16 field [n] as float32 [n, 1] (broadcasts over the block's values)."""
    return b.astype(np.float32)[:, None]


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] packed bytes -> [n, 32]: low nibbles are values 0..15, high nibbles 16..31."""
    return ((qs[:, None, :] >> _LO_HI[None, :, None]) & 0xF).reshape(len(qs), 32)


def _qh_bits(qh: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1 qh (4 bytes, little-endian u32) -> [n, 32] fifth bits, value j at bit j."""
    return np.unpackbits(qh, axis=1, bitorder="little")


def _bit_planes(h: np.ndarray) -> np.ndarray:
    """[n, 32] bytes -> [n, 8, 32]: plane b holds bit b of each byte."""
    return np.unpackbits(h[:, :, None], axis=2, bitorder="little").transpose(0, 2, 1)


def _deq_q4_0(b):
    return (_nibbles(b["qs"]).astype(np.int8) - 8).astype(np.float32) * _f16(b["d"])


def _deq_q4_1(b):
    return _nibbles(b["qs"]).astype(np.float32) * _f16(b["d"]) + _f16(b["m"])


def _deq_q5_0(b):
    q = (_nibbles(b["qs"]) | (_qh_bits(b["qh"]) << 4)).astype(np.int8) - 16
    return q.astype(np.float32) * _f16(b["d"])


def _deq_q5_1(b):
    q = _nibbles(b["qs"]) | (_qh_bits(b["qh"]) << 4)
    return q.astype(np.float32) * _f16(b["d"]) + _f16(b["m"])


def _deq_q8_0(b):
    return b["qs"].astype(np.float32) * _f16(b["d"])


def _deq_q8_1(b):
    return b["qs"].astype(np.float32) * _f16(b["d"])


def _deq_q8_k(b):
    return b["qs"].astype(np.float32) * b["d"].astype(np.float32)[:, None]


def _per16(v: np.ndarray) -> np.ndarray:
    """Per-16-value scales [n, 16] -> [n, 16, 1] for values viewed as [n, 16, 16]."""
    return v.reshape(len(v), 16, 1)


def _crumbs_k(qs: np.ndarray) -> np.ndarray:
    """Q2_K/Q3_K qs [n, 64] -> 2-bit values [n, 256]: value 128h + 32j + l = qs[32h + l] >> 2j."""
    q = qs.reshape(len(qs), 2, 1, 32) >> _CRUMBS[None, None, :, None]
    return (q & 3).reshape(len(qs), QK_K)


def _deq_q2_k(b):
    n, sc = len(b["d"]), b["scales"]
    dl = _per16(_f16(b["d"]) * (sc & 0xF).astype(np.float32))
    ml = _per16(_f16(b["dmin"]) * (sc >> 4).astype(np.float32))
    q = _crumbs_k(b["qs"]).astype(np.float32).reshape(n, 16, 16)
    return (dl * q - ml).reshape(n, QK_K)


def q3_k_scales(scales: np.ndarray) -> np.ndarray:
    """Q3_K packed scales [n, 12] -> signed 6-bit scales [n, 16] (value - 32)."""
    k = np.arange(16)
    lo = (scales[:, k % 8] >> (4 * (k // 8)).astype(np.uint8)) & 0xF
    hi = (scales[:, 8 + k % 4] >> (2 * (k // 4)).astype(np.uint8)) & 3
    return (lo | (hi << 4)).astype(np.int8) - 32


def _deq_q3_k(b):
    n = len(b["d"])
    dl = _per16(_f16(b["d"]) * q3_k_scales(b["scales"]).astype(np.float32))
    # high bit of value 128h + 32j + l is bit (4h + j) of hmask[l]; set means "no -4"
    hb = _bit_planes(b["hmask"])                                      # [n, 8, 32]
    q = _crumbs_k(b["qs"]).astype(np.int8) - ((hb ^ 1) << 2).reshape(n, QK_K).astype(np.int8)
    return (dl * q.astype(np.float32).reshape(n, 16, 16)).reshape(n, QK_K)


def k4_scale_min(scales: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K packed scales [n, 12] -> (6-bit scales [n, 8], 6-bit mins [n, 8])
    (ggml's get_scale_min_k4 for j = 0..7)."""
    a, b, c = scales[:, 0:4], scales[:, 4:8], scales[:, 8:12]
    sc = np.concatenate([a & 63, (c & 0xF) | ((a >> 6) << 4)], axis=1)
    mn = np.concatenate([b & 63, (c >> 4) | ((b >> 6) << 4)], axis=1)
    return sc, mn


def _k4_affine(b, q: np.ndarray) -> np.ndarray:
    """value = d*sc[j] * q - dmin*m[j] per 32-value sub-block j; q is [n, 256] integers."""
    n = len(b["d"])
    sc, mn = k4_scale_min(b["scales"])
    d = (_f16(b["d"]) * sc.astype(np.float32))[:, :, None]
    m = (_f16(b["dmin"]) * mn.astype(np.float32))[:, :, None]
    return (d * q.astype(np.float32).reshape(n, 8, 32) - m).reshape(n, QK_K)


def _nibbles_k(qs: np.ndarray) -> np.ndarray:
    """Q4_K/Q5_K qs [n, 128] -> [n, 256]: sub-block 2i is qs[32i:32i+32] & 15, 2i+1 the >> 4."""
    q = qs.reshape(len(qs), 4, 1, 32) >> _LO_HI[None, None, :, None]
    return (q & 0xF).reshape(len(qs), QK_K)


def _deq_q4_k(b):
    return _k4_affine(b, _nibbles_k(b["qs"]))


def _deq_q5_k(b):
    hb = _bit_planes(b["qh"])                                         # [n, 8, 32]
    return _k4_affine(b, _nibbles_k(b["qs"]) | (hb.reshape(len(b["d"]), QK_K) << 4))


def _deq_q6_k(b):
    n = len(b["d"])
    # value 128h + 32k + l: low nibble of ql[64h + 32(k%2) + l] >> 4(k//2), high bits of
    # qh[32h + l] >> 2k
    ql = b["ql"].reshape(n, 2, 1, 2, 32) >> _LO_HI[None, None, :, None, None]
    ql = (ql & 0xF).reshape(n, 2, 4, 32)
    qh = (b["qh"].reshape(n, 2, 1, 32) >> _CRUMBS[None, None, :, None]) & 3
    q = (ql | (qh << 4)).astype(np.int8) - 32
    d = _per16(_f16(b["d"]) * b["scales"].astype(np.float32))
    return (d * q.astype(np.float32).reshape(n, 16, 16)).reshape(n, QK_K)


_DEQUANT = {
    GGMLType.Q4_0: _deq_q4_0, GGMLType.Q4_1: _deq_q4_1, GGMLType.Q5_0: _deq_q5_0,
    GGMLType.Q5_1: _deq_q5_1, GGMLType.Q8_0: _deq_q8_0, GGMLType.Q8_1: _deq_q8_1,
    GGMLType.Q2_K: _deq_q2_k, GGMLType.Q3_K: _deq_q3_k, GGMLType.Q4_K: _deq_q4_k,
    GGMLType.Q5_K: _deq_q5_k, GGMLType.Q6_K: _deq_q6_k, GGMLType.Q8_K: _deq_q8_k,
    GGMLType.IQ4_NL: dequantize_iq4_nl, GGMLType.IQ4_XS: iq.dequantize_iq4_xs,
    GGMLType.IQ2_XXS: iq.dequantize_iq2_xxs, GGMLType.IQ2_XS: iq.dequantize_iq2_xs,
    GGMLType.IQ2_S: iq.dequantize_iq2_s, GGMLType.IQ3_XXS: iq.dequantize_iq3_xxs,
    GGMLType.IQ3_S: iq.dequantize_iq3_s, GGMLType.IQ1_S: iq.dequantize_iq1_s,
    GGMLType.IQ1_M: iq.dequantize_iq1_m, GGMLType.TQ1_0: iq.dequantize_tq1_0,
    GGMLType.TQ2_0: iq.dequantize_tq2_0, GGMLType.MXFP4: iq.dequantize_mxfp4,
}


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def infer_shape(raw: np.ndarray, qtype) -> tuple[int, ...]:
    """Value shape of tensor data: typed arrays keep their shape; uint8 rows of blocks
    [..., row_bytes] hold [..., row_bytes / block_bytes * block_elems] values."""
    lay = BLOCK_LAYOUT[GGMLType(qtype)]
    if raw.dtype != np.uint8 or raw.ndim == 0:
        return tuple(raw.shape)
    if raw.shape[-1] % lay.block_bytes:
        raise ValueError(f"row of {raw.shape[-1]} bytes is not whole {lay.type.name} blocks")
    return tuple(raw.shape[:-1]) + (raw.shape[-1] // lay.block_bytes * lay.block_elems,)


def dequantize(raw: np.ndarray, qtype, shape=None) -> np.ndarray:
    """Raw tensor data (uint8 rows of blocks, or typed f32/f16/uint16-bf16) -> float32 `shape`
    (default: inferred by infer_shape, e.g. uint8 [rows, row_bytes] -> [rows, n_per_row])."""
    qtype = GGMLType(qtype)
    if qtype not in BLOCK_LAYOUT:
        raise NotImplementedError(f"dequantize: unsupported type {qtype.name}")
    raw = np.asarray(raw)
    shape = infer_shape(raw, qtype) if shape is None else tuple(int(s) for s in shape)
    lay = BLOCK_LAYOUT[qtype]
    n = int(np.prod(shape, dtype=np.int64))
    if n % lay.block_elems:
        raise ValueError(f"{n} values is not a whole number of {qtype.name} blocks")
    flat = np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    if flat.size != n // lay.block_elems * lay.block_bytes:
        raise ValueError(f"{flat.size} bytes do not hold {shape} of {qtype.name}")
    if qtype == GGMLType.F32:
        return flat.view(np.float32).reshape(shape).copy()
    if qtype == GGMLType.F16:
        return flat.view(np.float16).astype(np.float32).reshape(shape)
    if qtype == GGMLType.BF16:
        return bf16_to_f32(flat.view("<u2")).reshape(shape)
    blocks = flat.view(lay.dtype)
    fields = {name: np.ascontiguousarray(blocks[name]) for name, _, _ in lay.fields}
    with np.errstate(over="ignore", invalid="ignore"):     # inf/NaN scales decode as in ggml
        return _DEQUANT[qtype](fields).reshape(shape)
