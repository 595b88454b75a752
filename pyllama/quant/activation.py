"""Activation quantization as llama.cpp's CPU matmul does it (the `vec_dot_type` of a weight).

Returns the block fields separated, ready for integer dot products: what the reference matmul
uses to mimic llama.cpp. Scales come back as float32 holding exactly the value the dot product
reads (q8_0/q8_1 store d and s as f16, so they are rounded through f16; q8_K stores d as f32).

`simd=True` for q8_0/q8_1 mirrors the x86 AVX/AVX2 `quantize_row_q8_0/1` that llama.cpp runs on
this machine class instead of the `_ref` code: id = 127/amax (not 1/(amax/127)) and
round-half-to-even (`_mm256_round_ps`) instead of roundf. q8_K has no SIMD variant on x86.
"""
from __future__ import annotations

import functools

import numpy as np

from .legacy import F32, q8_0_fields, q8_k_fields


def _c_float(fn):
    """Run with float warnings off: inf/NaN from degenerate (e.g. subnormal) blocks are what
    ggml's C produces too."""
    @functools.wraps(fn)
    def wrapped(*args, **kw):
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            return fn(*args, **kw)
    return wrapped


def _rows(x: np.ndarray, qk: int) -> tuple[np.ndarray, tuple[int, int]]:
    x = np.asarray(x, dtype=F32)
    if x.ndim != 2 or x.shape[1] % qk:
        raise ValueError(f"expected x [n, k] with k a multiple of {qk}, got {x.shape}")
    n, k = x.shape
    return np.ascontiguousarray(x).reshape(n * (k // qk), qk), (n, k // qk)


def _cvtps_epi32(v: np.ndarray) -> np.ndarray:
    """_mm256_round_ps(nearest) + _mm256_cvtps_epi32: NaN and out-of-range give INT_MIN."""
    with np.errstate(invalid="ignore"):
        r = np.rint(v).astype(np.float64)
        bad = ~(np.abs(r) < 2.0 ** 31)
        return np.where(bad, -(2 ** 31), np.where(bad, 0, r)).astype(np.int64)


def _q8_simd(xb: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x86 AVX/AVX2 quantize_row_q8_0/1 on blocks [n, 32] -> (qs int8, d f32 unrounded,
    int32-wrapped sum of the converted values (the q8_1 s before scaling))."""
    amax = np.abs(xb).max(axis=1)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        iv = np.where(amax != 0, F32(127) / amax, F32(0)).astype(F32)
        v = _cvtps_epi32(xb * iv[:, None])
    qs = np.clip(v, -128, 127).astype(np.int8)          # packs_epi32 + packs_epi16 saturate
    total = v.sum(axis=1).astype(np.int64)
    total = ((total + 2 ** 31) % 2 ** 32) - 2 ** 31     # hsum_i32_8 wraps like int32
    return qs, amax / F32(127), total


def _f16_round(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):        # f16 overflow -> inf, as GGML_FP32_TO_FP16
        return v.astype(np.float16).astype(F32)


@_c_float
def quantize_q8_0_rows(x: np.ndarray, simd: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """x [n, k] float32 -> (qs int8 [n, k/32, 32], d float32 [n, k/32], f16-rounded)."""
    xb, (n, nb) = _rows(x, 32)
    qs, d = _q8_simd(xb)[:2] if simd else q8_0_fields(xb)
    return qs.reshape(n, nb, 32), _f16_round(d).reshape(n, nb)


@_c_float
def quantize_q8_1_rows(x: np.ndarray, simd: bool = False):
    """x [n, k] -> (qs int8 [n, k/32, 32], d [n, k/32], s [n, k/32]); s = f16(d * sum(qs)) with
    the unrounded d, both returned f16-rounded as float32."""
    xb, (n, nb) = _rows(x, 32)
    if simd:
        qs, d, total = _q8_simd(xb)
    else:
        qs, d = q8_0_fields(xb)
        total = qs.astype(np.int64).sum(axis=1)
    s = _f16_round(total.astype(F32) * d)
    return qs.reshape(n, nb, 32), _f16_round(d).reshape(n, nb), s.reshape(n, nb)


@_c_float
def quantize_q8_K_rows(x: np.ndarray):
    """x [n, k] -> (qs int8 [n, k/256, 256], d float32 [n, k/256], bsums int16 [n, k/256, 16])."""
    xb, (n, nb) = _rows(x, 256)
    qs, d, bsums = q8_k_fields(xb)
    return qs.reshape(n, nb, 256), d.reshape(n, nb), bsums.reshape(n, nb, 16)

