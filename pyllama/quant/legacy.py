"""Reference quantizers for the legacy block types (ggml's `quantize_row_*_ref`, vectorised over
blocks) and the float helpers every quantizer shares (ggml's rounding, first-extreme selection,
serial float32 sums).

Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q8_K and F16/BF16 are bit-exact ports (float32 arithmetic in
ggml's order, ggml's rounding: `roundf` = half away from zero, `nearest_int` = half to even,
truncating `(int8_t)` casts); the K-quants live in kquants.py, IQ4_NL in iq4nl.py. All are checked bit for bit
against ggml's own output (tests/quant/test_quant_ggml.py).
"""
from __future__ import annotations

import numpy as np

from ..gguf import GGMLType
from .layout import BLOCK_LAYOUT, QK_K

F32 = np.float32


def roundf(x: np.ndarray) -> np.ndarray:
    """C roundf: nearest, halves away from zero (exact: a - floor(a) is exact in float32)."""
    a = np.abs(x)
    f = np.floor(a)
    return np.copysign(f + (a - f >= F32(0.5)), x)


def nearest_int(x: np.ndarray) -> np.ndarray:
    """ggml's nearest_int, literally: add 1.5*2^23 in float32 and read the low mantissa bits.
    Rounds half to even for |x| <= 2^22; beyond that it wraps exactly as ggml's does."""
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.asarray(np.asarray(x, dtype=F32) + F32(12582912.0), dtype=F32)
    return (v.view(np.int32) & 0x007FFFFF) - 0x00400000


def serial_sum(v: np.ndarray) -> np.ndarray:
    """Sum over the last axis left to right in float32, like ggml's `for (i...) sum += v[i]`."""
    cols = np.ascontiguousarray(np.moveaxis(v, -1, 0), dtype=F32)
    acc = cols[0].copy()
    for c in cols[1:]:
        acc += c
    return acc


def _safe_inv(d: np.ndarray) -> np.ndarray:
    """`d ? 1.0f/d : 0.0f` in float32."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1) / d, F32(0)).astype(F32)


def first_absmax(v: np.ndarray) -> np.ndarray:
    """Per row of v [m, n], ggml's `if (fabsf(v) > amax) { amax = fabsf(v); max = v; }` from
    amax = max = 0: the first value of largest magnitude; NaNs never win; +0 if none beats 0."""
    a = np.abs(v)
    a = np.where(np.isnan(a), F32(0), a)
    i = np.argmax(a, axis=1)[:, None]
    return np.where(np.take_along_axis(a, i, axis=1)[:, 0] > 0,
                    np.take_along_axis(v, i, axis=1)[:, 0], F32(0)).astype(F32)


def _first_extreme(x: np.ndarray, lowest: bool) -> np.ndarray:
    """ggml's `if (v < min) min = v` (or `v > max`) from +-FLT_MAX over rows of x [n, k] -> [n, 1]:
    the first of equal extremes (so -0.0 vs 0.0 follows the data order); NaNs never win."""
    big = np.finfo(F32).max
    v = np.where(np.isnan(x), big if lowest else -big, x).astype(F32)
    i = (np.argmin(v, axis=1) if lowest else np.argmax(v, axis=1))[:, None]
    return np.take_along_axis(v, i, axis=1)


def _signed_absmax(x: np.ndarray) -> np.ndarray:
    """first_absmax as a column [n, 1]."""
    return first_absmax(x)[:, None]


def _trunc_int(v: np.ndarray) -> np.ndarray:
    """C's (int8_t) cast of a float in [0, 127]: truncation toward zero."""
    return np.trunc(v).astype(np.int32)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """[n, 32] values 0..15 -> [n, 16] bytes: value j in the low nibble of byte j, j+16 high."""
    q = q.astype(np.uint8)
    return (q[:, :16] & 0xF) | ((q[:, 16:] & 0xF) << 4)


def _pack_qh(q: np.ndarray) -> np.ndarray:
    """[n, 32] values 0..31 -> [n, 4] bytes of the fifth bits, value j at bit j (little-endian)."""
    return np.packbits((q >> 4).astype(np.uint8) & 1, axis=1, bitorder="little")


