"""CpuBackend: Cython kernels (nogil, OpenMP over rows/heads/tokens) for the ops in base.OPS.

matmul/get_rows come from .matmul (quantized dot products); the non-matmul ops from _ops and the
attention kernel from _attn. The module imports without the compiled extensions; constructing a
CpuBackend then raises BackendError with the build command.

Beyond base.Backend: `matmul(w, x, out=None)`, `rms_norm(x, w, eps, out=None)` (weight multiply
fused; x [..., d], e.g. [n, n_head, d] for per-head q/k norms). Results never depend on the thread
count: small calls (< ~0.2 ms of work) run on one thread, larger ones on n_threads.
Numerics vs llama.cpp's CPU backend (measured, Gemma 3 270M): per op within ~1e-7 relative of the
numpy oracle; GELU is the exact formula (ggml uses an f16 table), and q and the softmax
probabilities are not rounded to f16 as ggml's non-flash mul_mat path does.
"""
from __future__ import annotations

import os
from collections import OrderedDict

import numpy as np

from ...errors import BackendError
from ..base import KV_BLOCK, ROPE_NEOX, ROPE_NORM, Backend, Weight, kv_type
from ..ref import rope_theta_scale

_NO_FACTORS = np.zeros(0, dtype=np.float32)

try:
    from . import _attn, _attn_q, _ops
except ImportError as e:  # not built
    _attn = _attn_q = _ops = None
    _IMPORT_ERROR = e
# ggml type ids of the KV cache types (_attn_q handles every pair but f16/f16 and f32/f32)
_KV_GGML = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}

_GELU, _SILU, _SOFTCAP, _GEGLU, _SWIGLU = range(5)
# below this much work (elements; attention: multiply-adds / 4), about 0.2 ms on one core, one
# thread is used: waking passive OpenMP workers costs tens of microseconds on a quiet machine and
# milliseconds on a loaded one. The thread count never changes a result.
_MIN_PARALLEL_WORK = 1 << 18
_MODS: dict = {}            # submodules imported on first use (the per-token paths look them up)
_MIN_PARALLEL_ATTN = 1 << 18       # multiply-adds


def _cpu_compat():
    """The one-token kernels' module (cpu/compat.py), imported on first use."""
    m = _MODS.get("compat")
    if m is None:
        from . import compat as m
        _MODS["compat"] = m
    return m


def default_threads() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


_F32 = np.dtype(np.float32)


def _c32(x) -> np.ndarray:
    if type(x) is np.ndarray and x.dtype is _F32 and x.flags.c_contiguous:
        return x
    return np.ascontiguousarray(x, dtype=np.float32)


