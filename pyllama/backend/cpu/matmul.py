"""CPU matmul / get_rows on GGUF weights (llama.cpp numerics, batch- and thread-invariant).

`matmul(w, x, out=None)`: y [n, rows] = x [n, k] @ W^T. The n activation rows are quantized once
into the weight type's vec_dot type (q8_0/q8_1, q8_K, f16, bf16, f32 as llama.cpp on x86), then
tiles of weight rows x tokens are computed in Cython (_matmul.pyx + pyl_matmul.h); small batches
(up to 16 tokens for 32-block types, 3 for K-quants) take a direct path that decodes each weight
block in registers once for a group of tokens, with the same per-element operations. Row i of the result is
bit-identical whatever n and the number of threads. With `out` given no array is allocated
(activation and scratch buffers are cached per thread by size). `get_rows(w, ids)` dequantizes
rows with ggml's dequantize_row_* arithmetic. Oracle: pyllama.backend.ref_matmul.
"""
from __future__ import annotations

import os
import threading

os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import numpy as np  # noqa: E402

from ...errors import BackendError  # noqa: E402
from ...gguf import GGML_BLOCK, GGMLType  # noqa: E402
from ...quant import dequantize  # noqa: E402
from . import _matmul  # noqa: E402

_state = {"threads": max(1, _matmul.max_threads())}
_local = threading.local()
_DUMMY_Q = np.zeros((1, 1), np.int8)
_DUMMY_F = np.zeros((1, 1), np.float32)
_DUMMY_S = np.zeros((1, 1), np.int16)


def set_num_threads(n: int | None) -> None:
    """Threads used by matmul (>= 1; None: OpenMP's default). Results do not depend on it."""
    _state["threads"] = max(1, int(n) if n else _matmul.max_threads())


def get_num_threads() -> int:
    return _state["threads"]


def set_parallel_min_bytes(n: int) -> None:
    """Weight bytes x tokens below which one matmul runs on one thread (default 128 KiB: waking a
    passive OpenMP thread costs more). Tuning knob only: results never depend on it."""
    _matmul.set_parallel_min_bytes(int(n))


def _cache() -> dict:
    c = getattr(_local, "cache", None)
    if c is None:
        c = _local.cache = {"bufs": {}, "plans": {}, "objs": {}}
    return c


def _buf(name: str, nbytes: int) -> np.ndarray:
    """A per-thread cached uint8 buffer of at least nbytes (grows, never shrinks)."""
    c = _cache()
    b = c["bufs"].get(name)
    if b is None or b.nbytes < nbytes:
        b = c["bufs"][name] = np.empty(max(nbytes, 64), np.uint8)
        c["plans"].clear()          # plans hold views of the old buffers
        c["objs"].clear()
    return b


