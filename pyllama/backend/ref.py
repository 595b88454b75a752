"""RefBackend: the plain-numpy oracle for every op in base.OPS.

Obviously-correct first, fast never. Numerics follow llama.cpp's CPU backend where it is cheap to do
so (ggml/src/ggml-cpu/ops.cpp, vec.h):
- rms_norm: squares in f32, their sum in double (ggml_float), mean and 1/sqrt in f32, then x * scale
  and (a separate ggml_mul) * w, each rounded to f32;
- rope: ggml's rope cache: theta starts at (float)pos and is multiplied by theta_scale =
  base^(-2/n_rot) in f32 once per pair; cos/sin of freq_scale * theta (ext_factor 0, mscale 1);
- gelu (and geglu's GELU): ggml's GGML_GELU_FP16 table semantics: x <= -10 -> 0, x >= 10 -> x, else
  f16(gelu(f16(x))) (the formula in double here; ggml's f32 tanhf table differs in 234 of 63488
  entries by one f16 step, the CPU backend builds ggml's exact table);
- silu x / (1 + exp(-x)) in double, rounded once; softcap tanh(x * (1/c)) * c (ggml_scale by the
  reciprocal, as llama.cpp builds it; the product in f32, tanh in double).
- attention: llama.cpp's non-flash path step by step (docs/numerics.md): q rounded to f16 for an f16
  cache, scores by tinyBLAS lanes (8 FMA chains over d, ggml's hsum), ggml_v_expf, 8-block sums in
  double, p = e * (float)(1/sum) rounded to f16 for an f16 cache, p.v by 8 lanes over the cell list.
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


def rope_cache(pos: np.ndarray, n_rot: int, base: float, freq_scale: float, freq_factors=None,
               ext_factor: float = 0.0, attn_factor: float = 1.0, corr_dims=(0.0, 0.0)):
    """cos, sin [n, n_rot/2] f32 exactly as ggml_rope_cache_init + rope_yarn build them (f32
    theta recurrence, theta / freq_factor, the YaRN ramp when ext_factor != 0, times mscale)."""
    theta_scale = rope_theta_scale(base, n_rot)
    theta = np.asarray(pos, dtype=np.int64).astype(np.float32)
    fs, ext, c0, c1 = _F32(freq_scale), _F32(ext_factor), _F32(corr_dims[0]), _F32(corr_dims[1])
    mscale = _F32(attn_factor)
    if ext != 0:
        mscale = _F32(mscale * _F32(_F32(1) + _F32(0.1) * _F32(np.log(np.float64(_F32(1) / fs)))))
    cos = np.empty((theta.shape[0], n_rot // 2), dtype=np.float32)
    sin = np.empty_like(cos)
    for i in range(n_rot // 2):
        te = theta if freq_factors is None else (theta / _F32(freq_factors[i])).astype(np.float32)
        t = (fs * te).astype(np.float32)
        if ext != 0:
            y = _F32((_F32(i) - c0) / max(_F32(0.001), _F32(c1 - c0)))
            ramp = _F32(_F32(1) - min(_F32(1), max(_F32(0), y))) * ext
            t = (t * _F32(1 - ramp) + te * ramp).astype(np.float32)
        cos[:, i] = (np.cos(t.astype(np.float64)).astype(np.float32) * mscale)
        sin[:, i] = (np.sin(t.astype(np.float64)).astype(np.float32) * mscale)
        theta = theta * theta_scale
    return cos, sin


def _fma(a, b, c) -> np.ndarray:
    """f32 fused multiply-add (the exact product and sum in double, rounded once to f32)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64)
            + np.asarray(c, np.float64)).astype(np.float32)


def ggml_hsum8(v: np.ndarray) -> np.ndarray:
    """ggml's AVX hsum over the last axis (8): ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) in f32."""
    a = (v[..., 0:4] + v[..., 4:8]).astype(np.float32)
    b = (a[..., 0:2] + a[..., 2:4]).astype(np.float32)
    return (b[..., 0] + b[..., 1]).astype(np.float32)


def lane_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """tinyBLAS dot over the last axis: lane i % 8 of 8 f32 FMA chains, ggml_hsum8, then the
    K % 8 tail by FMA in order. a, b broadcast."""
    k = a.shape[-1]
    k8 = k - k % 8
    acc = np.zeros(np.broadcast_shapes(a.shape[:-1], b.shape[:-1]) + (8,), np.float32)
    for i in range(0, k8, 8):
        acc = _fma(a[..., i:i + 8], b[..., i:i + 8], acc)
    r = ggml_hsum8(acc)
    for i in range(k8, k):
        r = _fma(a[..., i], b[..., i], r)
    return r


