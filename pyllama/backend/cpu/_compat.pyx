# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""llama.cpp's one-token (small-batch) CPU kernels, for numerics="llama.cpp" (pyl_compat.h has
the arithmetic; docs/numerics.md why). Threads split weight rows or (query, head) pairs, never one
reduction, so results do not depend on the thread count.

- quant_q8_K(x, q, d, bs): quantize_row_q8_K_ref per row;
- matvec_k(kernel, raw, k, x, out, q, d, bs, nth): every row of x by one of llama.cpp's kernels:
  GEMV_Q4_K (ggml_gemv_q4_K_8x8_q8_K, repacked Q4_K), VEC_Q2_K ... VEC_Q6_K
  (ggml_vec_dot_q*_K_q8_K);
- attention_vec(...): f16 attention by ggml_vec_dot_f16 (kq and kqv) over ascending cell lists;
- attention_fa(...): llama.cpp's flash attention (tiled or one_chunk) over ascending cell lists.
"""
import numpy as np

from cython.parallel cimport prange, threadid
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t

cdef extern from "pyl_compat.h" nogil:
    void pyl_c_quant_q8_K(const float *x, int k, int8_t *q, float *d, int16_t *bs)
    float pyl_c_dot_q4_K(const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                         const int16_t *bs)
    float pyl_c_dot_q6_K(const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                         const int16_t *bs)
    void pyl_c_dot4_q4_K(const uint8_t *w, int64_t rs, int nsb, const int8_t *q8,
                         const float *d8, const int16_t *bs, float *out)
    float pyl_c_dot_q23_K(int q3, const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                          const int16_t *bs)
    float pyl_c_dot_q45_K(int q5, const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                          const int16_t *bs)
    float pyl_c_dot_iq4_xs(const uint8_t *w, int nsb, const int8_t *q8, const float *d8)
    void pyl_c_attn_head(const float *q, int dk, int dv, const uint16_t *K, int64_t k_stride,
                         const uint16_t *V, int64_t v_stride, const int32_t *cells, int L,
                         float scale, float softcap, float *work, float *out)
    void pyl_c_fa_tiled_block(const float *q, int64_t qs, int nq, int g, int dk, int dv,
                              const uint8_t *K, int64_t ks, const uint8_t *V, int64_t vs, int f16,
                              const int32_t *cells, const int64_t *q_start, const int64_t *q_end,
                              float scale, float softcap, float *work, float *out, int64_t os)
    int PYL_C_FA_ROWS
    void pyl_c_fa_chunk_head(const float *q, int dk, int dv, const uint16_t *K, int64_t ks,
                             const uint16_t *V, int64_t vs, const int32_t *cells, int L,
                             float scale, float softcap, float *work, float *out)
    void pyl_c_fa_chunk_q(int kt, int vt, const int8_t *qq, const float *qd, int dk, int dv,
                          const uint8_t *K, int64_t ks, const uint8_t *V, int64_t vs,
                          const int32_t *cells, int L, float scale, float softcap, float *work,
                          float *out)
    void pyl_c_fa_split_head(const float *q, int dk, int dv, const uint16_t *K, int64_t ks,
                             const uint16_t *V, int64_t vs, const int32_t *cells, int L,
                             int base, int nek1, int nth, float scale, float softcap,
                             float *work, float *out)

GEMV_Q4_K, VEC_Q4_K, VEC_Q5_K, VEC_Q6_K, VEC_Q2_K, VEC_Q3_K, VEC_IQ4_XS = range(7)
cdef enum:                      # attention_fa kernels (ref_compat.FA_TILED, ... order)
    FA_TILED = 0
    FA_CHUNK = 1
    FA_SPLIT = 2


cdef inline float _dot(int kernel, const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                       const int16_t *bs) noexcept nogil:
    if kernel == 0:
        return pyl_c_dot_q4_K(w, nsb, q8, d8, bs)
    if kernel == 3:
        return pyl_c_dot_q6_K(w, nsb, q8, d8, bs)
    if kernel == 6:
        return pyl_c_dot_iq4_xs(w, nsb, q8, d8)
    if kernel >= 4:
        return pyl_c_dot_q23_K(kernel == 5, w, nsb, q8, d8, bs)
    return pyl_c_dot_q45_K(kernel == 2, w, nsb, q8, d8, bs)


def quant_q8_K(const float[:, ::1] x, int8_t[:, ::1] q, float[:, ::1] d, int16_t[:, ::1] bs):
    """x [n, k] (k % 256 == 0) -> q [n, k], d [n, k/256], bsums [n, k/16]
    (quantize_row_q8_K_ref)."""
    cdef Py_ssize_t t
    with nogil:
        for t in range(x.shape[0]):
            pyl_c_quant_q8_K(&x[t, 0], <int>x.shape[1], &q[t, 0], &d[t, 0], &bs[t, 0])


def matvec_k(int kernel, const uint8_t[:, ::1] raw, int k, const float[:, ::1] x,
             float[:, ::1] out, int8_t[:, ::1] q, float[:, ::1] d, int16_t[:, ::1] bs, int nth):
    """out[t, r] = W[r] . x[t] with llama.cpp's kernel `kernel` (GEMV_Q4_K, VEC_Q*_K);
    q/d/bs: [n, k], [n, k/256], [n, k/16] scratch for the quantized activations."""
    cdef Py_ssize_t n = x.shape[0], rows = raw.shape[0], r, t
    cdef int nsb = k // 256
    if kernel < 0 or kernel > 6:
        raise ValueError(f"matvec_k: unknown kernel {kernel}")
    if k % 256 or x.shape[1] != k or out.shape[0] != n or out.shape[1] < rows:
        raise ValueError("matvec_k: shape mismatch")
    cdef Py_ssize_t g, n4 = rows // 4 if kernel == GEMV_Q4_K else 0
    with nogil:
        for t in range(n):
            pyl_c_quant_q8_K(&x[t, 0], k, &q[t, 0], &d[t, 0], &bs[t, 0])
        for g in prange(n4, num_threads=nth, schedule="static"):     # 4 rows at a time (same bits)
            for t in range(n):
                pyl_c_dot4_q4_K(&raw[4 * g, 0], raw.shape[1], nsb, &q[t, 0], &d[t, 0],
                                &bs[t, 0], &out[t, 4 * g])
        for r in prange(4 * n4, rows, num_threads=nth, schedule="static"):
            for t in range(n):
                out[t, r] = _dot(kernel, &raw[r, 0], nsb, &q[t, 0], &d[t, 0], &bs[t, 0])


def attention_vec(const float[:, :, ::1] q, const uint16_t[:, ::1] k_cache,
                  const uint16_t[:, ::1] v_cache, int n_kv, const int32_t[::1] cells,
                  const int64_t[::1] q_start, const int64_t[::1] q_end, float scale,
                  float softcap, float[:, :, ::1] out, int nth):
    """out[i, h] = attention of query i, head h over cells[q_start[i]:q_end[i]] (ascending cell
    index) of f16 caches k_cache [n_cells, n_kv * dk], v_cache [n_cells, n_kv * dv] (uint16
    bits)."""
    cdef int n_q = q.shape[0], H = q.shape[1], dk = q.shape[2], dv = out.shape[2]
    cdef int g = H // n_kv, task, i, h, longest = 0
    cdef Py_ssize_t j
    for j in range(n_q):
        longest = max(longest, <int>(q_end[j] - q_start[j]))
    work = np.empty((max(nth, 1), dk + longest + 32 * dv), np.float32)
    cdef float[:, ::1] wk = work
    with nogil:
        for task in prange(n_q * H, num_threads=nth, schedule="dynamic"):
            i = task // H
            h = task % H
            pyl_c_attn_head(&q[i, h, 0], dk, dv, &k_cache[0, (h // g) * dk], k_cache.shape[1],
                            &v_cache[0, (h // g) * dv], v_cache.shape[1], &cells[q_start[i]],
                            <int>(q_end[i] - q_start[i]), scale, softcap, &wk[threadid(), 0],
                            &out[i, h, 0])


def attention_fa(const float[:, :, ::1] q, const uint8_t[:, ::1] k_cache,
                 const uint8_t[:, ::1] v_cache, bint f16, int n_kv, int dv,
                 const int32_t[::1] cells, const int64_t[::1] q_start, const int64_t[::1] q_end,
                 float scale, float softcap, int kernel, int base, int nek1, int n_chunks,
                 float[:, :, ::1] out, int nth):
    """out[i, h] = flash attention of query i, head h over cells[q_start[i]:q_end[i]] (ascending
    cell index) of K/V caches as bytes [n_cells, row bytes] (f16, or f32 for the tiled kernel):
    kernel FA_TILED (llama.cpp's kernel for >= 64 queries), FA_CHUNK, or FA_SPLIT (one query over
    a view of nek1 >= 512 cells from cell `base`, in n_chunks chunks: llama.cpp's thread count)."""
    cdef int n_q = q.shape[0], H = q.shape[1], dk = q.shape[2]
    cdef int g = H // n_kv, task, i, h, es = 2 if f16 else 4
    cdef int gb = min(g, PYL_C_FA_ROWS), nhc = (g + gb - 1) // gb, nqb = PYL_C_FA_ROWS // gb
    cdef int wide = max(dk, dv, 64), hb, hn
    cdef Py_ssize_t width = dk + 2 * dv
    if kernel == FA_TILED:                # K^T, V, scores, two padding rows, d and lane lists
        width = dk * 64 + 64 * dv + PYL_C_FA_ROWS * 64 + 2 * wide + dk + 64
    elif not f16:
        raise ValueError("attention_fa: one_chunk needs f16 caches")
    work = np.empty((max(nth, 1), width), np.float32)
    cdef float[:, ::1] wk = work
    if kernel == FA_TILED:     # blocks: nqb queries x up to gb heads of one KV head's g
        with nogil:
            for task in prange(((n_q + nqb - 1) // nqb) * n_kv * nhc, num_threads=nth,
                               schedule="dynamic"):
                i = (task // (n_kv * nhc)) * nqb
                h = (task % (n_kv * nhc)) // nhc                 # the KV head
                hb = h * g + (task % nhc) * gb                   # its first query head here
                hn = min(gb, (h + 1) * g - hb)
                pyl_c_fa_tiled_block(&q[i, hb, 0], H * dk, min(nqb, n_q - i), hn, dk, dv,
                                     &k_cache[0, h * dk * es], k_cache.shape[1],
                                     &v_cache[0, h * dv * es], v_cache.shape[1], f16, &cells[0],
                                     &q_start[i], &q_end[i], scale, softcap, &wk[threadid(), 0],
                                     &out[i, hb, 0], H * dv)
        return
    with nogil:
        for task in prange(n_q * H, num_threads=nth, schedule="dynamic"):
            i = task // H
            h = task % H
            if kernel == FA_SPLIT:
                pyl_c_fa_split_head(&q[i, h, 0], dk, dv,
                                    <const uint16_t *>&k_cache[0, (h // g) * dk * 2],
                                    k_cache.shape[1] // 2,
                                    <const uint16_t *>&v_cache[0, (h // g) * dv * 2],
                                    v_cache.shape[1] // 2, &cells[q_start[i]],
                                    <int>(q_end[i] - q_start[i]), base, nek1, n_chunks, scale,
                                    softcap, &wk[threadid(), 0], &out[i, h, 0])
            else:
                pyl_c_fa_chunk_head(&q[i, h, 0], dk, dv,
                                    <const uint16_t *>&k_cache[0, (h // g) * dk * 2],
                                    k_cache.shape[1] // 2,
                                    <const uint16_t *>&v_cache[0, (h // g) * dv * 2],
                                    v_cache.shape[1] // 2, &cells[q_start[i]],
                                    <int>(q_end[i] - q_start[i]), scale, softcap,
                                    &wk[threadid(), 0], &out[i, h, 0])


cdef inline int _kv_bytes(int t, int n) noexcept nogil:
    """bytes of n elements of KV type t (ggml id: 1 f16, 2 q4_0, 8 q8_0)"""
    return 2 * n if t == 1 else (n // 32) * (34 if t == 8 else 18)


def attention_fa_q(const int8_t[:, :, ::1] qq, const float[:, :, ::1] qd,
                   const uint8_t[:, ::1] k_cache, const uint8_t[:, ::1] v_cache, int kt, int vt,
                   int n_kv, int dv, const int32_t[::1] cells, const int64_t[::1] q_start,
                   const int64_t[::1] q_end, float scale, float softcap, float[:, :, ::1] out,
                   int nth):
    """llama.cpp's one_chunk flash attention over a q8_0 / q4_0 / f16 K cache (kt: ggml id 8 / 2 /
    1) and a q8_0 / q4_0 / f16 V cache (vt 8 / 2 / 1), not both f16: qq/qd the queries as q8_0
    blocks [n_q, n_head, dk] and [n_q, n_head, dk / 32], or for an f16 K qd = q rounded to f16
    [n_q, n_head, dk] (qq unused); cells ascending per query."""
    cdef int n_q = qq.shape[0], H = qq.shape[1], dk = qq.shape[2]
    cdef int g = H // n_kv, task, i, h
    if kt not in (1, 2, 8) or vt not in (1, 2, 8) or (kt == 1 and vt == 1):
        raise ValueError(f"attention_fa_q: unsupported KV types {kt}/{vt}")
    work = np.empty((max(nth, 1), 2 * dv), np.float32)
    cdef float[:, ::1] wk = work
    with nogil:
        for task in prange(n_q * H, num_threads=nth, schedule="dynamic"):
            i = task // H
            h = task % H
            pyl_c_fa_chunk_q(kt, vt, &qq[i, h, 0], &qd[i, h, 0], dk, dv,
                             &k_cache[0, _kv_bytes(kt, (h // g) * dk)], k_cache.shape[1],
                             &v_cache[0, _kv_bytes(vt, (h // g) * dv)], v_cache.shape[1],
                             &cells[q_start[i]], <int>(q_end[i] - q_start[i]), scale, softcap,
                             &wk[threadid(), 0], &out[i, h, 0])


# -- float weights by ggml_vec_dot_{f32,f16,bf16} -------------------------------------------------
# llama.cpp computes F32/F16/BF16 weights with tinyBLAS from 2 activation rows when it can (rows %
# 4 == 0 and k % 8 == 0, llamafile_sgemm), else - one row, or a weight tinyBLAS refuses (e.g. a
# 279-row tied output) - by ggml_vec_dot_* per element (the activation rounded to f16 / bf16 first,
# type_traits_cpu vec_dot_type). Numpy oracle: ref_compat.matvec_float.
cdef extern from *:
    """
    #if PYL_C_SIMD
    static inline float pyl_vd_hsum8(__m256 x) {    /* hsum_float_8 / ggml_hsum8 */
        __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
        r = _mm_add_ps(r, _mm_movehl_ps(r, r));
        r = _mm_add_ss(r, _mm_movehdup_ps(r));
        return _mm_cvtss_f32(r);
    }
    #endif
    static inline float pyl_vd_bf16r(float f) {     /* ggml_compute_fp32_to_bf16, back to f32 */
        uint32_t u; memcpy(&u, &f, 4);
        uint32_t h = (u & 0x7fffffffu) > 0x7f800000u ? ((u >> 16) | 64u)
                                                      : ((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
        h <<= 16; memcpy(&f, &h, 4); return f;
    }
    static inline float pyl_vd_bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
    /* one element: t 0 = F32, 1 = F16, 30 = BF16; x already in the vec_dot type (as f32) */
    static float pyl_vd_float(int t, const uint8_t *w, const float *x, int k) {
        int np = k - k % 32, i, j;
        float a[32];
    #if PYL_C_SIMD
        __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
        if (t == 0) {
            const float *wf = (const float *)w;
            for (i = 0; i < np; i += 32)
                for (j = 0; j < 4; j++)
                    v[j] = _mm256_fmadd_ps(_mm256_loadu_ps(wf + i + 8 * j), _mm256_loadu_ps(x + i + 8 * j), v[j]);
            for (j = 0; j < 4; j++) _mm256_storeu_ps(a + 8 * j, v[j]);
            float s = pyl_c_reduce32(a);
            /* ggml's `sumf += x[i]*y[i]` rest as gcc compiles it: unrolled by 4 with the
               product rounded before the add, the last (k - np) % 4 fused */
            int q = np + (k - np) / 4 * 4;
            for (i = np; i < q; i++) { volatile float p = wf[i] * x[i]; s = s + p; }
            for (i = q; i < k; i++) s = fmaf(wf[i], x[i], s);
            return s;
        }
        if (t == 1) return pyl_c_vdot_f16(x, (const uint16_t *)w, k);
        const uint16_t *wb = (const uint16_t *)w;
        for (i = 0; i < np; i += 32)
            for (j = 0; j < 4; j++) {
                __m256 wv = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(
                    _mm_loadu_si128((const __m128i *)(wb + i + 8 * j))), 16));
                v[j] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i + 8 * j), v[j]);
            }
        double s = (double)pyl_vd_hsum8(_mm256_add_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[1], v[3])));
        for (i = np; i < k; i++) s += (double)(pyl_vd_bf2f(wb[i]) * x[i]);
        return (float)s;
    #else
        (void)a; (void)np; (void)i; (void)j; (void)w; (void)x; (void)k; (void)t;
        return 0.0f;
    #endif
    }
    static inline int pyl_vd_native(void) { return PYL_C_SIMD; }
    """
    float pyl_vd_float(int t, const uint8_t *w, const float *x, int k) noexcept nogil
    float pyl_vd_bf16r(float f) noexcept nogil
    float pyl_c_f16r(float f) noexcept nogil
    int pyl_vd_native() noexcept nogil


def vecdot_native():
    """Whether matvec_float runs here (AVX2/FMA/F16C: the lanes of llama.cpp's AVX2 build)."""
    return bool(pyl_vd_native())


def matvec_float(int wtype, const uint8_t[:, ::1] raw, const float[:, ::1] x, float[:, ::1] xs,
                 float[:, ::1] out, int nth):
    """out[t, r] = ggml_vec_dot_<type>(W[r], x[t]) for an F32 (0), F16 (1) or BF16 (30) weight
    raw [rows, row_bytes]; xs [n, k] scratch for x in the vec_dot type."""
    cdef Py_ssize_t n = x.shape[0], rows = raw.shape[0], k = x.shape[1], r, t, i
    cdef int es = 4 if wtype == 0 else 2
    if wtype not in (0, 1, 30) or raw.shape[1] != k * es or out.shape[0] < n or out.shape[1] < rows:
        raise ValueError("matvec_float: shape mismatch")
    if xs.shape[0] < n or xs.shape[1] != k:
        raise ValueError("matvec_float: shape mismatch")
    if not pyl_vd_native():
        raise RuntimeError("matvec_float: no AVX2/FMA/F16C build")
    with nogil:
        for t in range(n):
            for i in range(k):
                xs[t, i] = (x[t, i] if wtype == 0 else pyl_c_f16r(x[t, i]) if wtype == 1
                            else pyl_vd_bf16r(x[t, i]))
        for r in prange(rows, num_threads=nth, schedule="static"):
            for t in range(n):
                out[t, r] = pyl_vd_float(wtype, &raw[r, 0], &xs[t, 0], <int>k)
