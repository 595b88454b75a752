"""RefBackend: the plain-numpy oracle for every op in base.OPS.

Obviously-correct first, fast never. Numerics follow llama.cpp's CPU backend where it is cheap to do
so (ggml/src/ggml-cpu/ops.cpp, vec.h):
- rms_norm: squares in f32, their sum in double (ggml_float), mean and 1/sqrt in f32, then x * scale
  and (a separate ggml_mul) * w, each rounded to f32;
- rope: ggml's rope cache: theta starts at (float)pos and is multiplied by theta_scale =
  base^(-2/n_rot) in f32 once per pair; cos/sin of freq_scale * theta (ext_factor 0, mscale 1);
- gelu: the tanh formula with ggml's constants, as x * sigmoid(2u), in double, rounded once (ggml's
  CPU build looks GELU up in an f16 table indexed by f16(x); we do not, so values differ from
  llama.cpp by up to the f16 step of x);
- silu x / (1 + exp(-x)) in double, rounded once; softcap tanh(x * (1/c)) * c (ggml_scale by the
  reciprocal, as llama.cpp builds it; the product in f32, tanh in double).
Attention works in double and rounds the result to f32.
"""
from __future__ import annotations

import numpy as np

from ..quant import f32_to_bf16, quantize_q8_0_rows
from .base import KV_BLOCK, ROPE_NEOX, ROPE_NORM, Backend, Weight, kv_decode, kv_encode, kv_type

GELU_COEF_A = np.float32(0.044715)
SQRT_2_OVER_PI = np.float32(0.79788456080286535587989211986876)

_F32 = np.float32


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def rope_theta_scale(base: float, n_rot: int) -> np.float32:
    """ggml's theta_scale = powf(freq_base, -2.0f/n_dims), correctly rounded."""
    return _F32(np.float64(_F32(base)) ** np.float64(_F32(-2.0) / _F32(n_rot)))


