# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Attention over listed KV cells (f16 or f32 cache), llama.cpp's non-flash CPU path bit for bit
(docs/numerics.md; verified against llama.cpp's kqv_out on Gemma 3).

A task is (query i, up to 4 heads sharing one KV head): each K row is loaded and converted once
for those heads. For every (query, head) pair the arithmetic is fixed, whatever the grouping:
  1. q rounded to f16 when the cache is f16 (ggml's mul_mat(k_f16, q) converts q);
     r_j = dot(q, k_j) as tinyBLAS: one 8-lane FMA chain over d, ggml's hsum, the d % 8 tail in
     order; s_j = scale * r_j, optional softcap s_j = tanh(s_j * (1/cap)) * cap; max over j;
  2. e_j = ggml_v_expf(s_j - max) over 8-blocks of the list; the blocks' hsums added in double;
     p_j = e_j * (float)(1/sum), rounded to f16 when V is f16 (mul_mat(v_f16, kq) converts kq);
  3. out = sum_j p_j v_j as tinyBLAS: lane j % 8 of 8 FMA chains over j in order, ggml's hsum.
Lanes follow the list index, i.e. the position when the visible positions start at a multiple of
8 (always true without a sliding window); llama.cpp aligns them to the cell index.
So a query's output is bit-identical whatever the other queries in the call, the head grouping
and the number of threads (docs/architecture.md). Unlisted cells are never read.
With AVX-512 the same lanes run two cells (q.k) or two heads (p.v) per 512-bit register, q is
rounded once per task and each V slice is converted once for the task's 4 heads: same bits.
"""
import numpy as np

from cython.parallel cimport prange, threadid
from libc.stdint cimport int32_t, int64_t, uint8_t

cdef extern from *:
    """
    #include "pyl_vmath.h"
    #include "pyl_parity.h"
    #define PYL_HB 4          /* heads per task */
    #define PYL_PF 8          /* prefetch distance, cells */

    #if PYL_VM_SIMD && PYL_PARITY_SIMD
    /* q as ggml's mul_mat(k_f16, q) sees it: rounded to f16 when K is f16 */
    static inline float pyl_q1(const float *q, int f16, int e) {
        return f16 ? _cvtsh_ss(_cvtss_sh(q[e], 0)) : q[e];
    }

    /* raw scores of 2 cells x 4 heads into r[4 * c + t] (tinyBLAS: one 8-lane FMA chain over d,
       ggml's hsum), then the d % 8 tail in order; qb: the 4 heads' q rows as the dot sees them
       (rounded to f16 for an f16 K, once per task: pyl_attn_group_t) */
    static inline __attribute__((always_inline)) void pyl_qk_2x4(
            const float *qb, const uint8_t *const *rows, int f16, int d, float *r) {
        __m256 a[8];
        int i, m;
        for (m = 0; m < 8; m++)
            a[m] = _mm256_setzero_ps();
        for (i = 0; i + 8 <= d; i += 8) {
            __m256 k0 = pyl_ld8(rows[0], f16, i), k1 = pyl_ld8(rows[1], f16, i);
            for (m = 0; m < 4; m++) {
                __m256 qv = _mm256_loadu_ps(qb + (int64_t)m * d + i);
                a[m] = _mm256_fmadd_ps(qv, k0, a[m]);
                a[4 + m] = _mm256_fmadd_ps(qv, k1, a[4 + m]);
            }
        }
        for (m = 0; m < 8; m++) {
            int e;
            r[m] = pyl_ghsum8(a[m]);
            for (e = i; e < d; e++)
                r[m] += qb[(int64_t)(m & 3) * d + e] * pyl_ld1(rows[m >> 2], f16, e);
        }
    }

    /* ggml_soft_max_f32 after the max: p = exp(s - mx) (ggml_v_expf) over 8-blocks of the list
       (padded with -inf -> 0), block sums (ggml's hsum) accumulated in double, then
       p *= (float)(1 / sum), rounded to f16 when V is f16 (mul_mat(v_f16, kq) converts kq). */
    static inline void pyl_softmax_p(float *s, int n, float mx, int f16, const float *sink) {
        double sum = 0.0;
        float inv;
        int j;
        for (j = n; j < ((n + 7) & ~7); j++)
            s[j] = -INFINITY;
        for (j = 0; j < n; j += 8) {
            __m256 p = pyl_gexp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(mx)));
            _mm256_storeu_ps(s + j, p);
            sum += (double)pyl_ghsum8(p);
        }
        if (sink)       /* ggml_soft_max_add_sinks: the sink's exp joins the sum (mx counts it) */
            sum += (double)(float)exp((double)(*sink - mx));
        inv = (float)(1.0 / sum);
        for (j = 0; j < n; j += 8) {
            __m256 p = _mm256_mul_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(inv));
            if (f16)
                p = _mm256_cvtph_ps(_mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT));
            _mm256_storeu_ps(s + j, p);
        }
    }

    /* ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) elementwise: ggml's hsum of 8 lanes, for 8 outputs */
    static inline __m256 pyl_lane_tree(const __m256 *a) {
        return _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a[0], a[4]), _mm256_add_ps(a[2], a[6])),
                             _mm256_add_ps(_mm256_add_ps(a[1], a[5]), _mm256_add_ps(a[3], a[7])));
    }

    /* out[0 : dv & ~7] = sum_j p_j v_j as tinyBLAS computes mul_mat(v^T, p): per 8 columns,
       lane j % 8 of an FMA chain over j in order, then ggml's hsum of the 8 lanes. The cells go in
       blocks of PYL_PVB (a multiple of 8: lane = j % 8 within a block too) and each block serves
       every column group while its V rows are in L1 (the chains carried in acc: (dv / 8) * 64
       floats between blocks). */
    #define PYL_PVB 32
    static inline void pyl_pv_blocked(const float *p, const uint8_t *v, int64_t vst, int f16,
                                      const int32_t *cells, int n, int dv, float *acc,
                                      float *out) {
        const int nc = dv / 8;
        int j0, j, l, c;
        memset(acc, 0, sizeof(float) * 64 * (size_t)nc);
        for (j0 = 0; j0 < n; j0 += PYL_PVB) {
            const int j1 = j0 + PYL_PVB < n ? j0 + PYL_PVB : n;
            for (c = 0; c < nc; c++) {
                float *ac = acc + 64 * c;
                __m256 a[8];
                for (l = 0; l < 8; l++)
                    a[l] = _mm256_loadu_ps(ac + 8 * l);
                for (j = j0; j + 8 <= j1; j += 8)
                    for (l = 0; l < 8; l++)
                        a[l] = _mm256_fmadd_ps(_mm256_set1_ps(p[j + l]),
                                               pyl_ld8(v + (int64_t)cells[j + l] * vst, f16, 8 * c), a[l]);
                for (l = 0; j < j1; j++, l++)
                    a[l] = _mm256_fmadd_ps(_mm256_set1_ps(p[j]),
                                           pyl_ld8(v + (int64_t)cells[j] * vst, f16, 8 * c), a[l]);
                for (l = 0; l < 8; l++)
                    _mm256_storeu_ps(ac + 8 * l, a[l]);
            }
            if (j1 < n)          /* the next block's rows, for the first column group */
                for (j = j1; j < j1 + PYL_PVB && j < n; j++)
                    _mm_prefetch((const char *)(v + (int64_t)cells[j] * vst), _MM_HINT_T0);
        }
        for (c = 0; c < nc; c++) {
            __m256 a[8];
            for (l = 0; l < 8; l++)
                a[l] = _mm256_loadu_ps(acc + 64 * c + 8 * l);
            _mm256_storeu_ps(out + 8 * c, pyl_lane_tree(a));
        }
    }

    /* one output element past the last 8 (dv % 8): the same 8 lanes, scalar */
    static inline float pyl_pv_1(const float *p, const uint8_t *v, int64_t vst, int f16,
                                 const int32_t *cells, int n, int e) {
        float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int j;
        for (j = 0; j < n; j++)
            a[j & 7] = fmaf(p[j], pyl_ld1(v + (int64_t)cells[j] * vst, f16, e), a[j & 7]);
        return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
    }

    #if defined(__AVX512F__) && defined(__AVX512DQ__)
    #define PYL_ATTN512 1
    /* pyl_qk_2x4 with the two cells in the halves of 512-bit registers and q already rounded
       (qb: 4 rows of d floats): per half the same FMA chain, hsum and tail */
    static inline __attribute__((always_inline)) void pyl_qk_2x4_512(
            const float *qb, const uint8_t *const *rows, int f16, int d, float *r) {
        __m512 a[4];
        int i, m;
        for (m = 0; m < 4; m++)
            a[m] = _mm512_setzero_ps();
        for (i = 0; i + 8 <= d; i += 8) {
            __m512 kz;
            if (f16)
                kz = _mm512_cvtph_ps(_mm256_inserti128_si256(
                    _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(rows[0] + 2 * (int64_t)i))),
                    _mm_loadu_si128((const __m128i *)(rows[1] + 2 * (int64_t)i)), 1));
            else
                kz = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps((const float *)rows[0] + i)),
                                        _mm256_loadu_ps((const float *)rows[1] + i), 1);
            for (m = 0; m < 4; m++)
                a[m] = _mm512_fmadd_ps(_mm512_broadcast_f32x8(_mm256_loadu_ps(qb + (int64_t)m * d + i)),
                                       kz, a[m]);
        }
        for (m = 0; m < 8; m++) {
            int e;
            r[m] = pyl_ghsum8(m < 4 ? _mm512_castps512_ps256(a[m]) : _mm512_extractf32x8_ps(a[m - 4], 1));
            for (e = i; e < d; e++)
                r[m] += qb[(int64_t)(m & 3) * d + e] * pyl_ld1(rows[m >> 2], f16, e);
        }
    }

    /* pyl_pv_blocked's arithmetic for 4 heads at once: P2[32 j + 8 t + l] = p_t[j] (l < 8); two heads per 512-bit
       accumulator, each V row slice loaded and converted once; per half the same lanes, FMA
       order and lane tree */
    static inline __attribute__((always_inline)) void pyl_pv_4h_512(
            const float *P2, const uint8_t *v, int64_t vst, int f16, const int32_t *cells,
            int n, int d0, float *const *out) {
        __m512 a[8][2];
        int j, l, k;
        for (l = 0; l < 8; l++)
            a[l][0] = a[l][1] = _mm512_setzero_ps();
        for (j = 0; j + 8 <= n; j += 8) {
            if (j + PYL_PF + 8 <= n)
                for (l = 0; l < 8; l++)
                    _mm_prefetch((const char *)(v + (int64_t)cells[j + PYL_PF + l] * vst) + d0 * (f16 ? 2 : 4),
                                 _MM_HINT_T0);
            for (l = 0; l < 8; l++) {
                const __m512 vz = _mm512_broadcast_f32x8(pyl_ld8(v + (int64_t)cells[j + l] * vst, f16, d0));
                a[l][0] = _mm512_fmadd_ps(_mm512_loadu_ps(P2 + 32 * (int64_t)(j + l)), vz, a[l][0]);
                a[l][1] = _mm512_fmadd_ps(_mm512_loadu_ps(P2 + 32 * (int64_t)(j + l) + 16), vz, a[l][1]);
            }
        }
        for (l = 0; j < n; j++, l++) {
            const __m512 vz = _mm512_broadcast_f32x8(pyl_ld8(v + (int64_t)cells[j] * vst, f16, d0));
            a[l][0] = _mm512_fmadd_ps(_mm512_loadu_ps(P2 + 32 * (int64_t)j), vz, a[l][0]);
            a[l][1] = _mm512_fmadd_ps(_mm512_loadu_ps(P2 + 32 * (int64_t)j + 16), vz, a[l][1]);
        }
        for (k = 0; k < 2; k++) {
            const __m512 t = _mm512_add_ps(
                _mm512_add_ps(_mm512_add_ps(a[0][k], a[4][k]), _mm512_add_ps(a[2][k], a[6][k])),
                _mm512_add_ps(_mm512_add_ps(a[1][k], a[5][k]), _mm512_add_ps(a[3][k], a[7][k])));
            _mm256_storeu_ps(out[2 * k] + d0, _mm512_castps512_ps256(t));
            _mm256_storeu_ps(out[2 * k + 1] + d0, _mm512_extractf32x8_ps(t, 1));
        }
    }
    #endif

    static inline __attribute__((always_inline)) void pyl_attn_group_t(
            const float *const *q, const uint8_t *k, const uint8_t *v, int64_t kst, int64_t vst,
            const int f16, const int32_t *cells, int n, int dk, int dv, float scale, float cap,
            float *s, int64_t ns, float *const *out, const float *sk) {
        float mx[4], r[8], inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
        __m128 vmx = _mm_set1_ps(-INFINITY);
        int j, t, m, d0, e;
        float *qb = s + 4 * ns;                                 /* see pyl_attn_scratch */
    #if PYL_ATTN512
        float *P2 = qb + 4 * (int64_t)dk;
    #endif
        for (t = 0; t < 4; t++)
            for (e = 0; e < dk; e++)
                qb[(int64_t)t * dk + e] = pyl_q1(q[t], f16, e);
        for (j = 0; j < n; j += 2) {
            const uint8_t *rows[2];
            __m256 x;
            rows[0] = k + (int64_t)cells[j] * kst;
            rows[1] = k + (int64_t)cells[j + 1 < n ? j + 1 : j] * kst;   /* past end: repeat */
            if (j + PYL_PF + 1 < n) {
                int64_t b;
                for (b = 0; b < (int64_t)dk * (f16 ? 2 : 4); b += 64) {
                    _mm_prefetch((const char *)(k + (int64_t)cells[j + PYL_PF] * kst) + b, _MM_HINT_T0);
                    _mm_prefetch((const char *)(k + (int64_t)cells[j + PYL_PF + 1] * kst) + b, _MM_HINT_T0);
                }
            }
    #if PYL_ATTN512
            pyl_qk_2x4_512(qb, rows, f16, dk, r);
    #else
            pyl_qk_2x4(qb, rows, f16, dk, r);
    #endif
            x = _mm256_mul_ps(_mm256_set1_ps(scale), _mm256_loadu_ps(r));
            if (cap > 0.0f) {
                _mm256_storeu_ps(r, x);
                for (m = 0; m < 8; m++)
                    r[m] = tanhf(r[m] * inv_cap) * cap;
                x = _mm256_loadu_ps(r);
            }
            _mm256_storeu_ps(r, x);
            /* a repeated row has the same scores: the max needs no masking */
            vmx = _mm_max_ps(vmx, _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1)));
            for (t = 0; t < 4; t++)
                s[t * ns + j] = r[t];
            if (j + 1 < n)
                for (t = 0; t < 4; t++)
                    s[t * ns + j + 1] = r[4 + t];
        }
        _mm_storeu_ps(mx, vmx);
        if (sk)
            for (t = 0; t < 4; t++)
                mx[t] = mx[t] > sk[t] ? mx[t] : sk[t];
    #if PYL_ATTN512
        for (t = 0; t < 4; t++) {
            pyl_softmax_p(s + t * ns, n, mx[t], f16, sk ? sk + t : NULL);
            for (j = 0; j < n; j++)
                _mm256_storeu_ps(P2 + 32 * (int64_t)j + 8 * t, _mm256_set1_ps(s[t * ns + j]));
        }
        for (d0 = 0; d0 + 8 <= dv; d0 += 8)
            pyl_pv_4h_512(P2, v, vst, f16, cells, n, d0, out);
        for (t = 0; t < 4; t++)
            for (e = d0; e < dv; e++)
                out[t][e] = pyl_pv_1(s + t * ns, v, vst, f16, cells, n, e);
    #else
        for (t = 0; t < 4; t++) {
            float *p = s + t * ns;
            pyl_softmax_p(p, n, mx[t], f16, sk ? sk + t : NULL);
            pyl_pv_blocked(p, v, vst, f16, cells, n, dv, s + 4 * ns + 4 * (int64_t)dk, out[t]);
            for (e = dv & ~7; e < dv; e++)
                out[t][e] = pyl_pv_1(p, v, vst, f16, cells, n, e);
        }
    #endif
    }
    #else
    /* portable path: the same lanes and roundings, libm's expf for ggml_v_expf (not bit-exact) */
    static inline void pyl_attn_group_t(
            const float *const *q, const uint8_t *k, const uint8_t *v, int64_t kst, int64_t vst,
            const int f16, const int32_t *cells, int n, int dk, int dv, float scale, float cap,
            float *s, int64_t ns, float *const *out, const float *sk) {
        float inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f;
        int j, t, e, l;
        (void)ns;
        for (t = 0; t < 4; t++) {
            float mx = -INFINITY, inv;
            double sum = 0.0;
            for (j = 0; j < n; j++) {
                const uint8_t *row = k + (int64_t)cells[j] * kst;
                float a[8] = {0, 0, 0, 0, 0, 0, 0, 0}, x;
                for (e = 0; e + 8 <= dk; e += 8)
                    for (l = 0; l < 8; l++) {
                        float qe = f16 ? pyl_p_h2f(pyl_p_f2h(q[t][e + l])) : q[t][e + l];
                        a[l] = fmaf(qe, pyl_ld1(row, f16, e + l), a[l]);
                    }
                x = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
                for (; e < dk; e++)
                    x += (f16 ? pyl_p_h2f(pyl_p_f2h(q[t][e])) : q[t][e]) * pyl_ld1(row, f16, e);
                x *= scale;
                if (cap > 0.0f)
                    x = tanhf(x * inv_cap) * cap;
                s[j] = x;
                mx = x > mx ? x : mx;
            }
            if (sk)
                mx = mx > sk[t] ? mx : sk[t];
            for (j = 0; j < n; j += 8) {
                float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (l = 0; l < 8 && j + l < n; l++)
                    a[l] = s[j + l] = expf(s[j + l] - mx);
                sum += (double)(((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])));
            }
            if (sk)
                sum += (double)(float)exp((double)(sk[t] - mx));
            inv = (float)(1.0 / sum);
            for (j = 0; j < n; j++) {
                s[j] *= inv;
                if (f16)
                    s[j] = pyl_p_h2f(pyl_p_f2h(s[j]));
            }
            for (e = 0; e < dv; e++) {
                float a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                for (j = 0; j < n; j++)
                    a[j & 7] = fmaf(s[j], pyl_ld1(v + (int64_t)cells[j] * vst, f16, e), a[j & 7]);
                out[t][e] = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
            }
        }
    }
    #endif

    /* floats of scratch per thread: 4 score rows of ns, the 4 rounded q rows, and the
       interleaved probabilities (AVX-512: 32 per cell) or pyl_pv_blocked's accumulators (8 dv) */
    #ifndef PYL_ATTN512          /* no AVX-512, or the portable build */
    #define PYL_ATTN512 0
    #endif
    static int64_t pyl_attn_scratch(int64_t ns, int dk, int dv) {
        return 4 * ns + 4 * (int64_t)dk + (PYL_ATTN512 ? 32 * ns : 8 * (int64_t)dv);
    }

    /* One task: nh (1..4) heads h0.. sharing the KV head whose first element in cell 0 is at
       k/v. q_row/out_row: this query's [n_head, d] rows; s: scratch of 4 * ns floats,
       ns >= n rounded up to 8. Missing heads repeat the last one (same values rewritten). */
    static void pyl_attn_task(const float *q_row, int h0, int nh, const uint8_t *k,
                              const uint8_t *v, int64_t kst, int64_t vst, int f16,
                              const int32_t *cells, int n, int dk, int dv, float scale,
                              float cap, float *s, int64_t ns, float *out_row,
                              const float *sinks) {
        const float *q[4];
        float *out[4], skv[4];
        const float *sk = sinks ? skv : NULL;
        int t;
        for (t = 0; t < 4; t++) {
            int h = h0 + (t < nh ? t : nh - 1);
            q[t] = q_row + (int64_t)h * dk;
            out[t] = out_row + (int64_t)h * dv;
            skv[t] = sinks ? sinks[h] : 0.0f;
        }
        if (n <= 0) {
            for (t = 0; t < nh; t++)
                memset(out[t], 0, sizeof(float) * (size_t)dv);
            return;
        }
        if (f16)
            pyl_attn_group_t(q, k, v, kst, vst, 1, cells, n, dk, dv, scale, cap, s, ns, out, sk);
        else
            pyl_attn_group_t(q, k, v, kst, vst, 0, cells, n, dk, dv, scale, cap, s, ns, out, sk);
    }
    """
    int PYL_VM_SIMD
    int PYL_HB
    int64_t pyl_attn_scratch(int64_t ns, int dk, int dv)
    void pyl_attn_task(const float* q_row, int h0, int nh, const uint8_t* k, const uint8_t* v,
                       int64_t kst, int64_t vst, int f16, const int32_t* cells, int n, int dk,
                       int dv, float scale, float cap, float* s, int64_t ns,
                       float* out_row, const float* sinks) noexcept nogil


def simd():
    """True when the AVX2/FMA/F16C kernels were compiled in."""
    return bool(PYL_VM_SIMD)


def attention(const float[:, :, ::1] q, const uint8_t[:, ::1] kb, const uint8_t[:, ::1] vb,
              bint f16, int n_head_kv, const int32_t[::1] cells, const int64_t[::1] q_start,
              const int64_t[::1] q_end, float scale, float softcap, float[:, :, ::1] out,
              int max_len, int heads_per_task, int n_threads, const float[::1] sinks=None):
    """q [n_q, n_head, dk]; kb/vb the caches as bytes [n_cells, row_bytes]; out [n_q, n_head, dv].

    heads_per_task (1..4) only changes how work is split, never a result. The caller validated
    cells (in range) and q_start/q_end (0 <= start <= end <= len(cells)). sinks: [n_head]
    attention sinks (gpt-oss; ggml_soft_max_add_sinks: each head's max and sum count exp(sink)).
    """
    cdef const float* sp = NULL
    if sinks is not None:
        if sinks.shape[0] != q.shape[1]:
            raise ValueError("attention: sinks must have one value per head")
        sp = &sinks[0]
    cdef int n_q = q.shape[0], n_head = q.shape[1], dk = q.shape[2], dv = out.shape[2]
    cdef int group = n_head // n_head_kv, esz = 2 if f16 else 4
    cdef int hb = max(1, min(heads_per_task, PYL_HB, group))
    cdef int blocks = (group + hb - 1) // hb         # tasks per (query, kv head)
    cdef int64_t kst = kb.strides[0], vst = vb.strides[0], ns = (max_len + 7) // 8 * 8
    cdef Py_ssize_t t, n_tasks = <Py_ssize_t>n_q * n_head_kv * blocks
    cdef int i, g, b, h0
    cdef const int32_t* cp = &cells[0] if cells.shape[0] > 0 else NULL
    cdef float[:, ::1] scratch       # 4 score rows per thread
    if n_tasks == 0:
        return
    if cp == NULL or max_len <= 0:
        out[:, :, :] = 0
        return
    scratch = np.empty((max(n_threads, 1), pyl_attn_scratch(ns, dk, dv)), dtype=np.float32)
    if n_threads == 1:              # no OpenMP region for a one-token decode's small attention
        with nogil:
            for t in range(n_tasks):
                i = t // (n_head_kv * blocks)
                g = (t // blocks) % n_head_kv
                b = t % blocks
                _task(q, kb, vb, cp, q_start, q_end, out, i, g * group + b * hb,
                      min(hb, group - b * hb), g, dk, dv, esz, kst, vst, f16, scale, softcap,
                      &scratch[0, 0], ns, sp)
        return
    for t in prange(n_tasks, nogil=True, num_threads=n_threads, schedule="dynamic", chunksize=1):
        i = t // (n_head_kv * blocks)
        g = (t // blocks) % n_head_kv
        b = t % blocks
        _task(q, kb, vb, cp, q_start, q_end, out, i, g * group + b * hb,
              min(hb, group - b * hb), g, dk, dv, esz, kst, vst, f16, scale, softcap,
              &scratch[threadid(), 0], ns, sp)


cdef inline void _task(const float[:, :, ::1] q, const uint8_t[:, ::1] kb,
                       const uint8_t[:, ::1] vb, const int32_t* cp, const int64_t[::1] q_start,
                       const int64_t[::1] q_end, float[:, :, ::1] out, int i, int h0, int nh,
                       int g, int dk, int dv, int esz, int64_t kst, int64_t vst, bint f16,
                       float scale, float softcap, float* scratch, int64_t ns,
                       const float* sp) noexcept nogil:
    """Query i, heads h0 .. h0 + nh - 1 (sharing kv head g)."""
    pyl_attn_task(&q[i, 0, 0], h0, nh, &kb[0, 0] + g * dk * esz, &vb[0, 0] + g * dv * esz,
                  kst, vst, f16, cp + q_start[i], <int>(q_end[i] - q_start[i]), dk, dv, scale,
                  softcap, scratch, ns, &out[i, 0, 0], sp)


def check_lists(const int32_t[::1] cells, const int64_t[::1] q_start, const int64_t[::1] q_end,
                int64_t n_cells):
    """(longest range, total listed) after checking every cell index is in [0, n_cells) and
    0 <= q_start[i] <= q_end[i] <= len(cells); (-1, 0) on a bad cell, (-2, 0) on a bad range."""
    cdef Py_ssize_t i, n = cells.shape[0], nq = q_start.shape[0]
    cdef int64_t longest = 0, total = 0, ln
    for i in range(n):
        if cells[i] < 0 or cells[i] >= n_cells:
            return -1, 0
    for i in range(nq):
        ln = q_end[i] - q_start[i]
        if q_start[i] < 0 or ln < 0 or q_end[i] > n:
            return -2, 0
        total += ln
        if ln > longest:
            longest = ln
    return longest, total