def _hx(s: str) -> np.float32:
    return np.float32(float.fromhex(s))


def ggml_expf(x: np.ndarray) -> np.ndarray:
    """ggml_v_expf (vec.h, AVX2) elementwise in f32; exp(-inf) = 0, |n| > 126 handled as ggml."""
    x = np.asarray(x, np.float32)
    r = _hx("0x1.8p23")
    with np.errstate(invalid="ignore", over="ignore"):
        z = _fma(x, _hx("0x1.715476p+0"), r)
        n = (z - r).astype(np.float32)
        b = _fma(-n, _hx("0x1.7f7d1cp-20"), _fma(-n, _hx("0x1.62e4p-1"), x))
        e = (np.nan_to_num(z).view(np.int32).astype(np.int64) << 23) & 0xFFFFFFFF
        k = ((e + 0x3F800000) & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
        u = (b * b).astype(np.float32)
        j = _fma(_fma(_fma(_hx("0x1.0e4020p-7"), b, _hx("0x1.573e2ep-5")), u,
                      _fma(_hx("0x1.555e66p-3"), b, _hx("0x1.fffdb6p-2"))), u,
                 (_hx("0x1.ffffecp-1") * b).astype(np.float32))
        fast = _fma(j, k, k)
        big = np.abs(n) > 126
        if not big.any():
            return fast
        g = np.where(n <= 0, np.uint32(0x82000000), np.uint32(0)).astype(np.int64)
        s1 = ((g + 0x7F000000) & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
        s2 = ((e - g) & 0xFFFFFFFF).astype(np.uint32).view(np.float32)
        slow = (_fma(s2, j, s2) * s1).astype(np.float32)
        out = np.where(big, slow, fast)
        return np.where(np.abs(n) > 192, (s1 * s1).astype(np.float32), out).astype(np.float32)


def ggml_softmax_probs(s: np.ndarray, f16: bool, sinks=None) -> np.ndarray:
    """ggml_soft_max_f32 over the last axis of s [..., L] (scale applied): e = ggml_v_expf(s - max)
    in 8-blocks (padded with zeros), block sums (ggml_hsum8) added in double in order,
    p = e * (float)(1/sum) in f32, then rounded to f16 when V is f16. sinks [H] (s [H, L]):
    attention sinks as ggml_soft_max_add_sinks: max = max(max, sink), sum += expf(sink - max)."""
    L = s.shape[-1]
    m = s.max(axis=-1, keepdims=True)
    if sinks is not None:
        m = np.maximum(m, np.asarray(sinks, np.float32).reshape(m.shape))
    e = ggml_expf((s - m).astype(np.float32))
    pad = np.zeros(e.shape[:-1] + (-L % 8,), np.float32)
    blocks = ggml_hsum8(np.concatenate([e, pad], axis=-1).reshape(e.shape[:-1] + (-1, 8)))
    tot = np.zeros(blocks.shape[:-1], np.float64)
    for t in range(blocks.shape[-1]):
        tot = tot + blocks[..., t].astype(np.float64)
    if sinks is not None:
        d = (np.asarray(sinks, np.float32).reshape(m.shape) - m).astype(np.float32)[..., 0]
        tot = tot + np.exp(d.astype(np.float64)).astype(np.float32).astype(np.float64)
    p = (e * (1.0 / tot).astype(np.float32)[..., None]).astype(np.float32)
    return p.astype(np.float16).astype(np.float32) if f16 else p


def moe_top_k(p: np.ndarray, k: int) -> np.ndarray:
    """ggml_argsort_top_k: indices of the k largest of each row of p [n, n_expert], largest
    first (int32 [n, k])."""
    return np.ascontiguousarray(np.argsort(-p, axis=-1, kind="stable")[:, :k], dtype=np.int32)


def ggml_sigmoid(x: np.ndarray) -> np.ndarray:
    """ggml_sigmoid on the CPU (unary-ops.cpp op_sigmoid): 1.f / (1.f + expf(-x)) in f32, expf
    as libm's (the correctly rounded double exp, rounded to f32)."""
    x = np.asarray(x, np.float32)
    with np.errstate(over="ignore"):                      # expf(88+) = inf, as libm
        e = np.exp(-x.astype(np.float64)).astype(np.float32)
    one = np.float32(1.0)
    return (one / (one + e)).astype(np.float32)


def moe_group_mask(sel: np.ndarray, n_groups: int, n_group_used: int) -> np.ndarray:
    """build_moe_ffn's expert-group limit (DeepSeek V3 routing): sel [n, n_expert] split into
    n_groups consecutive groups; a group's score is the sum of its two largest (argsort_top_k 2,
    ggml_sum_rows: their f32 sum); the n_group_used best groups keep their values, the others
    become -inf (ggml_fill + ggml_set_rows)."""
    sel = np.asarray(sel, np.float32)
    n, e = sel.shape
    g = sel.reshape(n, n_groups, e // n_groups)
    top2 = np.sort(g, axis=-1)[..., ::-1][..., :2]
    scores = (top2[..., 0].astype(np.float64) + top2[..., 1]).astype(np.float32)   # [n, G]
    keep = moe_top_k(scores, n_group_used)                                       # [n, used]
    out = np.full_like(g, -np.inf)
    rows = np.arange(n)[:, None]
    out[rows, keep] = g[rows, keep]
    return out.reshape(n, e)


def moe_expert_weights(probs: np.ndarray, ids: np.ndarray, norm: bool, scale: float) -> np.ndarray:
    """build_moe_ffn's weights [n, k]: probs at ids; norm: divided by their sum (ggml_sum_rows:
    a double sum, clamped to >= 6.103515625e-5); scale (not 0 or 1): multiplied by it."""
    w = np.take_along_axis(probs, ids, axis=-1).astype(np.float32)
    if norm:
        s = np.zeros((w.shape[0], 1), np.float64)
        for j in range(w.shape[1]):               # ggml_vec_sum_f32: in slot order
            s = s + w[:, j:j + 1].astype(np.float64)
        s = s.astype(np.float32)
        w = (w / np.maximum(s, np.float32(6.103515625e-5))).astype(np.float32)
    if scale not in (0.0, 1.0):
        w = (w * np.float32(scale)).astype(np.float32)
    return w


def ggml_soft_max_rows(x: np.ndarray) -> np.ndarray:
    """ggml_compute_forward_soft_max_f32 (no mask, scale 1) over the last axis of x [..., n]:
    e = ggml_v_expf(x - max) for the 8-blocks (each block's hsum added to a double sum), libm
    expf for the n % 8 tail (added one by one), y = e * (float)(1 / sum)."""
    x = np.asarray(x, np.float32)
    n = x.shape[-1]
    nb = n - n % 8
    d = (x - x.max(axis=-1, keepdims=True)).astype(np.float32)
    e = np.empty_like(d)
    e[..., :nb] = ggml_expf(d[..., :nb])
    e[..., nb:] = np.exp(d[..., nb:].astype(np.float64)).astype(np.float32)
    tot = np.zeros(x.shape[:-1], np.float64)
    if nb:
        blocks = ggml_hsum8(e[..., :nb].reshape(e.shape[:-1] + (nb // 8, 8)))
        for t in range(blocks.shape[-1]):
            tot = tot + blocks[..., t].astype(np.float64)
    for i in range(nb, n):
        tot = tot + e[..., i].astype(np.float64)
    return (e * (1.0 / tot).astype(np.float32)[..., None]).astype(np.float32)


def lane_pv(p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """sum_j p[..., j] v[j, :] as tinyBLAS computes mul_mat(v^T, p): lane j % 8 of 8 FMA chains
    over j in order, then ggml_hsum8. p [h, L], v [L, h, d] -> [h, d]. The 8 lanes advance
    together (cells padded to a multiple of 8 with p = v = 0, which leaves every chain as is)."""
    L = p.shape[-1]
    pad = -L % 8
    if pad:
        p = np.concatenate([p, np.zeros(p.shape[:-1] + (pad,), np.float32)], axis=-1)
        v = np.concatenate([v, np.zeros((pad,) + v.shape[1:], np.float32)], axis=0)
    acc = np.zeros((p.shape[0], v.shape[2], 8), np.float32)
    for t in range(0, L + pad, 8):
        acc = _fma(p[:, None, t:t + 8], v[t:t + 8].transpose(1, 2, 0), acc)
    return ggml_hsum8(acc)


class RefBackend(Backend):
    name = "ref"
    kv_q_conv = False     # bf16/q8_0/q4_0 K: q to K's vec_dot_type (llama.cpp's FA arithmetic)

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
        x = _f32(x)
        h = x.astype(np.float16).astype(np.float64)
        inner = float(SQRT_2_OVER_PI) * h * (1.0 + float(GELU_COEF_A) * h * h)
        # 0.5 h (1 + tanh(u)) == h / (1 + exp(-2u)); the latter has no cancellation for h << 0
        with np.errstate(over="ignore", invalid="ignore"):
            t = (h / (1.0 + np.exp(-2.0 * inner))).astype(np.float32).astype(np.float16)
        y = np.where(x >= 10, x, t.astype(np.float32))
        return np.where(x <= -10, _F32(0), y).astype(np.float32)

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
    def rope(self, x, pos, n_rot, base, freq_scale, mode, freq_factors=None, ext_factor=0.0,
             attn_factor=1.0, corr_dims=(0.0, 0.0)):
        x = _f32(x)
        cos, sin = rope_cache(pos, n_rot, base, freq_scale, freq_factors, ext_factor, attn_factor,
                              corr_dims)
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
        if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (np.float16, np.float32):
            return _attention_kvq(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap,
                                  self.kv_q_conv)
        return attention_lanes(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap)


def attention_lanes(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap=0.0,
                    sinks=None):
    """llama.cpp's non-flash attention over f16 / f32 caches (module docstring), sinks [n_head]
    optional (ggml_soft_max_add_sinks)."""
    n_q, n_head, d_k = q.shape
    n_kv = k_cache.shape[1] // d_k
    d_v = v_cache.shape[1] // n_kv
    group = n_head // n_kv
    f16 = k_cache.dtype == np.float16
    qq = _f32(q).astype(np.float16).astype(np.float32) if f16 else _f32(q)
    out = np.zeros((n_q, n_head, d_v), dtype=np.float32)
    for i in range(n_q):
        cells = np.asarray(kv_cells[q_start[i]:q_end[i]], dtype=np.int64)
        if len(cells) == 0:
            continue
        k = np.repeat(k_cache[cells].astype(np.float32).reshape(-1, n_kv, d_k), group, axis=1)
        v = np.repeat(v_cache[cells].astype(np.float32).reshape(-1, n_kv, d_v), group, axis=1)
        s = (_F32(scale) * lane_dot(qq[i][:, None, :], k.transpose(1, 0, 2))).astype(np.float32)
        if softcap > 0:
            c = _F32(softcap)
            s = (np.tanh((s * (_F32(1.0) / c)).astype(np.float32)) * c).astype(np.float32)
        out[i] = lane_pv(ggml_softmax_probs(s, f16, sinks), v)
    return out


def _attention_kvq(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap, qconv=False):
    """Attention over bf16 / q8_0 / q4_0 (or mixed-type) caches: K and V rows dequantized
    exactly, q as is or (qconv) converted to K's vec_dot_type as llama.cpp's flash-attention path
    does (_q_for_k); scores, softmax and p.v in float64."""
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
        qi = _q_for_k(q[i], kt) if qconv else np.asarray(q[i], dtype=np.float32)
        s = float(scale) * np.einsum("lhd,hd->hl", k, qi.astype(np.float64))
        if softcap > 0:
            s = np.tanh(s / float(softcap)) * float(softcap)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[i] = np.einsum("hl,lhd->hd", p, v) / p.sum(axis=1)[:, None]
    return out


def _q_for_k(q: np.ndarray, kt: str) -> np.ndarray:
    """q [n_head, d_k] as llama.cpp's flash-attention path pairs it with a K cache of type kt
    (the K type's vec_dot_type): q8_0 and q4_0 K -> q quantized to q8_0 (AVX2 quantize_row_q8_0),
    bf16 K -> q rounded to bf16; f16/f32 K -> q as is."""
    q = np.asarray(q, dtype=np.float32)
    if kt in ("q8_0", "q4_0"):
        qs, d = quantize_q8_0_rows(q, simd=True)
        return (qs.astype(np.float32) * d[..., None]).reshape(q.shape)
    if kt == "bf16":
        return (f32_to_bf16(q).astype(np.uint32) << 16).view(np.float32)
    return q
