"""K-quant reference quantizers (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), vectorised over sub-blocks.

Ports of ggml's quantize_row_q{2,3,4,5,6}_K_ref with their scale searches (make_qkx2_quants,
make_q3_quants, make_qx_quants). Every float32 sum runs serially in ggml's order and every product in its
association, so the blocks are bit-identical to ggml's (checked against libggml-base in
tests/quant/test_quant_ggml.py). The searches loop over candidate scales in Python but are
vectorised over all sub-blocks of the input.
"""
from __future__ import annotations

import numpy as np

from ..gguf import GGMLType
from .layout import BLOCK_LAYOUT, QK_K
from .legacy import first_absmax, nearest_int
from .legacy import serial_sum as _ssum

F32 = np.float32
GROUP_MAX_EPS = F32(1e-15)


def _div(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return (a / b).astype(F32)


def max_pos(v: np.ndarray) -> np.ndarray:
    """Per row, ggml's `if (v > mx) mx = v` from mx = 0 (NaNs never win)."""
    return np.maximum(np.where(np.isnan(v), F32(0), v).max(axis=1), F32(0))


def _err(diff, use_mad):
    return np.abs(diff) if use_mad else diff * diff


def _qkx2_search(x, w, L, best, scale, mn, mx, nmax, rmin, rdelta, nstep, use_mad):
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
            mad = _ssum(w * _err(diff, use_mad))
        better = (D > 0) & (mad < best)
        L = np.where(better[:, None], la, L)
        best = np.where(better, mad, best)
        scale = np.where(better, t_scale, scale)
        mn = np.where(better, t_min, mn)
    return L, scale, mn


def make_qkx2_quants(x, w, nmax, rmin, rdelta, nstep, use_mad=False):
    """x, w [m, n] -> (scale [m], the_min [m] (>= 0, value = scale*L - the_min), L int [m, n])."""
    lo = np.minimum(x.min(axis=1), F32(0))
    flat = x.max(axis=1) == lo
    rng = np.where(flat, F32(1), x.max(axis=1) - lo).astype(F32)
    iscale = _div(F32(nmax), rng)
    scale = _div(F32(1), iscale)
    L = np.clip(nearest_int(iscale[:, None] * (x - lo[:, None])), 0, nmax).astype(F32)
    diff = scale[:, None] * L + lo[:, None] - x
    best = _ssum(w * _err(diff, use_mad))
    mx = np.where(flat, lo + F32(1), x.max(axis=1)).astype(F32)
    L, scale, mn = _qkx2_search(x, w, L, best, scale, lo, mx, nmax, rmin, rdelta, nstep,
                                use_mad)
    L = np.where(flat[:, None], F32(0), L)
    return np.where(flat, F32(0), scale), np.where(flat, -lo, -mn), L.astype(np.int32)


def _qx_round(x, iscale, nmax):
    return np.clip(nearest_int(iscale[:, None] * x), -nmax, nmax - 1).astype(F32)


def make_qx_quants(x, nmax):
    """make_qx_quants(rmse_type=1, no weights) on x [m, n] -> (scale [m], L int [m, n] in
    [0, 2*nmax))."""
    mx = first_absmax(x)
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
    max_sc, max_min = max_pos(sc), max_pos(mins)
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
    max_sc = first_absmax(sc)
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


def _pack_crumbs(L: np.ndarray) -> np.ndarray:
    """2-bit values [n, 256] -> Q2_K/Q3_K qs [n, 64]: qs[32h + l] holds L[128h + 32j + l] at
    bits 2j."""
    L = L.reshape(len(L), 2, 4, 32).astype(np.uint8)
    sh = np.array([0, 2, 4, 6], dtype=np.uint8)[None, None, :, None]
    return (L << sh).sum(axis=2, dtype=np.uint8).reshape(len(L), 64)


def quantize_q2_k(x: np.ndarray) -> np.ndarray:
    xb = np.ascontiguousarray(x, dtype=F32).reshape(-1, QK_K)
    n = len(xb)
    xs = xb.reshape(n * 16, 16)
    sc, mins, L = make_qkx2_quants(xs, np.abs(xs), 3, -0.5, F32(0.1), 15, use_mad=True)
    sc, mins, L = sc.reshape(n, 16), mins.reshape(n, 16), L.reshape(n, 16, 16)
    max_sc, max_min = max_pos(sc), max_pos(mins)
    q4 = F32(15)
    inv_sc = np.where(max_sc > 0, _div(q4, np.where(max_sc > 0, max_sc, F32(1))), F32(0))
    inv_min = np.where(max_min > 0, _div(q4, np.where(max_min > 0, max_min, F32(1))), F32(0))
    ls, lm = nearest_int(inv_sc[:, None] * sc), nearest_int(inv_min[:, None] * mins)
    out = np.zeros(n, dtype=BLOCK_LAYOUT[GGMLType.Q2_K].dtype)
    out["scales"] = (ls.astype(np.uint8) | (lm.astype(np.uint8) << 4))
    out["d"] = np.where(max_sc > 0, max_sc / q4, F32(0))
    out["dmin"] = np.where(max_min > 0, max_min / q4, F32(0))
    d = out["d"].astype(F32)[:, None] * (out["scales"] & 0xF).astype(F32)
    dm = out["dmin"].astype(F32)[:, None] * (out["scales"] >> 4).astype(F32)
    d_safe = np.where(d != 0, d, F32(1))[..., None]
    Lf = np.clip(nearest_int(_div(xb.reshape(n, 16, 16) + dm[..., None], d_safe)), 0, 3)
    L = np.where((d != 0)[..., None], Lf, L)
    out["qs"] = _pack_crumbs(L.reshape(n, QK_K))
    return out


def _q3_refine(x, w, L, sumlx, suml2, nmax):
    """make_q3_quants' coordinate descent: up to 5 sweeps, each value moved to its best level
    if that raises sumlx^2/suml2 (sub-blocks that stop changing stay fixed, as in ggml)."""
    for _ in range(5):
        for i in range(x.shape[1]):
            xi, wi, li = x[:, i], w[:, i], L[:, i]
            slx = sumlx - wi * xi * li
            sl2 = suml2 - wi * li * li
            new_l = np.clip(nearest_int(_div(xi * sl2, np.where(slx > 0, slx, F32(1)))),
                            -nmax, nmax - 1).astype(F32)
            slx2 = slx + wi * xi * new_l
            sl22 = sl2 + wi * new_l * new_l
            take = (slx > 0) & (new_l != li) & (sl22 > 0) & (
                slx2 * slx2 * suml2 > sumlx * sumlx * sl22)
            L[:, i] = np.where(take, new_l, li)
            sumlx = np.where(take, slx2, sumlx)
            suml2 = np.where(take, sl22, suml2)
    return L, sumlx, suml2


def make_q3_quants(x, nmax):
    """make_q3_quants(do_rmse=true) on x [m, n] -> (scale [m], L int [m, n] in [0, 2*nmax))."""
    mx = first_absmax(x)
    zero = np.abs(mx) < GROUP_MAX_EPS
    mx = np.where(zero, F32(1), mx).astype(F32)
    L = _qx_round(x, _div(F32(-nmax), mx), nmax)
    w = x * x
    sumlx, suml2 = _ssum(w * x * L), _ssum(w * L * L)
    L, sumlx, suml2 = _q3_refine(x, w, L, sumlx, suml2, nmax)
    scale = _div(sumlx, suml2)
    return np.where(zero, F32(0), scale), np.where(zero[:, None], 0, L + nmax).astype(np.int32)


def pack_q3_scales(l: np.ndarray) -> np.ndarray:
    """6-bit Q3_K scales [n, 16] (value + 32) -> packed bytes [n, 12] (inverse of q3_k_scales)."""
    l = l.astype(np.uint8)
    lo = (l[:, :8] & 0xF) | ((l[:, 8:] & 0xF) << 4)
    hi = (l >> 4).reshape(len(l), 4, 4) << np.array([0, 2, 4, 6], np.uint8)[None, :, None]
    return np.concatenate([lo, hi.sum(axis=1, dtype=np.uint8)], axis=1)


def quantize_q3_k(x: np.ndarray) -> np.ndarray:
    xb = np.ascontiguousarray(x, dtype=F32).reshape(-1, QK_K)
    n = len(xb)
    sc, L = make_q3_quants(xb.reshape(n * 16, 16), 4)
    sc, L = sc.reshape(n, 16), L.reshape(n, 16, 16)
    max_sc = first_absmax(sc)
    has = max_sc != 0
    iscale = np.where(has, _div(F32(-32), np.where(has, max_sc, F32(1))), F32(0))
    ls = np.clip(nearest_int(iscale[:, None] * sc), -32, 31) + 32
    out = np.zeros(n, dtype=BLOCK_LAYOUT[GGMLType.Q3_K].dtype)
    out["scales"] = np.where(has[:, None], pack_q3_scales(ls), 0)
    out["d"] = np.where(has, _div(F32(1), np.where(has, iscale, F32(1))), F32(0))
    from .reference import q3_k_scales
    d = out["d"].astype(F32)[:, None] * q3_k_scales(out["scales"]).astype(F32)
    d_safe = np.where(d != 0, d, F32(1))[..., None]
    Lf = np.clip(nearest_int(_div(xb.reshape(n, 16, 16), d_safe)), -4, 3) + 4
    L = np.where((d != 0)[..., None], Lf, L).reshape(n, QK_K)
    # high bit of L[32b + l] goes to bit b of hmask[l]
    hb = (L.reshape(n, 8, 32) > 3).astype(np.uint8)
    out["hmask"] = (hb << np.arange(8, dtype=np.uint8)[None, :, None]).sum(axis=1, dtype=np.uint8)
    out["qs"] = _pack_crumbs(np.where(L > 3, L - 4, L))
    return out