def _blocks(x: np.ndarray, qtype: GGMLType):
    lay = BLOCK_LAYOUT[qtype]
    xb = np.ascontiguousarray(x, dtype=F32).reshape(-1, lay.block_elems)
    return xb, np.zeros(len(xb), dtype=lay.dtype)


def _q_sym(x, qtype, nmax):
    """Q4_0 (nmax 8) / Q5_0 (nmax 16): d = max / -nmax, q = min(2nmax-1, (int8)(x*id + nmax+.5))."""
    xb, out = _blocks(x, qtype)
    d = _signed_absmax(xb) / F32(-nmax)
    q = np.minimum(2 * nmax - 1, _trunc_int(xb * _safe_inv(d) + F32(nmax + 0.5)))
    out["d"] = d[:, 0]
    return q, out


def _q_affine(x, qtype, nmax):
    """Q4_1 (nmax 15) / Q5_1 (nmax 31): d = (max - min) / nmax, m = min."""
    xb, out = _blocks(x, qtype)
    mn, mx = _first_extreme(xb, True), _first_extreme(xb, False)
    d = (mx - mn) / F32(nmax)
    q = np.minimum(nmax, _trunc_int((xb - mn) * _safe_inv(d) + F32(0.5)))
    out["d"], out["m"] = d[:, 0], mn[:, 0]
    return q, out


def _quant_q4_0(x):
    q, out = _q_sym(x, GGMLType.Q4_0, 8)
    out["qs"] = _pack_nibbles(q)
    return out


def _quant_q5_0(x):
    q, out = _q_sym(x, GGMLType.Q5_0, 16)
    out["qs"], out["qh"] = _pack_nibbles(q), _pack_qh(q)
    return out


def _quant_q4_1(x):
    q, out = _q_affine(x, GGMLType.Q4_1, 15)
    out["qs"] = _pack_nibbles(q)
    return out


def _quant_q5_1(x):
    q, out = _q_affine(x, GGMLType.Q5_1, 31)
    out["qs"], out["qh"] = _pack_nibbles(q), _pack_qh(q)
    return out


def q8_0_fields(xb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """quantize_row_q8_0_ref on blocks [n, 32]: (qs int8 [n, 32], d float32 [n] BEFORE f16
    rounding; the stored scale is d.astype(float16))."""
    d = np.abs(xb).max(axis=1) / F32(127)
    qs = roundf(xb * _safe_inv(d)[:, None]).astype(np.int8)
    return qs, d


def _quant_q8_0(x):
    xb, out = _blocks(x, GGMLType.Q8_0)
    out["qs"], out["d"] = q8_0_fields(xb)
    return out


def _quant_q8_1(x):
    xb, out = _blocks(x, GGMLType.Q8_1)
    qs, d = q8_0_fields(xb)
    out["qs"], out["d"] = qs, d
    with np.errstate(over="ignore"):        # f16 overflow -> inf, as GGML_FP32_TO_FP16
        out["s"] = qs.astype(np.int32).sum(axis=1).astype(F32) * d
    return out


def q8_k_fields(xb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """quantize_row_q8_K_ref on blocks [n, 256] -> (qs int8 [n, 256], d float32 [n],
    bsums int16 [n, 16]). All-zero blocks get d = 0 and zero quants."""
    mx = _signed_absmax(xb)
    with np.errstate(divide="ignore"):
        iscale = np.where(mx != 0, F32(-127) / mx, F32(0)).astype(F32)
    qs = np.minimum(127, nearest_int(iscale * xb)).astype(np.int8)
    with np.errstate(divide="ignore"):
        d = np.where(iscale != 0, F32(1) / iscale, F32(0)).astype(F32)[:, 0]
    bsums = qs.reshape(len(xb), 16, 16).astype(np.int32).sum(axis=2).astype(np.int16)
    return qs, d, bsums


def _quant_q8_k(x):
    xb, out = _blocks(x, GGMLType.Q8_K)
    out["qs"], out["d"], out["bsums"] = q8_k_fields(xb)
    return out


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """ggml_compute_fp32_to_bf16: round to nearest even; NaN kept quiet."""
    u = np.ascontiguousarray(x, dtype=F32).view(np.uint32)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    r = (u + (np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1)))) >> 16
    return np.where(nan, (u >> 16) | np.uint32(64), r).astype(np.uint16)