def rope_cache(pos: np.ndarray, n_rot: int, base: float, freq_scale: float):
    """cos, sin [n, n_rot/2] f32 exactly as ggml_rope_cache_init builds them (f32 recurrence)."""
    theta_scale = rope_theta_scale(base, n_rot)
    theta = np.asarray(pos, dtype=np.int64).astype(np.float32)
    fs = _F32(freq_scale)
    cos = np.empty((theta.shape[0], n_rot // 2), dtype=np.float32)
    sin = np.empty_like(cos)
    for i in range(n_rot // 2):
        t = (fs * theta).astype(np.float64)
        cos[:, i] = np.cos(t)
        sin[:, i] = np.sin(t)
        theta = theta * theta_scale
    return cos, sin


def softmax_attend(s: np.ndarray, v: np.ndarray) -> np.ndarray:
    """s [h, L] scores, v [L, h, d] -> [h, d], all float64."""
    p = np.exp(s - s.max(axis=1, keepdims=True))
    return np.einsum("hl,lhd->hd", p, v) / p.sum(axis=1)[:, None]


class RefBackend(Backend):
    name = "ref"

    # -- weights ---------------------------------------------------------------------------
    def matmul(self, w: Weight, x: np.ndarray) -> np.ndarray:
        from .ref_matmul import matmul_ref
        return matmul_ref(w.type, w.raw, _f32(x))

    def get_rows(self, w: Weight, ids: np.ndarray) -> np.ndarray:
        from .ref_matmul import get_rows_ref
        return get_rows_ref(w.type, w.raw, np.asarray(ids))

    # -- elementwise / normalisation -------------------------------------------------------
    def rms_norm(self, x, w, eps):
        x = _f32(x)
        ssq = (x * x).astype(np.float64).sum(axis=-1, keepdims=True)
        mean = (ssq / x.shape[-1]).astype(np.float32)
        scale = _F32(1.0) / np.sqrt(mean + _F32(eps))
        y = x * scale
        return y if w is None else y * _f32(w)

    def gelu(self, x):
        x = _f32(x).astype(np.float64)
        inner = float(SQRT_2_OVER_PI) * x * (1.0 + float(GELU_COEF_A) * x * x)
        # 0.5 x (1 + tanh(u)) == x / (1 + exp(-2u)); the latter has no cancellation for x << 0
        with np.errstate(over="ignore", invalid="ignore"):
            return (x / (1.0 + np.exp(-2.0 * inner))).astype(np.float32)

    def silu(self, x):
        x = _f32(x).astype(np.float64)
        with np.errstate(over="ignore"):
            return (x / (1.0 + np.exp(-x))).astype(np.float32)

    def softcap(self, x, cap):
        x = _f32(x)
        c = _F32(cap)
        t = np.tanh((x * (_F32(1.0) / c)).astype(np.float64)).astype(np.float32)
        return t * c

    # -- rope ------------------------------------------------------------------------------
    def rope(self, x, pos, n_rot, base, freq_scale, mode):
        x = _f32(x)
        cos, sin = rope_cache(pos, n_rot, base, freq_scale)
        cos, sin = cos[:, None, :], sin[:, None, :]        # [n, 1, n_rot/2]
        out = x.copy()
        if mode == ROPE_NEOX:
            x0, x1 = x[..., : n_rot // 2], x[..., n_rot // 2: n_rot]
            out[..., : n_rot // 2] = x0 * cos - x1 * sin
            out[..., n_rot // 2: n_rot] = x0 * sin + x1 * cos
        elif mode == ROPE_NORM:
            x0, x1 = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
            out[..., 0:n_rot:2] = x0 * cos - x1 * sin
            out[..., 1:n_rot:2] = x0 * sin + x1 * cos
        else:
            raise ValueError(f"unsupported rope mode {mode}")
        return out

    # -- KV --------------------------------------------------------------------------------
    def set_rows(self, cache, cells, rows):
        name = kv_type(cache)
        if name not in ("f16", "f32"):                     # bf16 / block types
            rows = np.asarray(rows, dtype=np.float32).reshape(len(cells), -1)
            cache[np.asarray(cells, dtype=np.int64)] = kv_encode(rows, name)
            return
        rows = np.asarray(rows).reshape(len(cells), cache.shape[1])
        with np.errstate(over="ignore"):                  # |x| > 65504 -> inf, as in ggml
            cache[np.asarray(cells, dtype=np.int64)] = rows.astype(cache.dtype)

    def attention(self, q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap=0.0):
        n_q, n_head, d_k = q.shape
        kt, vt = kv_type(k_cache), kv_type(v_cache)
        n_kv = k_cache.shape[1] * KV_BLOCK[kt] // d_k
        d_v = v_cache.shape[1] * KV_BLOCK[vt] // n_kv
        group = n_head // n_kv
        out = np.zeros((n_q, n_head, d_v), dtype=np.float32)
        for i in range(n_q):
            cells = np.asarray(kv_cells[q_start[i]:q_end[i]], dtype=np.int64)
            if len(cells) == 0:
                continue
            k = np.repeat(kv_decode(k_cache[cells], kt).astype(np.float64).reshape(-1, n_kv, d_k),
                          group, axis=1)
            v = np.repeat(kv_decode(v_cache[cells], vt).astype(np.float64).reshape(-1, n_kv, d_v),
                          group, axis=1)
            s = float(scale) * np.einsum("lhd,hd->hl", k, _q_for_k(q[i], kt).astype(np.float64))
            if softcap > 0:
                s = np.tanh(s / float(softcap)) * float(softcap)
            out[i] = softmax_attend(s, v)
        return out


def _q_for_k(q: np.ndarray, kt: str) -> np.ndarray:
    """q [n_head, d_k] as llama.cpp's flash-attention path pairs it with a K cache of type kt
    (the K type's vec_dot_type): q8_0 and q4_0 K -> q quantized to q8_0 (AVX2 quantize_row_q8_0),
    bf16 K -> q rounded to bf16; f16/f32 K -> q as is (our f16 kernels do not round q)."""
    q = np.asarray(q, dtype=np.float32)
    if kt in ("q8_0", "q4_0"):
        qs, d = quantize_q8_0_rows(q, simd=True)
        return (qs.astype(np.float32) * d[..., None]).reshape(q.shape)
    if kt == "bf16":
        return (f32_to_bf16(q).astype(np.uint32) << 16).view(np.float32)
    return q
