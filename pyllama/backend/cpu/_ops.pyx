# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Non-matmul CPU ops: rms_norm (optionally fused with the weight), rope, GELU/SiLU/softcap and the
gated GELU/SiLU products. Threads split rows/tokens/chunks; every reduction runs in one thread in a
fixed order, so a row's result does not depend on the batch (docs/architecture.md).

Numerics follow ggml's CPU ops (see pyllama/backend/ref.py for the oracle and the notes).
"""
import numpy as np

from cython.parallel cimport prange
from libc.stdint cimport int64_t, uint16_t
from libc.string cimport memcpy
from libc.math cimport cosf, fmaxf, fminf, logf, sinf, sqrtf, tanhf

cdef extern from "omp_shim.h" nogil:
    int pyl_omp_max_threads()

cdef Py_ssize_t CHUNK = 2048      # elementwise work unit (elements)


def max_threads():
    return pyl_omp_max_threads()


# -- rms_norm ------------------------------------------------------------------------------------
cdef extern from *:
    """
    #include "pyl_vmath.h"
    /* sum of (double)(x[i]*x[i]) (squares rounded to f32, as ggml's rms_norm); with AVX2 in 8
       double lanes (two 4-lane accumulators) then a fixed tree and the tail in order, else
       sequentially. Fixed order for a given d. */
    static inline double pyl_sumsq(const float *x, int64_t d) {
        double s = 0.0;
        int64_t i = 0;
    #if PYL_VM_SIMD
        __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
        for (; i + 8 <= d; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            __m256 q = _mm256_mul_ps(v, v);
            a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(q)));
            a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(q, 1)));
        }
        a0 = _mm256_add_pd(a0, a1);
        __m128d h = _mm_add_pd(_mm256_castpd256_pd128(a0), _mm256_extractf128_pd(a0, 1));
        s = _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
    #endif
        for (; i < d; i++) {
            float v = x[i] * x[i];
            s += (double)v;
        }
        return s;
    }
    """
    double pyl_sumsq(const float* x, int64_t d) noexcept nogil


cdef inline void _rms_row(const float* x, const float* w, float* y, Py_ssize_t d,
                          float eps) noexcept nogil:
    cdef double s = pyl_sumsq(x, d)
    cdef float v, mean, scale
    cdef Py_ssize_t i
    mean = <float>(s / <double>d)
    scale = <float>1.0 / sqrtf(mean + eps)
    if w != NULL:
        for i in range(d):
            v = x[i] * scale
            y[i] = v * w[i]
    else:
        for i in range(d):
            y[i] = x[i] * scale


def rms_norm(const float[:, ::1] x, const float[::1] w, float eps, float[:, ::1] out,
             int n_threads):
    """out[r] = x[r] / sqrt(mean(x[r]^2) + eps) (* w): x, out [n, d]; w [d] or None."""
    cdef Py_ssize_t n = x.shape[0], d = x.shape[1], r
    cdef const float* wp = NULL
    if w is not None:
        wp = &w[0]
    if n == 0 or d == 0:
        return
    if n_threads == 1:              # no OpenMP region: ~3 us saved on a one-token op
        with nogil:
            for r in range(n):
                _rms_row(&x[r, 0], wp, &out[r, 0], d, eps)
        return
    for r in prange(n, nogil=True, num_threads=n_threads, schedule="dynamic", chunksize=8):
        _rms_row(&x[r, 0], wp, &out[r, 0], d, eps)


cimport numpy as cnp
cnp.import_array()


cdef inline bint _f32c(cnp.ndarray a) noexcept:
    return cnp.PyArray_TYPE(a) == cnp.NPY_FLOAT32 and cnp.PyArray_IS_C_CONTIGUOUS(a)


def rms_norm_rows(cnp.ndarray x, cnp.ndarray w, float eps, cnp.ndarray out):
    """rms_norm for a few rows on this thread, without buffer acquisition (the one-token path):
    x, out float32 C-contiguous of the same size, rows of d = w.size (w float32 contiguous) or
    of d = x.shape[-1] without w (w None). False when the arrays do not qualify (nothing done)."""
    cdef Py_ssize_t d, n, r
    cdef const float* wp = NULL
    if not _f32c(x) or not _f32c(out) or cnp.PyArray_SIZE(x) != cnp.PyArray_SIZE(out) \
            or cnp.PyArray_NDIM(x) == 0:
        return False
    d = cnp.PyArray_DIM(x, cnp.PyArray_NDIM(x) - 1)
    if w is not None:
        if not _f32c(w) or cnp.PyArray_NDIM(w) != 1 or cnp.PyArray_SIZE(w) != d:
            return False
        wp = <const float*>cnp.PyArray_DATA(w)
    if d == 0:
        return True
    n = cnp.PyArray_SIZE(x) // d
    cdef const float* xp = <const float*>cnp.PyArray_DATA(x)
    cdef float* op = <float*>cnp.PyArray_DATA(out)
    with nogil:
        for r in range(n):
            _rms_row(xp + r * d, wp, op + r * d, d, eps)
    return True


# -- rope ----------------------------------------------------------------------------------------
cdef inline void _rope_cache(float p, float theta_scale, float freq_scale, const float* ff,
                             float ext_factor, float attn_factor, float c0, float c1,
                             float* cs, float* sn, Py_ssize_t half) noexcept nogil:
    """ggml_rope_cache_init + rope_yarn (ggml-cpu ops.cpp): theta/ff, freq_scale * theta, the YaRN
    ramp mix when ext_factor != 0, cos/sin times mscale."""
    cdef float theta = p, te, t, y, ramp, mscale
    cdef Py_ssize_t i
    for i in range(half):
        te = theta / ff[i] if ff != NULL else theta
        t = freq_scale * te
        mscale = attn_factor
        if ext_factor != 0.0:
            y = (<float>i - c0) / fmaxf(<float>0.001, c1 - c0)
            ramp = (<float>1 - fminf(<float>1, fmaxf(<float>0, y))) * ext_factor
            t = t * (<float>1 - ramp) + te * ramp
            mscale = mscale * (<float>1.0 + <float>0.1 * logf(<float>1.0 / freq_scale))
        cs[i] = cosf(t) * mscale
        sn[i] = sinf(t) * mscale
        theta = theta * theta_scale


cdef inline void _rope_head(const float* x, float* y, const float* cs, const float* sn,
                            Py_ssize_t n_rot, Py_ssize_t hd, bint neox) noexcept nogil:
    cdef Py_ssize_t i, half = n_rot // 2, a, b
    cdef float x0, x1, c, s
    for i in range(half):
        if neox:
            a = i
            b = i + half
        else:
            a = 2 * i
            b = 2 * i + 1
        x0 = x[a]
        x1 = x[b]
        c = cs[i]
        s = sn[i]
        y[a] = x0 * c - x1 * s
        y[b] = x0 * s + x1 * c
    for i in range(n_rot, hd):
        y[i] = x[i]


def rope_cache(const int[::1] pos, int n_rot, float theta_scale, float freq_scale,
               const float[::1] freq_factors, float ext_factor, float attn_factor, float c0,
               float c1, float[:, ::1] cs, float[:, ::1] sn, int n_threads):
    """cs/sn [n, n_rot/2] = cos/sin of ggml's rope angles at pos [n] (f32 theta recurrence);
    freq_factors [n_rot/2] or empty (none)."""
    cdef Py_ssize_t n = pos.shape[0], t, half = n_rot // 2
    cdef const float* ff = &freq_factors[0] if freq_factors.shape[0] else NULL
    if n == 0 or half == 0:
        return
    if n_threads == 1:
        with nogil:
            for t in range(n):
                _rope_cache(<float>pos[t], theta_scale, freq_scale, ff, ext_factor, attn_factor,
                            c0, c1, &cs[t, 0], &sn[t, 0], half)
        return
    for t in prange(n, nogil=True, num_threads=n_threads, schedule="static"):
        _rope_cache(<float>pos[t], theta_scale, freq_scale, ff, ext_factor, attn_factor,
                    c0, c1, &cs[t, 0], &sn[t, 0], half)


def rope_apply(const float[:, :, ::1] x, const float[:, ::1] cs, const float[:, ::1] sn,
               int n_rot, bint neox, float[:, :, ::1] out, int n_threads):
    """Rotate x [n, n_head, hd] into out with the rope cache cs/sn [n, n_rot/2]."""
    cdef Py_ssize_t n = x.shape[0], nh = x.shape[1], hd = x.shape[2], t, h
    if n == 0 or nh == 0:
        return
    if n_threads == 1:
        with nogil:
            for t in range(n):
                for h in range(nh):
                    _rope_head(&x[t, h, 0], &out[t, h, 0], &cs[t, 0], &sn[t, 0], n_rot, hd, neox)
        return
    for t in prange(n, nogil=True, num_threads=n_threads, schedule="static"):
        for h in range(nh):
            _rope_head(&x[t, h, 0], &out[t, h, 0], &cs[t, 0], &sn[t, 0], n_rot, hd, neox)


# -- elementwise ---------------------------------------------------------------------------------
# GELU and SiLU follow ggml's CPU build bit for bit (pyl_parity.h, docs/numerics.md): GELU (and the
# GELU of GEGLU) looks f16(x) up in ggml's f16 table (x <= -10 -> 0, x >= 10 -> x); SiLU is
# ggml_v_silu, x / (1 + exp(-x)) with ggml_v_expf. Tails shorter than 8 go through the same vector
# code via a padded buffer, so an element's value never depends on where it sits in the array.
# Without AVX2/FMA/F16C, SiLU uses libm's expf.
cdef extern from *:
    """
    #include "pyl_parity.h"

    static void pyl_gelu_rows(const float *x, const float *g, float *y, int64_t n) {
        int64_t i = 0;
    #if PYL_PARITY_SIMD
        /* pyl_gelu_lut, 8 at a time: f16(x) by F16C (the same RNE as _cvtss_sh), table
           lookups, back to f32, then the x <= -10 / x >= 10 cases */
        const __m256 lo = _mm256_set1_ps(-10.0f), hi = _mm256_set1_ps(10.0f);
        uint16_t h[8], t[8];
        int j;
        for (; i + 8 <= n; i += 8) {
            __m256 v = _mm256_loadu_ps(x + i), r;
            _mm_storeu_si128((__m128i *)h, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
            for (j = 0; j < 8; j++)
                t[j] = pyl_gelu_table[h[j]];
            r = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)t));
            r = _mm256_blendv_ps(r, v, _mm256_cmp_ps(v, hi, _CMP_GE_OQ));
            r = _mm256_andnot_ps(_mm256_cmp_ps(v, lo, _CMP_LE_OQ), r);
            if (g) r = _mm256_mul_ps(r, _mm256_loadu_ps(g + i));
            _mm256_storeu_ps(y + i, r);
        }
    #endif
        for (; i < n; i++)
            y[i] = g ? pyl_gelu_lut(x[i]) * g[i] : pyl_gelu_lut(x[i]);
    }

    /* kind 0 gelu, 1 silu; g (optional) multiplies the result: y = act(x) * g */
    static void pyl_act(int kind, const float *x, const float *g, float *y, int64_t n) {
        if (kind == 1)
            pyl_silu_rows(x, g, y, n);
        else
            pyl_gelu_rows(x, g, y, n);
    }
    """
    int PYL_PARITY_SIMD
    void pyl_gelu_table_init() noexcept nogil
    void pyl_act(int kind, const float* x, const float* g, float* y, int64_t n) noexcept nogil


pyl_gelu_table_init()


def simd():
    """True when the AVX2/FMA activation kernels were compiled in."""
    return bool(PYL_PARITY_SIMD)


# kind: 0 gelu, 1 silu, 2 softcap (a = 1/cap, b = cap), 3 geglu, 4 swiglu
cdef inline void _unary_chunk(int kind, const float* x, const float* g, float* y, Py_ssize_t n,
                              float a, float b) noexcept nogil:
    cdef Py_ssize_t i
    if kind == 2:
        for i in range(n):
            y[i] = tanhf(x[i] * a) * b
    elif kind >= 3:
        pyl_act(kind - 3, x, g, y, n)
    else:
        pyl_act(kind, x, NULL, y, n)


def unary(int kind, const float[::1] x, const float[::1] g, float[::1] out, float a, float b,
          int n_threads):
    """Elementwise op `kind` over flat contiguous x (and gate partner g) into out."""
    cdef Py_ssize_t n = x.shape[0], nc = (n + CHUNK - 1) // CHUNK, c, lo, m
    cdef const float* gp = NULL
    if n == 0:
        return
    if g is not None:
        gp = &g[0]
    if n_threads == 1:
        with nogil:
            _unary_chunk(kind, &x[0], gp, &out[0], n, a, b)
        return
    for c in prange(nc, nogil=True, num_threads=n_threads, schedule="dynamic"):
        lo = c * CHUNK
        m = n - lo
        if m > CHUNK:
            m = CHUNK
        _unary_chunk(kind, &x[lo], gp + lo if gp != NULL else NULL, &out[lo], m, a, b)


# -- set_rows ------------------------------------------------------------------------------------
cdef extern from *:
    """
    #include "pyl_vmath.h"
    /* f32 -> f16 bits, round to nearest even; overflow -> inf, NaN -> quiet NaN (F. Giesen's
       float_to_half_fast3_rtne construction) */
    static inline uint16_t pyl_f2h(float f) {
        const uint32_t f32inf = 255u << 23, f16max = (127u + 16u) << 23;
        const uint32_t magic_u = ((127u - 15u) + (23u - 10u) + 1u) << 23;
        uint32_t u, sign;
        uint16_t o;
        memcpy(&u, &f, 4);
        sign = u & 0x80000000u;
        u ^= sign;
        if (u >= f16max) {
            o = u > f32inf ? 0x7e00 : 0x7c00;
        } else if (u < (113u << 23)) {              /* f16 subnormal or zero */
            float g, magic;
            memcpy(&g, &u, 4);
            memcpy(&magic, &magic_u, 4);
            g += magic;
            memcpy(&u, &g, 4);
            o = (uint16_t)(u - magic_u);
        } else {
            uint32_t odd = (u >> 13) & 1u;
            u += ((uint32_t)(15 - 127) << 23) + 0xfffu + odd;
            o = (uint16_t)(u >> 13);
        }
        return (uint16_t)(o | (sign >> 16));
    }

    static void pyl_row_f16(uint16_t *dst, const float *src, int64_t n) {
        int64_t i = 0;
    #if PYL_VM_SIMD
        for (; i + 8 <= n; i += 8)
            _mm_storeu_si128((__m128i *)(dst + i),
                             _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    #endif
        for (; i < n; i++)
            dst[i] = pyl_f2h(src[i]);
    }
    """
    void pyl_row_f16(uint16_t* dst, const float* src, int64_t n) noexcept nogil
    uint16_t pyl_f2h(float f) noexcept nogil


def f2h(float f):
    """The scalar f32 -> f16 bits conversion (for tests)."""
    return pyl_f2h(f)


def set_rows(cache, const int64_t[::1] cells, const float[:, ::1] rows, int n_threads):
    """cache[cells[i]] = rows[i] rounded to the cache dtype (f16: nearest even; f32: copy).
    cache is [n_cells, row] with contiguous rows. Returns False (writing nothing) if a cell is
    out of range."""
    cdef Py_ssize_t i, n = cells.shape[0], d = rows.shape[1], n_cells = cache.shape[0]
    cdef uint16_t[:, ::1] c16
    cdef float[:, ::1] c32
    cdef bint f16 = cache.dtype == np.float16
    for i in range(n):
        if cells[i] < 0 or cells[i] >= n_cells:
            return False
    if n == 0:
        return True
    if f16:
        c16 = cache.view(np.uint16)
        if n_threads == 1:
            with nogil:
                for i in range(n):
                    pyl_row_f16(&c16[cells[i], 0], &rows[i, 0], d)
            return True
        for i in prange(n, nogil=True, num_threads=n_threads, schedule="static"):
            pyl_row_f16(&c16[cells[i], 0], &rows[i, 0], d)
    else:
        c32 = cache
        with nogil:
            for i in range(n):
                memcpy(&c32[cells[i], 0], &rows[i, 0], d * sizeof(float))
    return True


# -- MoE router ----------------------------------------------------------------------------------
# build_moe_ffn's softmax gating in one call per ubatch: p = ggml_soft_max(logits) (ggml_v_expf
# over the 8-blocks, each block's hsum8 added to a double sum, the n % 8 tail by exp in double
# rounded to f32 and added one by one, p = e * (float)(1 / sum)); ids = the k largest of p,
# largest first, ties to the lower index (a stable argsort of -p); w = p[ids], divided by their
# sum when norm (ggml_sum_rows: a double sum in slot order, clamped to >= 6.103515625e-5), times
# scale when scale is not 0 or 1. Backend.moe_route is the numpy oracle (same bits).
cdef extern from *:
    """
    #include <math.h>
    static inline int pyl_route_simd(void) { return PYL_PARITY_SIMD; }
    """
    int pyl_route_simd() noexcept nogil
    void pyl_route_row(const float *x, int E, int k, int norm, float scale, float *p, int *ids,
                       float *w) noexcept nogil


def route_native():
    """Whether moe_route runs here (ggml_v_expf needs AVX2/FMA for its bits)."""
    return bool(pyl_route_simd())


def moe_route(const float[:, ::1] logits, int k, bint norm, float scale, float[:, ::1] probs,
              int[:, ::1] ids, float[:, ::1] w):
    """Router of each row of logits [n, E] -> probs [n, E], ids [n, k], w [n, k] (see above)."""
    cdef Py_ssize_t n = logits.shape[0], t
    cdef int E = logits.shape[1]
    if (probs.shape[0] < n or probs.shape[1] != E or ids.shape[0] < n or ids.shape[1] != k
            or w.shape[0] < n or w.shape[1] != k or k < 1 or k > E):
        raise ValueError("moe_route: shape mismatch")
    if not pyl_route_simd():
        raise RuntimeError("moe_route: no AVX2/FMA build")
    with nogil:
        for t in range(n):
            pyl_route_row(&logits[t, 0], E, k, norm, scale, &probs[t, 0], &ids[t, 0], &w[t, 0])
