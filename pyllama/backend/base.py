"""The backend op list: everything architecture code can ask a backend to compute.

All activations are float32 numpy arrays in numpy order ([n_tokens, n_embd] etc.). Weights are
`Weight` objects made by `Backend.weight(tensor_info)`. KV caches are arrays the backend allocates
(`alloc_kv`) and the KV bookkeeping (pyllama/kv) indexes by cell.

Batch-invariance contract (docs/architecture.md), binding on every backend:
- a token's output row is computed by the same code with the same reduction order whatever the
  number of rows in the call; threads split rows/heads/tokens, never one reduction;
- `attention` reads, for query i, exactly the cells kv_cells[q_start[i]:q_end[i]] in that order
  (the caller lists them in position order), reads K/V as stored (f16 rounding included),
  and touches no other cell.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from ..gguf import GGMLType
from ..quant import BLOCK_LAYOUT, dequantize, f32_to_bf16, quantize, quantize_q8_0_rows

# op names, the single list every backend implements (tests iterate over it)
OPS = (
    "matmul", "get_rows", "rms_norm", "rope", "attention", "set_rows",
    "add", "mul", "scale", "gelu", "silu", "geglu", "swiglu", "softcap",
    "softmax", "mul_mat_id", "div", "attention_sinks", "swiglu_oai",
)

ROPE_NORM = 0   # pairs (2i, 2i+1)   (llama)
ROPE_NEOX = 2   # pairs (i, i+n_rot/2) (qwen2, gemma)

# KV cache types (-ctk/-ctv) -> numpy dtype of one buffer item; block types hold one 32-element
# block per item (buffer [n_cells, row / 32]), bf16 one uint16 per element.
KV_TYPES = {
    "f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
    "bf16": np.dtype([("bf16", "<u2")]),
    "q8_0": BLOCK_LAYOUT[GGMLType.Q8_0].dtype, "q4_0": BLOCK_LAYOUT[GGMLType.Q4_0].dtype,
}
KV_BLOCK = {"f32": 1, "f16": 1, "bf16": 1, "q8_0": 32, "q4_0": 32}


def kv_type(cache) -> str:
    """The KV type name of a buffer allocated by alloc_kv."""
    for name, dt in KV_TYPES.items():
        if cache.dtype == dt:
            return name
    raise ValueError(f"not a KV cache dtype: {cache.dtype}")


def kv_encode(rows: np.ndarray, name: str) -> np.ndarray:
    """f32 rows [n, row] -> items [n, row / block] of KV type `name`, as llama.cpp's CPU backend
    writes them (set_rows uses the type's from_float: q8_0 the x86 AVX2 quantize_row_q8_0,
    id = 127/amax, ties to even; q4_0 quantize_row_q4_0_ref; bf16 round to nearest even)."""
    rows = np.ascontiguousarray(rows, dtype=np.float32)
    n, row = rows.shape
    dt = KV_TYPES[name]
    out = np.zeros((n, row // KV_BLOCK[name]), dtype=dt)
    if name == "q8_0":
        qs, d = quantize_q8_0_rows(rows, simd=True)
        out["qs"], out["d"] = qs, d
    elif name == "q4_0":
        out[...] = quantize(rows, GGMLType.Q4_0).view(dt).reshape(out.shape)
    elif name == "bf16":
        out["bf16"] = f32_to_bf16(rows)
    else:
        with np.errstate(over="ignore"):                  # |x| > 65504 -> inf, as in ggml
            out[...] = rows.astype(dt)
    return out


def kv_decode(items: np.ndarray, name: str) -> np.ndarray:
    """KV items [n, m] of type `name` -> f32 rows [n, m * block] (exact: dequantize_row_*)."""
    if name in ("f32", "f16"):
        return items.astype(np.float32)
    raw = np.ascontiguousarray(items).view(np.uint8).reshape(items.shape[0], -1)
    return dequantize(raw, GGMLType[name.upper()]).reshape(items.shape[0], -1)


def hadamard(x: np.ndarray, n: int) -> np.ndarray:
    """x [..., m * n] f32 with every n-element chunk multiplied by the orthonormal Walsh-Hadamard
    matrix H_n (Sylvester order, H_n @ H_n = I), exactly as ggml's CPU FWHT (the mul_mat that
    llama.cpp tags GGML_HINT_SRC0_IS_HADAMARD): y = x * (1/sqrtf(n)), then butterflies
    (u + v, u - v) over half-lengths 1, 2, 4, ..., n/2 in that order, all in f32."""
    x = np.asarray(x, dtype=np.float32)
    y = (x.reshape(-1, n) * (np.float32(1.0) / np.sqrt(np.float32(n)))).astype(np.float32)
    out = np.empty_like(y)
    h = 1
    while h < n:
        a = y.reshape(-1, n // (2 * h), 2, h)
        o = out.reshape(a.shape)
        np.add(a[:, :, 0], a[:, :, 1], out=o[:, :, 0])
        np.subtract(a[:, :, 0], a[:, :, 1], out=o[:, :, 1])
        y, out = out, y
        h *= 2
    return y.reshape(x.shape)


@dataclass
class Weight:
    """A weight matrix [rows, cols] (numpy order) or vector, as stored in the GGUF.

    `raw` is the zero-copy view from the reader: typed for F32/F16 (BF16 as uint16), uint8 rows
    of packed blocks for quantized types. Backends may attach their own device copy in `dev`.
    """
    name: str
    type: GGMLType
    shape: tuple[int, ...]
    raw: np.ndarray
    dev: object = None


def expert_weight(w: Weight, e: int) -> Weight:
    """Expert e of a stacked expert tensor w [n_expert, rows, cols] as a 2-D Weight (a view of
    w.raw; made once per expert and kept on w)."""
    views = w.__dict__.get("_experts")
    if views is None:
        views = w.__dict__["_experts"] = [None] * w.shape[0]
    if views[e] is None:
        views[e] = Weight(f"{w.name}[{e}]", w.type, tuple(w.shape[1:]), w.raw[e])
    return views[e]


def as_matrix(w: Weight) -> Weight:
    """A 1-D weight [cols] as the one-row matrix [1, cols] ggml_mul_mat sees (kept on w)."""
    m = w.__dict__.get("_matrix")
    if m is None:
        m = w.__dict__["_matrix"] = Weight(w.name, w.type, (1,) + tuple(w.shape),
                                           w.raw.reshape(1, -1))
    return m


class Backend(ABC):
    name = "base"

    def __init__(self, n_threads: int | None = None):
        self.n_threads = n_threads

    def set_threads(self, n_threads: int | None) -> None:
        """Threads for the CPU kernels (None: the library default)."""
        self.n_threads = n_threads

    def supports_type(self, wtype) -> bool:
        """Whether this backend computes with tensors of ggml type wtype (the numpy oracle's
        matmul types: F32/F16/BF16, legacy, K and i-quants, MXFP4)."""
        from .ref_matmul import SUPPORTED
        return wtype in SUPPORTED

    # -- memory -----------------------------------------------------------------------------
    def weight(self, info) -> Weight:
        """Wrap a gguf TensorInfo (reader view, no copy)."""
        return Weight(info.name, info.type, info.shape, info.data)

    def vec(self, w: Weight) -> np.ndarray:
        """A 1-D F32 weight (norm scale, bias) in the form this backend's ops take."""
        return w.raw

    def alloc_kv(self, n_cells: int, row: int, dtype: str) -> np.ndarray:
        """A K or V buffer for one layer: [n_cells, row] for 'f32', 'f16', 'bf16' (a one-field
        uint16 record), [n_cells, row / 32] blocks for 'q8_0', 'q4_0' (KV_TYPES)."""
        if row % KV_BLOCK[dtype]:
            raise ValueError(f"KV row of {row} is not a multiple of the {dtype} block")
        return np.zeros((n_cells, row // KV_BLOCK[dtype]), dtype=KV_TYPES[dtype])

    # -- llama.cpp's one-token kernels (Context(numerics="llama.cpp"), backend/compat.py) ----
    def matmul_vec(self, w: Weight, x: np.ndarray) -> np.ndarray:
        """Every row of x [n, cols] by llama.cpp's one-token kernel of w.type (Q2_K ... Q6_K
        vec_dot, Q4_K gemv). Here the numpy oracle; backends override it with native code."""
        from . import ref_compat
        return ref_compat.matvec_k(w.type, w.raw, x)

    def attention_vec(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale,
                      softcap=0.0) -> np.ndarray:
        """attention() for one query over f16 caches with ggml_vec_dot_f16 (q.k and p.v), as
        llama.cpp computes a one-token batch. Here the numpy oracle."""
        from . import ref_compat
        return ref_compat.attention_vec(q, k_cache, v_cache, kv_cells, q_start, q_end, scale,
                                        softcap)

    def attention_fa(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale,
                     softcap=0.0, view=None) -> np.ndarray:
        """attention() with llama.cpp's CPU flash-attention arithmetic: f16 (or, from 64 queries,
        f32) caches tiled from 64 queries, one_chunk below, the split-KV path for one query over a
        view of >= 512 cells (view = (base cell, n_kv), chunks by n_threads); q8_0/q4_0 K (or f16
        K with a q8_0/q4_0 V) one_chunk for every ubatch. Here the numpy oracle."""
        from . import ref_compat
        return ref_compat.attention_fa(q, k_cache, v_cache, kv_cells, q_start, q_end, scale,
                                       softcap, view, self.n_threads or 1)

    # -- ops --------------------------------------------------------------------------------
    def hadamard(self, x: np.ndarray, n: int) -> np.ndarray:
        """`hadamard(x, n)`: the K/V rotation of quantized caches (pyllama/kv attn_rot)."""
        return hadamard(x, n)

    @abstractmethod
    def matmul(self, w: Weight, x: np.ndarray) -> np.ndarray:
        """y[n, rows] = x[n, cols] @ W[rows, cols]^T. Quantized W: activations are quantized per
        row (q8 blocks) as llama.cpp's vec_dot does for the weight type."""

    def matmul_many(self, ws, x: np.ndarray) -> list:
        """[matmul(w, x) for w in ws]: several weights on the same activations (q/k/v,
        gate/up). A backend may fuse them (CpuBackend: one native call); results are those
        of separate matmuls, bit for bit."""
        return [self.matmul(w, x) for w in ws]

    @abstractmethod
    def get_rows(self, w: Weight, ids: np.ndarray) -> np.ndarray:
        """Dequantized rows W[ids] -> [len(ids), cols] float32."""

    @abstractmethod
    def rms_norm(self, x: np.ndarray, w: np.ndarray | None, eps: float) -> np.ndarray:
        """Over the last axis: x / sqrt(mean(x^2) + eps) * w. x [..., d], w [d] float32 or None."""

    @abstractmethod
    def rope(self, x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, freq_scale: float,
             mode: int, freq_factors: np.ndarray | None = None, ext_factor: float = 0.0,
             attn_factor: float = 1.0, corr_dims: tuple[float, float] = (0.0, 0.0)) -> np.ndarray:
        """Rotary embedding of x [n, n_head, head_dim] at positions pos [n] (int32); the first
        n_rot dims rotate, mode ROPE_NORM or ROPE_NEOX; ggml_rope_ext: theta_e = pos *
        base^(-2i/n_rot) / freq_factors[i] (f32 [n_rot/2], Llama 3 / LongRoPE), theta = freq_scale
        * theta_e, mixed with theta_e by the YaRN ramp over corr_dims when ext_factor != 0 (then
        mscale = attn_factor * (1 + 0.1 ln(1/freq_scale)), else attn_factor); cos/sin * mscale."""

    @abstractmethod
    def attention(self, q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
                  kv_cells: np.ndarray, q_start: np.ndarray, q_end: np.ndarray,
                  scale: float, softcap: float = 0.0) -> np.ndarray:
        """q [n_q, n_head, d_k] f32; k_cache [n_cells, n_head_kv * d_k], v_cache
        [n_cells, n_head_kv * d_v] (any KV_TYPES; block types hold row / 32 items); kv_cells int32 [L]; query i attends to cells
        kv_cells[q_start[i]:q_end[i]] (position order). Head h uses kv head h // (n_head /
        n_head_kv). s = scale * q.k; if softcap > 0: s = softcap * tanh(s / softcap); softmax
        over the listed cells; returns [n_q, n_head, d_v] f32. A query with an empty list -> 0."""

    @abstractmethod
    def set_rows(self, cache: np.ndarray, cells: np.ndarray, rows: np.ndarray) -> None:
        """cache[cells[i]] = rows[i] (rows [n, row] f32), converted (rounded / quantized) to the
        cache type exactly as kv_encode does."""

    def add(self, a, b):
        return np.add(a, b, dtype=np.float32)

    def mul(self, a, b):
        return np.multiply(a, b, dtype=np.float32)

    def div(self, a, b):
        return np.divide(a, b, dtype=np.float32)

    def scale(self, x, s: float):
        return np.multiply(x, np.float32(s), dtype=np.float32)

    @abstractmethod
    def gelu(self, x: np.ndarray) -> np.ndarray:
        """tanh-approximation GELU (ggml_gelu)."""

    @abstractmethod
    def silu(self, x: np.ndarray) -> np.ndarray:
        ...

    def geglu(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        return self.mul(self.gelu(gate), up)

    def swiglu(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        return self.mul(self.silu(gate), up)

    def softcap(self, x: np.ndarray, cap: float) -> np.ndarray:
        c = np.float32(cap)
        return (np.tanh(x / c) * c).astype(np.float32)

    def attention_sinks(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, sinks,
                        one_token: bool = False) -> np.ndarray:
        """attention() with attention sinks sinks [n_head] f32 (gpt-oss): each head's softmax
        also counts exp(sink) (ggml_soft_max_add_sinks), f16 / f32 caches. llama.cpp's non-flash
        arithmetic (one_token: a one-query ubatch by ggml_vec_dot_f16, as llama.cpp); the numpy
        reference for every backend until the native kernels take sinks."""
        from . import ref, ref_compat
        if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (np.float16, np.float32):
            raise ValueError("attention sinks need f16 or f32 K/V caches")
        sinks = np.asarray(sinks, np.float32).reshape(-1, 1)
        if one_token and q.shape[0] == 1 and k_cache.dtype == np.float16:
            return ref_compat.attention_vec(q, k_cache, v_cache, kv_cells, q_start, q_end, scale,
                                            0.0, sinks)
        return ref.attention_lanes(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, 0.0,
                                   sinks)

    def swiglu_oai(self, gate: np.ndarray, up: np.ndarray, alpha: float,
                   limit: float) -> np.ndarray:
        """ggml_swiglu_oai (gpt-oss): x = min(gate, limit), y = clamp(up, -limit, limit),
        x / (1 + expf(alpha * -x)) * (y + 1), in f32 (expf: libm's)."""
        a, lim = np.float32(alpha), np.float32(limit)
        x = np.minimum(np.asarray(gate, np.float32), lim)
        y = np.clip(np.asarray(up, np.float32), -lim, lim)
        e = np.exp((a * -x).astype(np.float32).astype(np.float64)).astype(np.float32)
        glu = (x / (np.float32(1) + e)).astype(np.float32)
        return (glu * (y + np.float32(1))).astype(np.float32)

    def softmax(self, x: np.ndarray) -> np.ndarray:
        """ggml_soft_max over the last axis of x [..., n] f32 (the MoE router): e = exp(x - max)
        (ggml_v_expf 8 at a time, libm expf for the n % 8 tail), sum in double, e * (float)(1/sum)."""
        from .ref import ggml_soft_max_rows
        return ggml_soft_max_rows(x)

    def matvec_float(self, w: Weight, x: np.ndarray) -> np.ndarray:
        """y [n, rows] = x [n, k] @ W^T for an F32/F16/BF16 weight by ggml_vec_dot_<type> per
        element (x rounded to f16 / bf16 first): llama.cpp's arithmetic for one row and for
        weights tinyBLAS refuses. Numpy oracle (ref_compat.matvec_float), in row chunks."""
        from .ref_compat import matvec_float
        x = np.asarray(x, np.float32)
        raw = np.asarray(w.raw).reshape(w.shape[-2], -1)
        step = max(1, (1 << 22) // max(1, raw.shape[0] * 32))      # bounded scratch
        return np.concatenate([matvec_float(w.type, raw, x[i:i + step])
                               for i in range(0, x.shape[0], step)])

    def moe_route(self, logits: np.ndarray, k: int, norm: bool,
                  scale: float) -> tuple[np.ndarray, np.ndarray]:
        """build_moe_ffn's softmax gating: probs = softmax(logits [n, n_expert]); ids int32 [n, k]
        = the k largest probs, largest first, ties to the lower index (ggml_argsort_top_k);
        weights f32 [n, k] = probs at ids, divided by their sum when norm (ggml_sum_rows: a
        double sum in slot order, clamped to >= 6.103515625e-5), times scale unless it is 0 or 1.
        The numpy oracle; the CPU backend runs it natively with the same bits."""
        from .ref import moe_expert_weights, moe_top_k
        probs = self.softmax(logits)
        ids = moe_top_k(probs, k)
        return ids, moe_expert_weights(probs, ids, norm, scale)

    def moe_swiglu(self, gate: Weight, up: Weight, down: Weight, x: np.ndarray,
                   ids: np.ndarray, wts: np.ndarray, one_token: bool = False):
        """build_moe_ffn's SwiGLU experts fused (x [n, n_embd], ids / wts [n, n_used] ->
        [n, n_embd], the bits of Graph.moe_swiglu's separate ops; one_token: the llama.cpp
        numerics), or None: the graph runs those ops. A backend may fuse them; this one does
        not."""
        return None

    def moe_routed_swiglu(self, router: Weight, gate: Weight, up: Weight, down: Weight,
                          x: np.ndarray, k: int, norm: bool, scale: float):
        """moe_swiglu after moe_route(matmul(router, x), k, norm, scale) fused (numerics
        "invariant"; the same bits), or None: the graph runs the ops. Not here."""
        return None

    def mul_mat_id(self, w: Weight, x: np.ndarray, ids: np.ndarray,
                   one_token: bool = False) -> np.ndarray:
        """ggml_mul_mat_id: w [n_expert, rows, cols] (the experts), x [n, m, cols] (m = 1: the same
        row for every slot), ids int32 [n, k] -> y [n, k, rows], y[t, j] = W[ids[t, j]] @ x[t, j % m].
        The rows that select an expert are grouped and multiplied by that expert's slice in one
        matmul call, so a batch reads each selected expert once and nothing else. one_token:
        llama.cpp's kernel choice per expert (compat.mmid_uses_vec). A negative id skips its slot
        (left unset: the CPU backend fills those with its fused kernel)."""
        from .compat import mmid_uses_vec
        n, k = ids.shape
        m = x.shape[1]
        out = np.empty((n, k, w.shape[1]), dtype=np.float32)
        flat = ids.reshape(-1)
        order = np.argsort(flat, kind="stable")
        experts, starts = np.unique(flat[order], return_index=True)
        ends = np.append(starts[1:], len(flat))
        for e, a, b in zip(experts, starts, ends):
            if e < 0:
                continue
            sel = order[a:b]                          # flat slot indices t * k + j, ascending
            t, j = sel // k, sel % k
            xe = np.ascontiguousarray(x[t, j % m])
            we = expert_weight(w, int(e))
            vec = one_token and mmid_uses_vec(we.type, we.shape[0], len(sel))
            if vec and we.type in (GGMLType.F32, GGMLType.F16, GGMLType.BF16):
                out[t, j] = self.matvec_float(we, xe)
            else:
                out[t, j] = self.matmul_vec(we, xe) if vec else self.matmul(we, xe)
        return out
