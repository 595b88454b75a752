"""CPU ggml_mul_mat_id (MoE experts): Backend.mul_mat_id's grouping with the experts that get few
rows run together in one native call (_mmid.pyx), the rest one matmul per expert as before.

A decode token selects n_used experts with one row each; one matmul call per expert costs more in
dispatch, activation quantization and thread wake-up than its gemv. The fused call quantizes
each activation row once and runs every (slot, row group) pair in one OpenMP loop, with the
kernels the per-expert call would take (llama.cpp numerics: compat.mmid_uses_vec's one-token
kernel; else the row tiles of matmul.matmul, whose rows do not depend on the batch), so the
result is bit-identical to Backend.mul_mat_id (tests/test_mmid.py).
"""
from __future__ import annotations

import numpy as np

from ...gguf import GGMLType
from ..base import Backend, Weight
from ..compat import mmid_uses_vec
from . import _matmul, _mmid, _ops
from . import matmul as mm

# numerics="llama.cpp" one-token kernels the fused call runs (compat._kernel's numbering)
_VEC_KERNEL = {GGMLType.Q5_K: 2, GGMLType.Q6_K: 3, GGMLType.Q2_K: 4, GGMLType.Q3_K: 5,
               GGMLType.IQ4_XS: 6}
TILE_MAX_ROWS = 4       # invariant numerics: experts with fewer rows than this are fused
PARALLEL_MIN_BYTES = 131072     # weight bytes below which the fused call runs on one thread


def _raw(w: Weight) -> np.ndarray:
    """The experts' rows as uint8 [n_expert * rows, row_bytes] (a view, cached on w)."""
    c = w.__dict__.get("_mmid_raw")
    if c is None or c[0] is not w.raw:
        c = w.__dict__["_mmid_raw"] = (w.raw, w.raw.view(np.uint8).reshape(
            w.shape[0] * w.shape[1], -1))
    return c[1]


def _vec_kernel(wtype, rows: int):
    if wtype == GGMLType.Q4_K:
        return 0 if rows % 8 == 0 else 1            # GEMV_Q4_K (repacked) / VEC_Q4_K
    return _VEC_KERNEL.get(wtype)


