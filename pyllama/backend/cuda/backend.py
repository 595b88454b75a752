"""CudaBackend: the base.OPS contract on one NVIDIA GPU through PyCUDA (kernels in cuda/*.cu).

Activations stay on the device as `DevArray`s between ops; an op given a numpy array uploads it.
Weights are uploaded once (`weight`), in their GGUF block layout; types without a kernel
(anything but F32, F16, Q8_0, Q5_0, Q4_K, Q6_K) are dequantized to F32 at upload. KV buffers are
device arrays (`alloc_kv`). Every kernel runs on one stream; the host waits only when it reads a
result (`np.asarray(devarray)`: the logits, once per decode step). Scratch comes from a pycuda
memory pool, so after the first step no step allocates device memory.
"""
from __future__ import annotations

import numpy as np

from ...errors import BackendError
from ...gguf import GGMLType
from ..base import ROPE_NEOX, ROPE_NORM, Backend, Weight
from ..ref import rope_theta_scale
from .runtime import DevArray, get_device

_MM_TYPES = {GGMLType.F32: "f32", GGMLType.F16: "f16", GGMLType.Q8_0: "q8_0",
             GGMLType.Q5_0: "q5_0", GGMLType.Q4_K: "q4_K", GGMLType.Q6_K: "q6_K"}
_MM_WARPS, _MM_TILE = 4, 8              # must match cuda/matmul.cu
_ATT_THREADS = 128                      # cuda/attention.cu: ATT_WARPS * 32
_ATT_TILED_WARPS = 8                    # cuda/attention.cu: ATT_TILED_WARPS
_ATT_PER = (1, 2, 4, 8)                 # head dims per lane: head size <= 32 * 8
_EW_THREADS, _EW_MAX_BLOCKS = 256, 8192
_CONST_MAX_BYTES, _CONST_MAX_ENTRIES = 1 << 16, 256
_KV_DTYPES = {"f16": np.float16, "f32": np.float32}


_OPS_SIGS = {
    "rms_norm_f32": "PPfiP", "rope_f32": "PPiiiiffiP", "add_f32": "PPqqP", "mul_f32": "PPqqP",
    "scale_f32": "PfqP", "gelu_f32": "PqP", "silu_f32": "PqP", "geglu_f32": "PPqP",
    "swiglu_f32": "PPqP", "softcap_f32": "PffqP", "set_rows_f16": "PiPPq",
    "set_rows_f32": "PiPPq", "set_rows_q8_0": "PiPPq", "copy_rows": "PPqqP", "argmax_f32": "PiP",
}


def kernel_signatures() -> dict[str, tuple[str, str]]:
    """Every kernel the backend launches: name -> (module, parameter format in struct letters:
    P pointer, q int64, i int32, f float32). tests/cuda/test_kernel_abi.py checks it against the
    kernels' PTX entry signatures."""
    sig = {}
    for t in _MM_TYPES.values():
        sig[f"mm_{t}"] = ("matmul", "PqiiPiP")
        sig[f"get_rows_{t}"] = ("matmul", "PqiPiP")
    for per in _ATT_PER:
        for kt in ("f16", "f32"):
            sig[f"attn_p{per}_{kt}"] = ("attention", "PPPiiiPPPffP")
            sig[f"attn_tiled_p{per}_{kt}"] = ("attention", "PPPiiiiiPPPffP")
    sig.update({name: ("ops", fmt) for name, fmt in _OPS_SIGS.items()})
    return sig


_SIGS = kernel_signatures()


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


_WARNED = []


def _warn_unverified() -> None:
    """One line, on the first CUDA backend of the process: no GPU run has verified it yet."""
    if not _WARNED:
        _WARNED.append(True)
        from ...log import get_logger
        get_logger("cuda").warning(
            "warning: the CUDA backend has never been run on a GPU (compiled and host-tested "
            "only, docs/cuda.md); results are unverified: -ngl 0 uses the CPU backend")