def _rows(x: np.ndarray, d: int) -> np.ndarray:
    """x as [n, d] (a view)."""
    return x if x.ndim == 2 else x.reshape(-1, d)


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, n_threads: int | None = None):
        if _ops is None:
            raise BackendError("pyllama CPU extensions are not built (run `python setup.py "
                               f"build_ext --inplace`): {_IMPORT_ERROR}")
        super().__init__(n_threads or default_threads())
        self._mm = None
        self.attn_heads_per_task = None     # None: auto; 1..4 only changes the work split
        self.kv_q_conv = False               # bf16/q8_0/q4_0 K: q to K's vec_dot_type (llama.cpp)
        self._rope_tables = OrderedDict()    # rope cos/sin tables, a few most recent

    def _nt(self, work: int) -> int:
        return self.n_threads if work >= _MIN_PARALLEL_WORK else 1

    def _nt_attn(self, macs: int) -> int:
        """Attention splits over (query, head block) tasks from ~50 us of one-core work (a decode
        token's attention over a few hundred cells: Qwen2.5 0.5B spent ~190 us per layer on one
        thread)."""
        return self.n_threads if macs >= _MIN_PARALLEL_ATTN else 1

    # -- weights (quantized matmul lives in .matmul) -----------------------------------------
    def _matmul_mod(self):
        if self._mm is None:
            from . import matmul as mm
            mm.set_num_threads(self.n_threads)
            self._mm = mm
        return self._mm

    def matmul(self, w: Weight, x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        return self._matmul_mod().matmul(w, _c32(x), out=out)

    def matmul_many(self, ws, x: np.ndarray) -> list:
        """[matmul(w, x) for w in ws] in one native call (one activation quantization, one
        parallel region) when the weights share their activation kind and k; same bits."""
        return self._matmul_mod().matmul_many(ws, _c32(x))

    def supports_type(self, wtype) -> bool:
        from . import _matmul
        return _matmul.family(int(wtype)) >= 0

    def matmul_vec(self, w: Weight, x: np.ndarray) -> np.ndarray:
        return _cpu_compat().matvec_k(w, x, self.n_threads)

    def matvec_float(self, w: Weight, x: np.ndarray) -> np.ndarray:
        """Backend.matvec_float natively (_compat.matvec_float, same bits)."""
        from . import _compat
        if not _compat.vecdot_native():
            return Backend.matvec_float(self, w, x)
        x = _c32(x)
        raw = w.raw.reshape(w.shape[-2], -1).view(np.uint8)
        raw = np.ascontiguousarray(raw)
        n = x.shape[0]
        out = np.empty((n, raw.shape[0]), np.float32)
        xs = np.empty_like(x)
        _compat.matvec_float(int(w.type), raw, x, xs, out, max(1, self.n_threads or 1))
        return out

    def moe_route(self, logits: np.ndarray, k: int, norm: bool, scale: float):
        """Backend.moe_route in one native call (_ops.moe_route, same bits)."""
        if not _ops.route_native():
            return Backend.moe_route(self, logits, k, norm, scale)
        x = _c32(logits)
        n, e = x.shape
        probs = np.empty((n, e), np.float32)
        ids = np.empty((n, k), np.int32)
        w = np.empty((n, k), np.float32)
        _ops.moe_route(x, k, bool(norm), float(scale), probs, ids, w)
        return ids, w

    def moe_routed_swiglu(self, router: Weight, gate: Weight, up: Weight, down: Weight,
                          x: np.ndarray, k: int, norm: bool, scale: float):
        """Backend.moe_routed_swiglu for one token in one native call (cpu/mmid.py)."""
        if x.shape[0] != 1:
            return None
        mmid = _MODS.get("mmid")
        if mmid is None:
            from . import mmid
            _MODS["mmid"] = mmid
        return mmid.moe_routed_swiglu1(router, gate, up, down, x, k, norm, scale,
                                       max(1, self.n_threads or 1))

    def mul_mat_id(self, w: Weight, x: np.ndarray, ids: np.ndarray,
                   one_token: bool = False) -> np.ndarray:
        """Backend.mul_mat_id with the experts of few rows in one native call (cpu/mmid.py)."""
        from . import mmid
        return mmid.mul_mat_id(self, w, x, ids, one_token, max(1, self.n_threads or 1))

    def moe_swiglu(self, gate: Weight, up: Weight, down: Weight, x: np.ndarray,
                   ids: np.ndarray, wts: np.ndarray, one_token: bool = False):
        """Backend.moe_swiglu in one native call (cpu/mmid.py, same bits): one token in both
        numerics, a batch in the invariant numerics; else None."""
        mmid = _MODS.get("mmid")
        if mmid is None:
            from . import mmid
            _MODS["mmid"] = mmid
        nth = max(1, self.n_threads or 1)
        if x.shape[0] == 1:
            return mmid.moe_swiglu1(gate, up, down, x, ids, wts, one_token, nth)
        return None if one_token else mmid.moe_swiglu_batch(gate, up, down, x, ids, wts, nth)

    def attention_vec(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap=0.0):
        return _cpu_compat().attention_vec(q, k_cache, v_cache, kv_cells, q_start, q_end, scale,
                                    softcap, self.n_threads)

    def attention_fa(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap=0.0,
                     view=None):
        return _cpu_compat().attention_fa(q, k_cache, v_cache, kv_cells, q_start, q_end, scale,
                                   softcap, self.n_threads, view)

    def get_rows(self, w: Weight, ids: np.ndarray) -> np.ndarray:
        return self._matmul_mod().get_rows(w, np.asarray(ids))

    # -- normalisation -----------------------------------------------------------------------
    def rms_norm(self, x, w, eps, out=None):
        """x [..., d] (e.g. [n, n_head, d] for per-head q/k norms), w [d] or None; the weight
        multiply is fused into the same pass (same two f32 roundings as norm then mul)."""
        x = _c32(x)
        n = x.size
        if out is None and n < _MIN_PARALLEL_WORK:      # one thread: no buffer acquisition
            out = np.empty_like(x)
            if _ops.rms_norm_rows(x, w, eps, out):
                return out
        d = x.shape[-1]
        if w is not None:
            w = _c32(w)
            if w.shape != (d,):
                return self.mul(self.rms_norm(x, None, eps), w)
        out = np.empty_like(x) if out is None else out
        _ops.rms_norm(_rows(x, d), w, eps, _rows(out, d),
                      self.n_threads if n >= _MIN_PARALLEL_WORK else 1)
        return out

    def rope(self, x, pos, n_rot, base, freq_scale, mode, freq_factors=None, ext_factor=0.0,
             attn_factor=1.0, corr_dims=(0.0, 0.0)):
        if mode not in (ROPE_NORM, ROPE_NEOX):
            raise BackendError(f"unsupported rope mode {mode}")
        x = _c32(x)
        hd = x.shape[2]
        if n_rot % 2 or n_rot > hd or n_rot <= 0:
            raise BackendError(f"rope: n_rot {n_rot} must be even, > 0 and <= head_dim {hd}")
        pos = np.ascontiguousarray(pos, dtype=np.int32)
        cs, sn = self._rope_cache(pos, n_rot, base, freq_scale, freq_factors, ext_factor,
                                  attn_factor, corr_dims)
        out = np.empty_like(x)
        _ops.rope_apply(x, cs, sn, n_rot, mode == ROPE_NEOX, out, self._nt(x.size))
        return out

    def _rope_cache(self, pos, n_rot, base, freq_scale, freq_factors, ext_factor, attn_factor,
                    corr_dims):
        """cos/sin tables, reused across calls with the same positions and parameters (q and k
        of every layer of a ubatch share them)."""
        ff = _NO_FACTORS if freq_factors is None else _c32(freq_factors)
        if ff.size and ff.shape != (n_rot // 2,):
            raise BackendError(f"rope: {ff.size} frequency factors for {n_rot // 2} pairs")
        key = (pos.tobytes(), n_rot, float(base), float(freq_scale), ff.tobytes(),
               float(ext_factor), float(attn_factor), tuple(map(float, corr_dims)))
        hit = self._rope_tables.get(key)
        if hit is not None:
            self._rope_tables.move_to_end(key)
            return hit
        cs = np.empty((len(pos), n_rot // 2), dtype=np.float32)
        sn = np.empty_like(cs)
        _ops.rope_cache(pos, n_rot, float(rope_theta_scale(base, n_rot)), float(freq_scale), ff,
                        float(ext_factor), float(attn_factor), float(corr_dims[0]),
                        float(corr_dims[1]), cs, sn, self._nt(cs.size * 8))
        self._rope_tables[key] = (cs, sn)
        if len(self._rope_tables) > 4:
            self._rope_tables.popitem(last=False)
        return cs, sn

    # -- elementwise -------------------------------------------------------------------------
    def _unary(self, kind, x, g=None, a=0.0, b=0.0):
        x = _c32(x)
        if g is not None:
            g = _c32(g)
            if g.shape != x.shape:
                x, g = (np.ascontiguousarray(t) for t in np.broadcast_arrays(x, g))
            g = g.reshape(-1)
        out = np.empty_like(x)
        _ops.unary(kind, x.reshape(-1), g, out.reshape(-1), a, b, self._nt(x.size))
        return out

    def gelu(self, x):
        return self._unary(_GELU, x)

    def silu(self, x):
        return self._unary(_SILU, x)

    def softcap(self, x, cap):
        return self._unary(_SOFTCAP, x, None, float(np.float32(1.0) / np.float32(cap)),
                           float(cap))

    def geglu(self, gate, up):
        return self._unary(_GEGLU, gate, up)

    def swiglu(self, gate, up):
        return self._unary(_SWIGLU, gate, up)

    # -- KV and attention --------------------------------------------------------------------
    def set_rows(self, cache, cells, rows):
        """cache[cells[i]] = rows[i]; f16 caches round to nearest even (|x| > 65504 -> inf)."""
        cells = np.ascontiguousarray(cells, dtype=np.int64)
        if cache.dtype not in (np.float16, np.float32):
            return self._set_rows_q(cache, cells, rows)
        rows = _c32(rows).reshape(len(cells), cache.shape[1])
        if cache.dtype not in (np.float16, np.float32) or cache.strides[1] != cache.itemsize:
            raise BackendError(f"set_rows: unsupported cache {cache.dtype} {cache.strides}")
        if not _ops.set_rows(cache, cells, rows, self._nt(rows.size)):
            raise BackendError("set_rows: cell index out of range")

    def hadamard(self, x, n):
        """base.hadamard (quantized-KV rotation), bit for bit, in Cython."""
        y = _c32(x).reshape(-1, x.shape[-1]).copy()
        _attn_q.hadamard(y, int(n), self._nt(y.size))
        return y.reshape(x.shape)

    def _set_rows_q(self, cache, cells, rows):
        """bf16 / q8_0 / q4_0 caches: encoded as llama.cpp's CPU set_rows (base.kv_encode)."""
        name = kv_type(cache)
        rows = _c32(rows).reshape(len(cells), cache.shape[1] * KV_BLOCK[name])
        if not _attn_q.set_rows(_bytes(cache), _KV_GGML[name], cells, rows, self._nt(rows.size)):
            raise BackendError("set_rows: cell index out of range")

    def attention_sinks(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, sinks,
                        one_token: bool = False):
        """Backend.attention_sinks by the native kernel (_attn with sinks, the same bits as the
        numpy reference ref.attention_lanes); a one-query ubatch in the llama.cpp numerics (its
        ggml_vec_dot_f16 path) stays on the numpy reference."""
        if ((one_token and q.shape[0] == 1 and k_cache.dtype == np.float16)
                or k_cache.dtype != v_cache.dtype
                or k_cache.dtype not in (np.float16, np.float32) or not _attn.simd()):
            return Backend.attention_sinks(self, q, k_cache, v_cache, kv_cells, q_start, q_end,
                                           scale, sinks, one_token)
        return self.attention(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, 0.0,
                              sinks=_c32(np.asarray(sinks, np.float32).reshape(-1)))

    def attention(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap=0.0,
                  sinks=None):
        if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (np.float16, np.float32):
            if sinks is not None:
                raise BackendError("attention sinks need f16 or f32 K/V caches")
            return self._attention_q(q, k_cache, v_cache, kv_cells, q_start, q_end, scale,
                                     softcap)
        q = _c32(q)
        n_q, n_head, d_k = q.shape
        n_kv, d_v, f16 = _kv_layout(q, k_cache, v_cache)
        cells = np.ascontiguousarray(kv_cells, dtype=np.int32)
        qs = np.ascontiguousarray(q_start, dtype=np.int64)
        qe = np.ascontiguousarray(q_end, dtype=np.int64)
        max_len, total = _check_lists(cells, qs, qe, n_q, k_cache.shape[0])
        out = np.empty((n_q, n_head, d_v), dtype=np.float32)
        nt = self._nt_attn(total * n_head * (d_k + d_v))
        hb = self.attn_heads_per_task or _heads_per_task(n_q, n_kv, n_head // n_kv, nt)
        _attn.attention(q, _bytes(k_cache), _bytes(v_cache), f16, n_kv, cells, qs, qe,
                        float(scale), float(softcap), out, max_len, hb, nt, sinks)
        return out


    def _attention_q(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap):
        """Any other K/V type pair (bf16, q8_0, q4_0, mixed): _attn_q, one task per (query,
        head); f32 q against exactly dequantized K, or with `kv_q_conv` q converted to K's
        vec_dot_type as llama.cpp's flash-attention path does (docs/kv_cache_types.md)."""
        q = _c32(q)
        n_q, n_head, d_k = q.shape
        kt, vt, n_kv, d_v = _kv_layout_q(q, k_cache, v_cache)
        cells = np.ascontiguousarray(kv_cells, dtype=np.int32)
        qs = np.ascontiguousarray(q_start, dtype=np.int64)
        qe = np.ascontiguousarray(q_end, dtype=np.int64)
        max_len, total = _check_lists(cells, qs, qe, n_q, k_cache.shape[0])
        out = np.empty((n_q, n_head, d_v), dtype=np.float32)
        nt = self._nt_attn(total * n_head * (d_k + d_v))
        _attn_q.attention(q, _bytes(k_cache), _bytes(v_cache), _KV_GGML[kt], _KV_GGML[vt],
                          bool(self.kv_q_conv), n_kv,
                          cells, qs, qe, float(scale), float(softcap), out, max_len, nt)
        return out


def _kv_layout_q(q, k_cache, v_cache):
    """(K type, V type, n_head_kv, d_v) for caches of any KV type; block types need heads of a
    multiple of 32 elements (as llama.cpp's views of quantized rows)."""
    n_head, d_k = q.shape[1], q.shape[2]
    try:
        kt, vt = kv_type(k_cache), kv_type(v_cache)
    except ValueError as e:
        raise BackendError(f"attention: {e}") from None
    nek, nev = k_cache.shape[1] * KV_BLOCK[kt], v_cache.shape[1] * KV_BLOCK[vt]
    if k_cache.ndim != 2 or nek % d_k or k_cache.shape[0] != v_cache.shape[0]:
        raise BackendError(f"attention: K cache {k_cache.shape} does not fit head_dim {d_k}")
    n_kv = nek // d_k
    if n_kv == 0 or n_head % n_kv or nev % n_kv:
        raise BackendError(f"attention: {n_head} heads vs {n_kv} KV heads")
    d_v = nev // n_kv
    if d_k % KV_BLOCK[kt] or d_v % KV_BLOCK[vt]:
        raise BackendError(f"attention: head sizes {d_k}/{d_v} not multiples of the "
                           f"{kt}/{vt} block (32)")
    return kt, vt, n_kv, d_v


def _heads_per_task(n_q: int, n_kv: int, group: int, n_threads: int) -> int:
    """Largest head block (<= 4, K/V rows shared by its heads) that still gives every thread a
    task. Only the work split depends on it, never a result."""
    hb = 4
    while hb > 1 and n_q * n_kv * -(-group // hb) < n_threads:
        hb -= 1
    return hb


def _kv_layout(q, k_cache, v_cache):
    n_head, d_k = q.shape[1], q.shape[2]
    if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (np.float16, np.float32):
        raise BackendError(f"attention: unsupported KV types {k_cache.dtype}/{v_cache.dtype}")
    if k_cache.ndim != 2 or k_cache.shape[1] % d_k or k_cache.shape[0] != v_cache.shape[0]:
        raise BackendError(f"attention: K cache {k_cache.shape} does not fit head_dim {d_k}")
    n_kv = k_cache.shape[1] // d_k
    if n_kv == 0 or n_head % n_kv or v_cache.shape[1] % n_kv:
        raise BackendError(f"attention: {n_head} heads vs {n_kv} KV heads")
    return n_kv, v_cache.shape[1] // n_kv, k_cache.dtype == np.float16


def _check_lists(cells, qs, qe, n_q, n_cells) -> tuple[int, int]:
    """Validate the cell list and per-query ranges; returns (longest range, total listed)."""
    if qs.shape != (n_q,) or qe.shape != (n_q,):
        raise BackendError("attention: q_start/q_end must have one entry per query")
    longest, total = _attn.check_lists(cells, qs, qe, n_cells)
    if longest == -1:
        raise BackendError("attention: kv cell index out of range")
    if longest == -2:
        raise BackendError("attention: bad q_start/q_end ranges")
    return longest, total


def _bytes(cache: np.ndarray) -> np.ndarray:
    """The cache as bytes [n_cells, row_bytes] (no copy; rows must be contiguous)."""
    if cache.strides[1] != cache.itemsize:
        raise BackendError("attention: KV cache rows must be contiguous")
    return cache.view(np.uint8)