def _decode_plan(w: Weight, m: int, n_used: int, one_token: bool, nth: int):
    """For one token (every selected expert gets one row, all fused): the fused call's constant
    arguments, cached per thread (matmul's per-thread buffers) while w and its buffers live; None
    when this weight takes the per-expert path."""
    objs = mm._cache()["objs"]
    key = ("mmid1", id(w), m, n_used, one_token, nth)
    e = objs.get(key)
    if e is not None and e[0] is w and e[1] is w.raw:
        return e[2]
    n_exp, rows, cols = w.shape
    kernel = _vec_kernel(w.type, rows) if one_token else None
    plan = None
    if kernel is not None or not ((one_token and mmid_uses_vec(w.type, rows, 1))
                                  or _matmul.family(int(w.type)) < 0):
        raw = _raw(w)
        th = 1 if n_used * rows * raw.shape[1] < PARALLEL_MIN_BYTES else nth
        slots = np.arange(n_used, dtype=np.int32)
        if kernel is not None:
            q = mm._view("mmid_q", (m, cols), np.int8)
            d = mm._view("mmid_d", (m, cols // 256), np.float32)
            bs = mm._view("mmid_bs", (m, cols // 16), np.int16)
            plan = (kernel, raw, rows, cols, slots, th, (q, d, bs))
        else:
            kt = mm.kernel_type(w.type, rows)
            q, d, sm, bs, f, _ = mm._plan(_matmul.act_kind(kt), m, cols, 1)
            scratch = mm._view("mmid_scratch", (th, _matmul.row_scratch_bytes(cols)), np.uint8)
            plan = (None, raw, rows, cols, slots, th, (kt, q, d, sm, bs, f, scratch))
    objs = mm._cache()["objs"]          # the views above may have cleared it
    objs[key] = (w, w.raw, plan)
    return plan


def mul_mat_id(be, w: Weight, x: np.ndarray, ids: np.ndarray, one_token: bool = False,
               nth: int = 1) -> np.ndarray:
    """Backend.mul_mat_id (same shapes, same bits) with the few-row experts fused."""
    n, n_used = ids.shape
    if n == 1 and x.dtype == np.float32 and x.flags.c_contiguous:
        flat = np.ascontiguousarray(ids, dtype=np.int32).reshape(-1)
        m = x.shape[1]
        if len(set(flat.tolist())) == n_used:       # distinct: one row per expert (top-k)
            plan = _decode_plan(w, m, n_used, one_token, nth)
            if plan is not None:
                kernel, raw, rows, cols, slots, th, a = plan
                out = np.empty((1, n_used, rows), np.float32)
                x2, o2 = x.reshape(m, cols), out.reshape(n_used, rows)
                if kernel is not None:
                    _mmid.vec_slots(kernel, raw, rows, cols, x2, flat, slots, n_used, m, o2,
                                    a[0], a[1], a[2], th)
                else:
                    kt, q, d, sm, bs, f, scratch = a
                    _mmid.tile_slots(kt, raw, rows, cols, x2, flat, slots, n_used, m, o2, q, d,
                                     sm, bs, f, scratch, th)
                return out
    n_exp, rows, cols = w.shape
    m = x.shape[1]
    flat = np.ascontiguousarray(ids, dtype=np.int32).reshape(-1)
    counts = np.bincount(flat, minlength=n_exp)
    kernel = _vec_kernel(w.type, rows) if one_token else None
    if kernel is not None:                      # llama.cpp: one-token kernel below 8 rows
        few = np.full(n_exp, True) if mmid_uses_vec(w.type, rows, 8) else counts < 8
    elif one_token and mmid_uses_vec(w.type, rows, 1):
        return Backend.mul_mat_id(be, w, x, ids, one_token)    # kernels not fused (i-quants)
    elif _matmul.family(int(w.type)) < 0:
        return Backend.mul_mat_id(be, w, x, ids, one_token)
    else:
        few = counts < TILE_MAX_ROWS
    sel = few[flat]
    if sel.all():
        slots = np.arange(len(flat), dtype=np.int32)
        out = np.empty((n, n_used, rows), np.float32)
    else:
        out = Backend.mul_mat_id(be, w, x, np.where(sel, -1, flat).reshape(n, n_used), one_token)
        slots = np.flatnonzero(sel).astype(np.int32)
        if not len(slots):
            return out
    x2 = np.ascontiguousarray(x, dtype=np.float32).reshape(n * m, cols)
    o2 = out.reshape(n * n_used, rows)
    raw = _raw(w)
    if len(slots) * rows * raw.shape[1] < PARALLEL_MIN_BYTES:
        nth = 1
    if kernel is not None:
        q = mm._view("mmid_q", (n * m, cols), np.int8)
        d = mm._view("mmid_d", (n * m, cols // 256), np.float32)
        bs = mm._view("mmid_bs", (n * m, cols // 16), np.int16)
        _mmid.vec_slots(kernel, raw, rows, cols, x2, flat, slots, n_used, m, o2, q, d, bs, nth)
        return out
    kt = mm.kernel_type(w.type, rows)
    q, d, s, bs, f, _ = mm._plan(_matmul.act_kind(kt), n * m, cols, 1)
    scratch = mm._view("mmid_scratch", (nth, _matmul.row_scratch_bytes(cols)), np.uint8)
    _mmid.tile_slots(kt, raw, rows, cols, x2, flat, slots, n_used, m, o2, q, d, s, bs, f, scratch,
                     nth)
    return out



def _spec(w: Weight, one_token: bool):
    """(vec, kernel, act kind, raw, rows, cols) for one row per expert, as _decode_plan picks the
    kernels; None when this weight takes the per-expert path."""
    n_exp, rows, cols = w.shape
    kernel = _vec_kernel(w.type, rows) if one_token else None
    if kernel is not None:
        return (1, kernel, 0, _raw(w), rows, cols)
    if (one_token and mmid_uses_vec(w.type, rows, 1)) or _matmul.family(int(w.type)) < 0:
        return None
    kt = mm.kernel_type(w.type, rows)
    return (0, kt, _matmul.act_kind(kt), _raw(w), rows, cols)


def moe_swiglu1(gate: Weight, up: Weight, down: Weight, x: np.ndarray, ids: np.ndarray,
                wts: np.ndarray, one_token: bool, nth: int):
    """One token's SwiGLU experts in one native call (_mmid.Moe1): x [1, n_embd], ids / wts
    [1, n_used] -> [1, n_embd], the bits of mul_mat_id (up, gate, down), swiglu, the weights'
    multiply and Graph.sum_experts; None where it does not apply (the caller runs those ops)."""
    n_used = ids.shape[1]
    if x.shape[0] != 1 or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    flat = np.ascontiguousarray(ids, dtype=np.int32).reshape(-1)
    lst = flat.tolist()
    if len(set(lst)) != n_used or min(lst) < 0 or max(lst) >= gate.shape[0]:
        return None
    key = ("moe1", id(gate), id(up), id(down), n_used, one_token, nth)
    objs = mm._cache().setdefault("moe", {})      # per thread (the plans own their buffers)
    e = objs.get(key)
    if e is None or not (e[0][0] is gate and e[0][1] is up and e[0][2] is down and e[1][0]
                         is gate.raw and e[1][1] is up.raw and e[1][2] is down.raw):
        specs = [_spec(w, one_token) for w in (gate, up, down)]
        plan = None
        if all(s is not None for s in specs) and specs[0][4] == specs[1][4] \
                and specs[0][5] == specs[1][5] and specs[2][5] == specs[0][4] \
                and gate.shape[0] == up.shape[0] == down.shape[0]:
            nbytes = n_used * sum(s[4] * s[3].shape[1] for s in specs)
            plan = _mmid.Moe1(specs, n_used, 1 if nbytes < PARALLEL_MIN_BYTES else nth)
        if len(objs) > 1024:
            objs.clear()
        e = objs[key] = ((gate, up, down), (gate.raw, up.raw, down.raw), plan)
    plan = e[2]
    if plan is None:
        return None
    out = np.empty((1, down.shape[1]), np.float32)
    plan.run(x.reshape(-1), flat, np.ascontiguousarray(wts, dtype=np.float32).reshape(-1),
             out.reshape(-1))
    return out


def _abufs(name: str, n: int, k: int, kind: int) -> tuple:
    """(q, d, s, bs, f) activation arrays for n rows of kind (unused ones 1x1), _mmid.moe_batch's
    layout: d / s [n, k/32] for every quantized kind."""
    q, d, s, bs, f = mm._DUMMY_Q, mm._DUMMY_F, mm._DUMMY_F, mm._DUMMY_S, mm._DUMMY_F
    if kind == _matmul.ACT_Q8_0:
        q = mm._view(name + "q", (n, k), np.int8)
        d, s = mm._view(name + "d", (n, k // 32), np.float32), mm._view(name + "s", (n, k // 32),
                                                                         np.float32)
    elif kind in (_matmul.ACT_Q8_K, _matmul.ACT_Q8_K4):
        q, d = mm._view(name + "q", (n, k), np.int8), mm._view(name + "d", (n, k // 32), np.float32)
        bs = mm._view(name + "b", (n, k // 16), np.int16)
    else:
        f = mm._view(name + "f", (n, k), np.float32)
    return q, d, s, bs, f


def moe_swiglu_batch(gate: Weight, up: Weight, down: Weight, x: np.ndarray, ids: np.ndarray,
                     wts: np.ndarray, nth: int):
    """A batch's SwiGLU experts in one native call (_mmid.moe_batch), numerics "invariant": the
    slots sorted by expert (each selected expert's rows read once, in one task list with every
    other expert's), the bits of the per-expert matmuls, swiglu, the weights' multiply and
    Graph.sum_experts. None where a weight has no row-tile kernel."""
    specs = [_spec(w, False) for w in (gate, up, down)]
    if any(s is None for s in specs):
        return None
    (_, kg, ag, rg, ff, k), (_, ku, au, ru, ffu, k2), (_, kd, ad, rd, ne, ffd) = specs
    n, n_used = ids.shape
    if ffu != ff or k2 != k or ffd != ff or x.shape != (n, k) \
            or not gate.shape[0] == up.shape[0] == down.shape[0]:
        return None
    flat = np.ascontiguousarray(ids, dtype=np.int32).reshape(-1)
    if not len(flat) or flat.min() < 0 or flat.max() >= gate.shape[0]:
        return None
    S = len(flat)
    order = np.argsort(flat, kind="stable").astype(np.int32)
    es = flat[order]
    starts = np.flatnonzero(np.concatenate(([True], es[1:] != es[:-1])))
    gexp = es[starts].astype(np.int32)
    gstart = np.append(starts, S).astype(np.int32)
    pos = np.empty(S, np.int32)
    pos[order] = np.arange(S, dtype=np.int32)
    xrow = (order // n_used).astype(np.int32)
    own_up = au != ag
    xb = _abufs("moeb_x", n, k, ag)
    ub = _abufs("moeb_u", n, k, au) if own_up else None
    if own_up:          # gate's sorted rows, then up's (rows S..), with every part either uses
        sb = tuple(mm._view("moeb_s" + c, (2 * S, k // w), dt) for c, w, dt in (
            ("q", 1, np.int8), ("d", 32, np.float32), ("s", 32, np.float32),
            ("b", 16, np.int16), ("f", 1, np.float32)))
    else:
        sb = _abufs("moeb_s", S, k, ag)
    db = _abufs("moeb_d", S, ff, ad)
    G = mm._view("moeb_G", (S, ff), np.float32)
    U = mm._view("moeb_U", (S, ff), np.float32)
    D = mm._view("moeb_D", (S, ne), np.float32)
    scratch = mm._view("moeb_scratch", (nth, _matmul.row_scratch_bytes(max(k, ff))), np.uint8)
    out = np.empty((n, ne), np.float32)
    _mmid.moe_batch(((kg, ag, rg, ff, k), (ku, au, ru, ff, k), (kd, ad, rd, ne, ff)),
                    np.ascontiguousarray(x, dtype=np.float32), xrow, gexp, gstart, pos,
                    np.ascontiguousarray(wts, dtype=np.float32), xb, ub, sb, db, G, U, D,
                    scratch, out, nth)
    return out


def moe_routed_swiglu1(router: Weight, gate: Weight, up: Weight, down: Weight, x: np.ndarray,
                       n_used: int, norm: bool, scale: float, nth: int):
    """One token's router logits (row tiles: numerics "invariant"), moe_route's softmax gating and
    the SwiGLU experts in one native call (_mmid.Moe1.run_routed): x [1, n_embd] -> [1, n_embd],
    the bits of matmul, moe_route and moe_swiglu1; None where it does not apply."""
    if x.shape[0] != 1 or x.dtype != np.float32 or not x.flags.c_contiguous:
        return None
    key = ("moe1r", id(router), id(gate), id(up), id(down), n_used, bool(norm), float(scale), nth)
    objs = mm._cache().setdefault("moe", {})
    e = objs.get(key)
    ws = (router, gate, up, down)
    if e is None or not all(a is b for a, b in zip(e[0], ws + tuple(w.raw for w in ws))):
        plan = None
        specs = [_spec(w, False) for w in (gate, up, down)]
        if _ops.route_native() and len(router.shape) == 2 and router.shape[0] == gate.shape[0] \
                and 0 < n_used <= router.shape[0] and _matmul.family(int(router.type)) >= 0 \
                and all(s is not None for s in specs) and specs[0][4] == specs[1][4] \
                and specs[0][5] == specs[1][5] == router.shape[1] and specs[2][5] == specs[0][4] \
                and gate.shape[0] == up.shape[0] == down.shape[0]:
            raw, k = mm._raw2d(router)
            kt = mm.kernel_type(router.type, raw.shape[0])
            rspec = (0, kt, _matmul.act_kind(kt), np.ascontiguousarray(raw), raw.shape[0], k)
            nbytes = n_used * sum(s[4] * s[3].shape[1] for s in specs)
            plan = _mmid.Moe1(specs, n_used, 1 if nbytes < PARALLEL_MIN_BYTES else nth,
                              (rspec, norm, scale))
        if len(objs) > 1024:
            objs.clear()
        e = objs[key] = (ws + tuple(w.raw for w in ws), plan)
    plan = e[1]
    if plan is None:
        return None
    out = np.empty((1, down.shape[1]), np.float32)
    plan.run_routed(x.reshape(-1), out.reshape(-1))
    return out