class CudaBackend(Backend):
    name = "cuda"
    # launches with at least this many queries use the tiled (prefill) attention kernel; fewer
    # (decode, a few sequences decoding together) the per-(query, head) kernel, whose four warps
    # split one list. Both give bit-identical rows, so this only moves time.
    attn_tiled_min_queries = 16

    def __init__(self, n_threads: int | None = None, device: int = 0):
        super().__init__(n_threads)
        self.dev = get_device(device)
        _warn_unverified()
        self._consts: dict[tuple, DevArray] = {}

    def _idx(self, a, dtype) -> DevArray:
        """A small read-only input (token ids, positions, cell lists) on the device, uploaded
        once per distinct content: the layers of a step share the same positions and cells."""
        a = np.ascontiguousarray(a, dtype=dtype)
        if a.nbytes > _CONST_MAX_BYTES:
            return DevArray.upload(self.dev, a)
        key = (a.dtype.str, a.shape, a.tobytes())
        d = self._consts.get(key)
        if d is None:
            if len(self._consts) >= _CONST_MAX_ENTRIES:
                self._consts.clear()
            d = self._consts[key] = DevArray.upload(self.dev, a)
        return d

    # -- helpers ---------------------------------------------------------------------------------
    def _in(self, x, dtype=np.float32) -> DevArray:
        """x as a device array of dtype (numpy input is uploaded)."""
        if isinstance(x, DevArray):
            if x.dtype != np.dtype(dtype):
                raise BackendError(f"cuda: expected {np.dtype(dtype)}, got {x!r}")
            return x
        return DevArray.upload(self.dev, np.ascontiguousarray(x, dtype=dtype))

    def _empty(self, shape, dtype=np.float32) -> DevArray:
        return DevArray.empty(self.dev, shape, dtype)

    def _ew_grid(self, n: int) -> tuple[int, int]:
        return (max(1, min(_cdiv(n, _EW_THREADS), _EW_MAX_BLOCKS)), 1)

    def synchronize(self) -> None:
        self.dev.synchronize()

    def _launch(self, name: str, grid, block, *args) -> None:
        module, fmt = _SIGS[name]
        self.dev.launch(module, name, fmt, grid, block, *args)

    # -- memory ----------------------------------------------------------------------------------
    def weight(self, info) -> Weight:
        """Upload a tensor once; Weight.dev is its DevArray (bytes [rows, row_bytes], or f32)."""
        w = Weight(info.name, info.type, info.shape, info.data)
        if len(w.shape) == 1 or w.type not in _MM_TYPES:
            host = w.raw if w.type == GGMLType.F32 else _dequantize(w)
            w.dev = DevArray.upload(self.dev, np.asarray(host, dtype=np.float32).reshape(w.shape),
                                    persistent=True)
            w.dev_type = GGMLType.F32
        else:
            raw = np.ascontiguousarray(w.raw).view(np.uint8).reshape(w.shape[0], -1)
            w.dev = DevArray.upload(self.dev, raw, persistent=True)
            w.dev_type = w.type
        return w

    def vec(self, w: Weight) -> DevArray:
        return w.dev.reshape(-1)

    def alloc_kv(self, n_cells: int, row: int, dtype: str) -> DevArray:
        if dtype not in _KV_DTYPES:
            raise BackendError(f"cuda: KV cache type {dtype!r} not supported (f16, f32)")
        buf = DevArray.empty(self.dev, (n_cells, row), _KV_DTYPES[dtype], persistent=True)
        buf[...] = 0
        return buf

    # -- weights ---------------------------------------------------------------------------------
    def matmul(self, w: Weight, x) -> DevArray:
        x = self._in(x)
        rows, cols = w.shape[0], w.shape[-1]
        if x.shape[-1] != cols:
            raise BackendError(f"matmul {w.name}: x {x.shape} vs W {w.shape}")
        n = x.size // cols
        y = self._empty((*x.shape[:-1], rows))
        if n:
            row_bytes = w.dev.nbytes // rows
            self._launch("mm_" + _MM_TYPES[w.dev_type],
                         (_cdiv(rows, _MM_WARPS), _cdiv(n, _MM_TILE)), (_MM_WARPS * 32, 1, 1),
                         w.dev.ptr, row_bytes, rows, cols, x.ptr, n, y.ptr)
        return y

    def get_rows(self, w: Weight, ids) -> DevArray:
        ids = np.ascontiguousarray(ids, dtype=np.int32).reshape(-1)
        cols = w.shape[-1]
        out = self._empty((len(ids), cols))
        if len(ids) and (ids.min() < 0 or ids.max() >= w.shape[0]):
            raise BackendError(f"get_rows {w.name}: row id out of range")
        if len(ids):
            d_ids = self._idx(ids, np.int32)
            row_bytes = w.dev.nbytes // w.shape[0]
            self._launch("get_rows_" + _MM_TYPES[w.dev_type],
                         (_cdiv(_cdiv(cols, 32), 128), len(ids)), (128, 1, 1),
                         w.dev.ptr, row_bytes, cols, d_ids.ptr, len(ids), out.ptr)
        return out

    # -- normalisation and rope ------------------------------------------------------------------
    def rms_norm(self, x, w, eps) -> DevArray:
        x = self._in(x)
        d = x.shape[-1]
        if w is not None and (w.size != d):
            return self.mul(self.rms_norm(x, None, eps), w)
        wd = None if w is None else self._in(w)
        y = self._empty(x.shape)
        if x.size:
            self._launch("rms_norm_f32", (x.size // d, 1), (256, 1, 1),
                         x.ptr, 0 if wd is None else wd.ptr, float(eps), d, y.ptr)
        return y

    def softmax(self, x):
        raise BackendError("mixture-of-experts models are not supported on the CUDA backend yet")

    def mul_mat_id(self, w, x, ids, one_token=False):
        raise BackendError("mixture-of-experts models are not supported on the CUDA backend yet")

    def rope(self, x, pos, n_rot, base, freq_scale, mode, freq_factors=None, ext_factor=0.0,
             attn_factor=1.0, corr_dims=(0.0, 0.0)) -> DevArray:
        if mode not in (ROPE_NORM, ROPE_NEOX):
            raise BackendError(f"unsupported rope mode {mode}")
        if freq_factors is not None or ext_factor != 0.0 or attn_factor != 1.0:
            raise BackendError("rope frequency factors / YaRN are not implemented on CUDA yet")
        x = self._in(x)
        n, n_head, hd = x.shape
        if n_rot % 2 or n_rot > hd:
            raise BackendError(f"rope: n_rot {n_rot} must be even and <= head_dim {hd}")
        y = self._empty(x.shape)
        work = n * n_head * (n_rot // 2 + hd - n_rot)
        if work:
            p = self._idx(np.asarray(pos, dtype=np.int32).reshape(-1), np.int32)
            self._launch("rope_f32", (_cdiv(work, 256), 1), (256, 1, 1),
                         x.ptr, p.ptr, n, n_head, hd, n_rot,
                         float(rope_theta_scale(base, n_rot)), float(freq_scale),
                         int(mode == ROPE_NEOX), y.ptr)
        return y

    # -- elementwise -----------------------------------------------------------------------------
    def _binary(self, kernel: str, a, b) -> DevArray:
        """y = a op b, the smaller operand broadcast along the other's leading axes."""
        a, b = self._in(a), self._in(b)
        if a.size < b.size:                       # add and mul commute
            a, b = b, a
        bs = tuple(b.shape)
        while bs and bs[0] == 1:
            bs = bs[1:]
        if b.size == 0 and a.size or a.shape[a.ndim - len(bs):] != bs:
            raise BackendError(f"cuda {kernel}: cannot broadcast {b.shape} to {a.shape}")
        y = self._empty(a.shape)
        if a.size:
            self._launch(kernel, self._ew_grid(a.size), (_EW_THREADS, 1, 1),
                         a.ptr, b.ptr, a.size, b.size, y.ptr)
        return y

    def add(self, a, b) -> DevArray:
        return self._binary("add_f32", a, b)

    def mul(self, a, b) -> DevArray:
        return self._binary("mul_f32", a, b)

    def scale(self, x, s: float) -> DevArray:
        x = self._in(x)
        y = self._empty(x.shape)
        if x.size:
            self._launch("scale_f32", self._ew_grid(x.size),
                         (_EW_THREADS, 1, 1), x.ptr, float(np.float32(s)), x.size, y.ptr)
        return y

    def _unary(self, kernel: str, x) -> DevArray:
        x = self._in(x)
        y = self._empty(x.shape)
        if x.size:
            self._launch(kernel, self._ew_grid(x.size), (_EW_THREADS, 1, 1),
                         x.ptr, x.size, y.ptr)
        return y

    def gelu(self, x) -> DevArray:
        return self._unary("gelu_f32", x)

    def silu(self, x) -> DevArray:
        return self._unary("silu_f32", x)

    def _gated(self, kernel: str, gate, up) -> DevArray:
        g, u = self._in(gate), self._in(up)
        if g.shape != u.shape:
            raise BackendError(f"cuda {kernel}: gate {g.shape} vs up {u.shape}")
        y = self._empty(g.shape)
        if g.size:
            self._launch(kernel, self._ew_grid(g.size), (_EW_THREADS, 1, 1),
                         g.ptr, u.ptr, g.size, y.ptr)
        return y

    def geglu(self, gate, up) -> DevArray:
        return self._gated("geglu_f32", gate, up)

    def swiglu(self, gate, up) -> DevArray:
        return self._gated("swiglu_f32", gate, up)

    def softcap(self, x, cap: float) -> DevArray:
        x = self._in(x)
        y = self._empty(x.shape)
        if x.size:
            inv = float(np.float32(1.0) / np.float32(cap))
            self._launch("softcap_f32", self._ew_grid(x.size),
                         (_EW_THREADS, 1, 1), x.ptr, inv, float(np.float32(cap)), x.size,
                         y.ptr)
        return y

    def argmax(self, x) -> np.ndarray:
        """Row-wise argmax of x [n, m] (first maximal index; NaN never wins) -> int32 [n]."""
        x = self._in(x)
        m = x.shape[-1]
        out = self._empty((x.size // m,), np.int32)
        if out.size:
            self._launch("argmax_f32", (out.size, 1), (256, 1, 1),
                         x.ptr, m, out.ptr)
        return out.get()

    # -- KV and attention ------------------------------------------------------------------------
    def set_rows(self, cache: DevArray, cells, rows) -> None:
        cells = np.ascontiguousarray(cells, dtype=np.int32).reshape(-1)
        rows = self._in(rows)
        row = cache.shape[1]
        if rows.size != len(cells) * row:
            raise BackendError(f"set_rows: {rows.shape} rows for {len(cells)} cells of {row}")
        if len(cells) and (cells.min() < 0 or cells.max() >= cache.shape[0]):
            raise BackendError("set_rows: cell index out of range")
        if not len(cells):
            return
        kernel = {np.float16: "set_rows_f16", np.float32: "set_rows_f32"}[cache.dtype.type]
        c = self._idx(cells, np.int32)
        self._launch(kernel, self._ew_grid(rows.size), (_EW_THREADS, 1, 1),
                     cache.ptr, row, c.ptr, rows.ptr, rows.size)

    def attention(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale,
                  softcap=0.0) -> DevArray:
        q = self._in(q)
        n_q, n_head, d_k = q.shape
        n_kv = k_cache.shape[1] // d_k
        if d_k > 32 * _ATT_PER[-1] or v_cache.shape[1] != k_cache.shape[1]:
            raise BackendError(f"cuda attention: head size {d_k} (K) / V row {v_cache.shape[1]}"
                               f" not supported (head size <= 256, d_v == d_k)")
        if k_cache.dtype != v_cache.dtype or k_cache.dtype.type not in (np.float16, np.float32):
            raise BackendError(f"cuda attention: KV types {k_cache.dtype}/{v_cache.dtype}")
        if n_kv == 0 or n_head % n_kv or k_cache.shape[1] % d_k:
            raise BackendError(f"cuda attention: {n_head} heads vs K row {k_cache.shape[1]}")
        cells = np.ascontiguousarray(kv_cells, dtype=np.int32).reshape(-1)
        qs = np.ascontiguousarray(q_start, dtype=np.int64).reshape(-1)
        qe = np.ascontiguousarray(q_end, dtype=np.int64).reshape(-1)
        _check_lists(cells, qs, qe, n_q, k_cache.shape[0])
        out = self._empty((n_q, n_head, d_k))
        if n_q:
            kt = "f16" if k_cache.dtype == np.float16 else "f32"
            dc = self._idx(cells if len(cells) else np.zeros(1, np.int32), np.int32)
            dqs, dqe = self._idx(qs, np.int64), self._idx(qe, np.int64)
            per = next(p for p in _ATT_PER if 32 * p >= d_k)
            group = n_head // n_kv
            args = (dc.ptr, dqs.ptr, dqe.ptr, float(scale), float(softcap), out.ptr)
            if n_q >= self.attn_tiled_min_queries and group <= _ATT_TILED_WARPS:
                tile_q = _ATT_TILED_WARPS // group
                self._launch(f"attn_tiled_p{per}_{kt}", (n_kv, _cdiv(n_q, tile_q)),
                             (_ATT_TILED_WARPS * 32, 1, 1),
                             q.ptr, k_cache.ptr, v_cache.ptr, d_k, n_head, n_kv, n_q, tile_q,
                             *args)
            else:
                self._launch(f"attn_p{per}_{kt}", (n_head, n_q),
                             (_ATT_THREADS, 1, 1), q.ptr, k_cache.ptr, v_cache.ptr, d_k,
                             n_head, n_kv, *args)
        return out


def _dequantize(w: Weight) -> np.ndarray:
    """Host f32 copy of a weight whose type has no CUDA kernel (uploaded as F32)."""
    if w.type == GGMLType.F16:
        return w.raw.astype(np.float32)
    from ...quant import dequantize
    return dequantize(np.asarray(w.raw), w.type, w.shape)


def _check_lists(cells, qs, qe, n_q: int, n_cells: int) -> None:
    if qs.shape != (n_q,) or qe.shape != (n_q,):
        raise BackendError("attention: q_start/q_end must have one entry per query")
    if n_q == 0:
        return
    if len(cells) and (cells.min() < 0 or cells.max() >= n_cells):
        raise BackendError("attention: kv cell index out of range")
    if qs.min() < 0 or qe.max() > len(cells) or np.any(qe < qs):
        raise BackendError("attention: bad q_start/q_end ranges")
