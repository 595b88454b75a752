"""K-quant reference quantizers (Q4_K, Q5_K, Q6_K), vectorised over sub-blocks.

Ports of ggml's quantize_row_q{4,5,6}_K_ref with their scale searches (make_qkx2_quants,
make_qx_quants). Every float32 sum runs serially in ggml's order and every product in its
association, so the blocks are bit-identical to ggml's (checked against libggml-base in
tests/quant/test_quant_ggml.py). The searches loop over candidate scales in Python but are
vectorised over all sub-blocks of the input.
"""
from __future__ import annotations

import numpy as np

from ..gguf import GGMLType
from .layout import BLOCK_LAYOUT, QK_K
from .quantize import nearest_int

F32 = np.float32
GROUP_MAX_EPS = F32(1e-15)


def _div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return (a / b).astype(F32)


def _ssum(v: np.ndarray) -> np.ndarray:
    """Sum over the last axis left to right in float32, like ggml's `for (i...) sum += v[i]`."""
    cols = np.ascontiguousarray(np.moveaxis(v, -1, 0), dtype=F32)
    acc = cols[0].copy()
    for c in cols[1:]:
        acc += c
    return acc


def _qkx2_search(x, w, L, best, scale, mn, mx, nmax, rmin, rdelta, nstep):
    """The refinement loop of make_qkx2_quants: least-squares (scale, min) per candidate grid.
    As in ggml, each step rescales with the current best min (it moves when a step wins)."""
    sum_w, sum_x = _ssum(w), _ssum(w * x)
    for step in range(nstep + 1):
        iscale = _div(F32(rmin) + F32(rdelta) * F32(step) + F32(nmax), mx - mn)
        la = np.clip(nearest_int(iscale[:, None] * (x - mn[:, None])), 0, nmax).astype(F32)
        wl = w * la
        sum_l, sum_l2, sum_xl = _ssum(wl), _ssum(wl * la), _ssum(wl * x)
        D = sum_w * sum_l2 - sum_l * sum_l
        t_scale = _div(sum_w * sum_xl - sum_x * sum_l, D)
        t_min = _div(sum_l2 * sum_x - sum_l * sum_xl, D)
        pos = t_min > 0
        t_min = np.where(pos, F32(0), t_min)
        t_scale = np.where(pos, _div(sum_xl, sum_l2), t_scale)
        with np.errstate(invalid="ignore", over="ignore"):     # D == 0 rows are not taken
            diff = t_scale[:, None] * la + t_min[:, None] - x
            mad = _ssum(w * (diff * diff))
        better = (D > 0) & (mad < best)
        L = np.where(better[:, None], la, L)
        best = np.where(better, mad, best)
        scale = np.where(better, t_scale, scale)
        mn = np.where(better, t_min, mn)
    return L, scale, mn


def make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep):
    """x, w [m, n] -> (scale [m], the_min [m] (>= 0, value = scale*L - the_min), L int [m, n])."""
    lo = np.minimum(x.min(axis=1), F32(0))
    flat = x.max(axis=1) == lo
    rng = np.where(flat, F32(1), x.max(axis=1) - lo).astype(F32)
    iscale = _div(F32(nmax), rng)
    scale = _div(F32(1), iscale)
    L = np.clip(nearest_int(iscale[:, None] * (x - lo[:, None])), 0, nmax).astype(F32)
    diff = scale[:, None] * L + lo[:, None] - x
    best = _ssum(w * (diff * diff))
    mx = np.where(flat, lo + F32(1), x.max(axis=1)).astype(F32)
    L, scale, mn = _qkx2_search(x, w, L, best, scale, lo, mx, nmax, rmin, rdelta, nstep)
    L = np.where(flat[:, None], F32(0), L)
    return np.where(flat, F32(0), scale), np.where(flat, -lo, -mn), L.astype(np.int32)


def _qx_round(x, iscale, nmax):
    return np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1).astype(F32)


def make_qx_quants(x, nmax):
    """make_qx_quants(rmse_type=1, no weights) on x [m, n] -> (scale [m], L int [m, n] in
    [0, 2*nmax))."""
    mx = np.take_along_axis(x, np.argmax(np.abs(x), axis=1)[:, None], axis=1)[:, 0]
    zero = np.abs(mx) < GROUP_MAX_EPS
    mx = np.where(zero, F32(1), mx).astype(F32)
    w = x * x
    l = _qx_round(x, _div(F32(-nmax), mx), nmax)
    sumlx, suml2 = _ssum(w * x * l), _ssum(w * l * l)
    scale = np.where(suml2 != 0, _div(sumlx, suml2), F32(0))
    best = scale * sumlx
    for step in [s for s in range(-9, 10) if s != 0]:
        la = _qx_round(x, _div(-(F32(nmax) + F32(0.1) * F32(step)), mx), nmax)
        sumlx, suml2 = _ssum(w * x * la), _ssum(w * la * la)
        better = (suml2 > 0) & (sumlx * sumlx > best * suml2)
        l = np.where(better[:, None], la, l)
        scale = np.where(better, _div(sumlx, suml2), scale)
        best = np.where(better, scale * sumlx, best)
    L = (l + nmax).astype(np.int32)
    return np.where(zero, F32(0), scale), np.where(zero[:, None], 0, L)