def _view(name: str, shape: tuple, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    n = dt.itemsize
    for s in shape:
        n *= s
    return _buf(name, n)[:n].view(dt).reshape(shape)


def _plan(kind: int, n: int, k: int, nth: int) -> tuple:
    """Cached (q, d, s, bsums, f, scratch) arrays for n activation rows of length k."""
    key = (kind, n, k, nth)
    plans = _cache()["plans"]
    p = plans.get(key)
    if p is not None:
        return p
    q, d, s, bs, f = _DUMMY_Q, _DUMMY_F, _DUMMY_F, _DUMMY_S, _DUMMY_F
    if kind == _matmul.ACT_Q8_0:
        q = _view("q", (n, k), np.int8)
        d, s = _view("d", (n, k // 32), np.float32), _view("s", (n, k // 32), np.float32)
    elif kind in (_matmul.ACT_Q8_K, _matmul.ACT_Q8_K4):
        q, d = _view("q", (n, k), np.int8), _view("d", (n, k // 256), np.float32)
        bs = _view("bs", (n, k // 16), np.int16)
    else:
        f = _view("f", (n, k), np.float32)
    scratch = _view("scratch", (nth, _matmul.row_scratch_bytes(k)), np.uint8)
    p = (q, d, s, bs, f, scratch)
    plans = _cache()["plans"]       # _view may have cleared it
    if len(plans) > 64:
        plans.clear()
    plans[key] = p
    return p


def _raw2d(w) -> tuple[np.ndarray, int]:
    """(raw as uint8 [rows, row_bytes], k)"""
    wtype = w.type
    if _matmul.family(int(wtype)) < 0:
        raise BackendError(f"{w.name}: matmul for type {wtype.name} is not supported")
    raw = w.raw
    if raw.ndim != 2 or raw.dtype != np.uint8:
        raw = raw.reshape(raw.shape[0] if raw.ndim > 1 else 1, -1).view(np.uint8)
    be, bb = GGML_BLOCK[wtype]
    return raw, raw.shape[1] // bb * be


_WEIGHTS: dict = {}  # id(w) -> (w, w.raw, kernel bytes, k, kernel type, activation kind, raw [rows, row_bytes])
# llama.cpp's CPU backend repacks these on AVX2 when rows % 8 == 0 (ggml-cpu/repack.cpp,
# ggml_repack_get_optimal_repack_type) and multiplies them with ggml_gemm/gemv_*_8x8_q8_0
_REPACKED_8X8 = frozenset({GGMLType.Q4_0, GGMLType.IQ4_NL, GGMLType.MXFP4})
R8, V2, KT, RP = 256, 512, 1024, 2048      # pyl_matmul.h PYL_R8, PYL_V2, PYL_KT, PYL_RP


def kernel_type(wtype, rows: int) -> int:
    """The type id the kernels get: wtype | R8 for the repacked 8x8 arithmetic; an MXFP4 llama.cpp
    does not repack always takes ggml_vec_dot_mxfp4_q8_0 (| V2), a Q4_K the tiled kernel (| KT);
    else wtype."""
    if wtype in _REPACKED_8X8 and rows % 8 == 0:
        return int(wtype) | R8
    if wtype == GGMLType.Q4_K and rows % 8:         # not repacked: the tiled kernel
        return int(wtype) | KT
    return int(wtype) | V2 if wtype == GGMLType.MXFP4 else int(wtype)


def _weight(w) -> tuple:
    """The per-weight constants matmul needs, computed once (w is kept alive with them)."""
    e = _WEIGHTS.get(id(w))
    if e is None or e[0] is not w or e[1] is not w.raw:
        if len(_WEIGHTS) > 8192:
            _WEIGHTS.clear()
        raw, k = _raw2d(w)
        kt = kernel_type(w.type, raw.shape[0])
        kraw = raw
        if kt & R8 and _matmul.HAVE_R8_REPACK:
            # as llama.cpp's CPU backend: the 8-row interleaved copy its kernels read (made
            # once, at the weight's first matmul); get_rows and the MoE path keep w.raw
            kraw = np.empty_like(raw)
            _matmul.repack_r8(kt & 255, raw, kraw)
            kt |= RP
        e = _WEIGHTS[id(w)] = (w, w.raw, kraw, k, kt, _matmul.act_kind(kt), raw)
    return e


def matmul(w, x: np.ndarray, out: np.ndarray | None = None, ktype: int | None = None) -> np.ndarray:
    """y [..., rows] = x [..., k] @ W[rows, k]^T (x float32, any leading shape; out: float32 of
    that shape, or a [n, >= rows] view with contiguous rows, e.g. a column slice). ktype: a
    kernel type id instead of kernel_type's (e.g. type | V2: llama.cpp's one-row vec_dot)."""
    _, _, raw, k, wtype, kind, plain = _weight(w)
    if ktype is not None:
        wtype, raw = ktype, plain
    x2 = x if (x.dtype == np.float32 and x.flags.c_contiguous) else \
        np.ascontiguousarray(x, dtype=np.float32)
    if x2.ndim != 2:
        x2 = x2.reshape(-1, x2.shape[-1])
    if x2.shape[1] != k:
        raise BackendError(f"{w.name}: x has {x2.shape[1]} columns, weight rows have {k}")
    n, rows = x2.shape[0], raw.shape[0]
    if out is None:
        out = np.empty(x.shape[:-1] + (rows,), np.float32)
    o2 = out if out.ndim == 2 else out.reshape(n, rows)
    _matmul.matmul_plan(wtype, raw, x2, o2, _plan_obj(kind, n, k, _state["threads"]))
    return out


def matmul_many(ws, x: np.ndarray, outs=None) -> list:
    """[matmul(w, x) for w in ws] with one activation quantization and one parallel region when
    the weights (at most 4) share the activation kind and k (q/k/v, gate/up); the same bits
    as separate calls. Otherwise separate calls."""
    g = _MANY.get(tuple(map(id, ws)))
    if g is None or not all(a is b for a, b in zip(g[0], ws)) or \
            not all(e[1] is e[0].raw for e in g[1]):
        es = tuple(_weight(w) for w in ws)
        kind, k = es[0][5], es[0][3]
        fused = len(es) <= 4 and all(e[5] == kind and e[3] == k for e in es)
        if len(_MANY) > 4096:
            _MANY.clear()
        g = _MANY[tuple(map(id, ws))] = (tuple(ws), es, fused, kind, k,
                                         tuple([e[4] for e in es]), tuple([e[2] for e in es]),
                                         tuple([e[2].shape[0] for e in es]))
    _, es, fused, kind, k, wtypes, raws, rows = g
    x2 = x if (x.dtype == np.float32 and x.flags.c_contiguous) else \
        np.ascontiguousarray(x, dtype=np.float32)
    if x2.ndim != 2:
        x2 = x2.reshape(-1, x2.shape[-1])
    n = x2.shape[0]
    lead = x.shape[:-1]
    if outs is None:
        outs = [np.empty(lead + (r,), np.float32) for r in rows]
    if not fused or x2.shape[1] != k:
        return [matmul(w, x, o) for w, o in zip(ws, outs)]
    _matmul.matmul_plan_many(wtypes, raws, x2,
                             tuple([o if o.ndim == 2 else o.reshape(n, -1) for o in outs]),
                             _plan_obj(kind, n, k, _state["threads"]))
    return outs


# tuple of id(w) -> (weights, their _weight entries, one fused call?, activation kind, k, kernel
# types, kernel raws, rows): matmul_many's per-call constants, computed once per weight group
_MANY: dict = {}


def _plan_obj(kind: int, n: int, k: int, nth: int):
    """The cached _matmul.Plan over _plan's arrays."""
    objs = _cache()["objs"]
    p = objs.get((kind, n, k, nth))
    if p is None:
        p = _matmul.Plan(*_plan(kind, n, k, nth), n, k, nth)
        objs = _cache()["objs"]         # _plan may have cleared it
        if len(objs) > 64:
            objs.clear()
        objs[kind, n, k, nth] = p
    return p


# i-quants: the kernels hold them in llama.cpp's tiled-kernel form, whose float expression is not
# dequantize_row_*'s; their rows decode through the numpy reference (bit-exact with ggml)
_NUMPY_ROWS = frozenset({GGMLType.IQ2_XXS, GGMLType.IQ2_XS, GGMLType.IQ2_S, GGMLType.IQ3_XXS,
                         GGMLType.IQ3_S, GGMLType.IQ1_S, GGMLType.IQ1_M, GGMLType.IQ4_XS,
                         GGMLType.TQ1_0, GGMLType.TQ2_0})


def get_rows(w, ids) -> np.ndarray:
    """Dequantized rows W[ids] -> [len(ids), k] float32."""
    raw, k = _raw2d(w)
    ids = np.ascontiguousarray(ids, dtype=np.int64).reshape(-1)
    if ids.size and (ids.min() < 0 or ids.max() >= raw.shape[0]):
        raise BackendError(f"{w.name}: row id out of range [0, {raw.shape[0]})")
    if w.type in _NUMPY_ROWS:
        return dequantize(raw[ids], w.type).reshape(ids.size, k)
    out = np.empty((ids.size, k), np.float32)
    scratch = _buf("rows", _matmul.row_scratch_bytes(k))
    _matmul.dequant_rows(int(w.type), raw, k, ids, out, scratch)
    return out


def quantize_activations(wtype: int, x: np.ndarray) -> dict:
    """The activations as the kernels see them (copies), for tests and debugging:
    q8_0 -> q, d, s; q8_K -> q, d, bsums; float kinds -> f (rounded to f16/bf16 when needed)."""
    x2 = np.ascontiguousarray(np.atleast_2d(x), dtype=np.float32)
    kind = _matmul.act_kind(int(wtype))
    q, d, s, bs, f, _ = _plan(kind, x2.shape[0], x2.shape[1], 1)
    _matmul.quantize_acts(kind, x2, q, d, s, bs, f, 1)
    if kind == _matmul.ACT_Q8_0:
        return {"q": q.copy(), "d": d.copy(), "s": s.copy()}
    if kind in (_matmul.ACT_Q8_K, _matmul.ACT_Q8_K4):
        return {"q": q.copy(), "d": d.copy(), "bsums": bs.copy()}
    return {"f": f.copy()}