def pack_k4_scales(ls: np.ndarray, lm: np.ndarray) -> np.ndarray:
    """6-bit scales and mins [n, 8] -> Q4_K/Q5_K packed bytes [n, 12] (inverse of k4_scale_min)."""
    ls, lm = ls.astype(np.uint8), lm.astype(np.uint8)
    a = (ls[:, :4] & 63) | ((ls[:, 4:] >> 4) << 6)
    b = (lm[:, :4] & 63) | ((lm[:, 4:] >> 4) << 6)
    c = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    return np.concatenate([a, b, c], axis=1)


def _k4_common(x, qtype, nmax, rmin, nstep):
    """Shared Q4_K/Q5_K path -> (blocks with d, dmin, scales set; L int [n, 256])."""
    lay = BLOCK_LAYOUT[qtype]
    xb = np.ascontiguousarray(x, dtype=F32).reshape(-1, QK_K)
    n = len(xb)
    xs = xb.reshape(n * 8, 32)
    av_x = np.sqrt(_ssum(xs * xs) / F32(32))
    w = av_x[:, None] + np.abs(xs)
    sc, mins, L = make_qkx2_quants(xs, w, nmax, rmin, F32(0.1), nstep)
    sc, mins, L = sc.reshape(n, 8), mins.reshape(n, 8), L.reshape(n, 8, 32)
    max_sc, max_min = np.maximum(sc.max(axis=1), 0), np.maximum(mins.max(axis=1), 0)
    inv_sc = np.where(max_sc > 0, _div(F32(63), max_sc), F32(0))
    inv_min = np.where(max_min > 0, _div(F32(63), max_min), F32(0))
    ls = np.minimum(63, nearest_int(inv_sc[:, None] * sc))
    lm = np.minimum(63, nearest_int(inv_min[:, None] * mins))
    out = np.zeros(n, dtype=lay.dtype)
    out["scales"] = pack_k4_scales(ls, lm)
    out["d"], out["dmin"] = max_sc / F32(63), max_min / F32(63)
    d = out["d"].astype(F32)[:, None] * ls.astype(F32)
    dm = out["dmin"].astype(F32)[:, None] * lm.astype(F32)
    d_safe = np.where(d != 0, d, F32(1))[..., None]
    Lf = np.clip(nearest_int(_div(xb.reshape(n, 8, 32) + dm[..., None], d_safe)), 0, nmax)
    L = np.where((d != 0)[..., None], Lf, L)
    return out, L.reshape(n, QK_K)


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    out, L = _k4_common(x, GGMLType.Q4_K, 15, -1.0, 20)
    L = L.reshape(len(out), 4, 2, 32).astype(np.uint8)
    out["qs"] = (L[:, :, 0] | (L[:, :, 1] << 4)).reshape(len(out), 128)
    return out


def quantize_q5_k(x: np.ndarray) -> np.ndarray:
    out, L = _k4_common(x, GGMLType.Q5_K, 31, -0.5, 15)
    L = L.reshape(len(out), 4, 2, 32).astype(np.uint8)
    out["qs"] = ((L[:, :, 0] & 0xF) | ((L[:, :, 1] & 0xF) << 4)).reshape(len(out), 128)
    hb = (L.reshape(len(out), 8, 32) >> 4) & 1                 # bit s of qh[l]: L[32s + l] >> 4
    out["qh"] = (hb << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1, dtype=np.uint8)
    return out


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    xb = np.ascontiguousarray(x, dtype=F32).reshape(-1, QK_K)
    n = len(xb)
    sc, L = make_qx_quants(xb.reshape(n * 16, 16), 32)
    sc, L = sc.reshape(n, 16), L.reshape(n, 16, 16)
    max_sc = np.take_along_axis(sc, np.argmax(np.abs(sc), axis=1)[:, None], axis=1)[:, 0]
    zero = np.abs(max_sc) < GROUP_MAX_EPS
    iscale = np.where(zero, F32(0), _div(F32(-128), np.where(zero, F32(1), max_sc)))
    out = np.zeros(n, dtype=BLOCK_LAYOUT[GGMLType.Q6_K].dtype)
    out["d"] = np.where(zero, F32(0), _div(F32(1), np.where(zero, F32(1), iscale)))
    qsc = np.minimum(127, nearest_int(iscale[:, None] * sc))
    out["scales"] = qsc
    d = out["d"].astype(F32)[:, None] * qsc.astype(F32)
    d_safe = np.where(d != 0, d, F32(1))[..., None]
    Lf = np.clip(nearest_int(_div(xb.reshape(n, 16, 16), d_safe)), -32, 31) + 32
    L = np.where((d != 0)[..., None], Lf, L).reshape(n, 2, 4, 32).astype(np.uint8)
    L = np.where(zero[:, None, None, None], 0, L).astype(np.uint8)
    # ql[64h + l] = L[h][0][l] | L[h][2][l] << 4; ql[64h + 32 + l] = L[h][1][l] | L[h][3][l] << 4
    lo = L & 0xF
    out["ql"] = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)],
                               axis=2).reshape(n, 128)
    hi = (L >> 4) << np.array([0, 2, 4, 6], dtype=np.uint8)[None, None, :, None]
    out["qh"] = hi.sum(axis=2, dtype=np.uint8).reshape(n, 64)
    return out
