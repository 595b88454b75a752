# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""KV caches of type bf16, q8_0, q4_0 (and f16/f32 mixed with them): set_rows and attention.

Types are ggml ids: 0 f32, 1 f16, 2 q4_0, 8 q8_0, 30 bf16. Rows are bytes [n_cells, row_bytes].

set_rows writes exactly what llama.cpp's CPU backend writes (the type's from_float): q8_0 the
x86 AVX2 quantize_row_q8_0 (d = amax/127, id = 127/amax, q = round-half-even(x * id)), q4_0
quantize_row_q4_0_ref, bf16 round-to-nearest-even; scales stored as f16 (round-to-nearest-even).

attention, per (query, head):
  1. with qconv (llama.cpp's flash-attention arithmetic) q is converted to K's vec_dot_type: q8_0
     for q8_0/q4_0 K (same quantizer as above), bf16 for bf16 K; without it (the default, see
     docs/kv_cache_types.md: q8_0 q costs Qwen2.5 several % of perplexity) q stays f32;
  2. s_j = dot(q, k_j): q8_0 q with block K as ggml_vec_dot_q{8,4}_0_q8_0 on AVX2 (per 32-block,
     8 int32 lanes of 4 products each, acc_l = fma(d_k * d_q, lane_l, acc_l), then a fixed
     horizontal sum); f32 q: one 8-lane FMA chain over the exactly dequantized K row, fixed
     horizontal sum, d % 8 tail in order; then s_j *= scale,
     optional softcap tanh(s_j / cap) * cap;
  3. p_j = exp(s_j - max) (8-lane exp), sum in double; out = (sum_j p_j v_j) / sum with V rows
     dequantized to f32 exactly (dequantize_row_*) and each output lane one FMA chain over j.
Every (query, head) pair is computed alone, so results do not depend on the other queries, the
thread count or the split (docs/architecture.md). The integer dots are exact, so the portable
path gives the same scores as the AVX2 one; only its exp differs.
"""
import numpy as np

from cython.parallel cimport prange, threadid
from libc.stdint cimport int32_t, int64_t, uint8_t

cdef extern from *:
    """
    #include <math.h>
    #include <string.h>
    #include <stdint.h>
    #include "pyl_vmath.h"

    enum { PYL_T_F32 = 0, PYL_T_F16 = 1, PYL_T_Q4_0 = 2, PYL_T_Q8_0 = 8, PYL_T_BF16 = 30 };
    #define PYL_KVQ_HB 8      /* most heads per task */
    #define PYL_KVQ_CH 16     /* cells dequantized at a time */

    /* bytes taken by e elements of type t (e a multiple of 32 for block types) */
    static inline int64_t pyl_kvq_bytes(int t, int64_t e) {
        switch (t) {
        case PYL_T_F32: return 4 * e;
        case PYL_T_Q8_0: return e / 32 * 34;
        case PYL_T_Q4_0: return e / 32 * 18;
        default: return 2 * e;
        }
    }

    static inline uint16_t pyl_kvq_f2h(float f) {          /* f32 -> f16, nearest even */
    #if defined(__F16C__)
        return _cvtss_sh(f, 0);
    #else
        uint32_t x, ax, sign, r;
        memcpy(&x, &f, 4);
        sign = (x >> 16) & 0x8000u;
        ax = x & 0x7fffffffu;
        if (ax >= 0x7f800000u)
            return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u : 0u));
        if (ax >= 0x477ff000u)
            return (uint16_t)(sign | 0x7c00u);
        if (ax < 0x38800000u) {
            float a;
            memcpy(&a, &ax, 4);
            return (uint16_t)(sign | (uint32_t)nearbyintf(a * 16777216.0f));
        }
        r = ax + 0xfffu + ((ax >> 13) & 1u);
        return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
    #endif
    }

    static inline float pyl_kvq_h(const uint8_t *p) {      /* unaligned f16 -> f32 */
        uint16_t h;
        memcpy(&h, p, 2);
        return pyl_h2f(h);
    }

    static inline uint16_t pyl_kvq_f2bf(float f) {         /* ggml_compute_fp32_to_bf16 */
        uint32_t u;
        memcpy(&u, &f, 4);
        if ((u & 0x7fffffffu) > 0x7f800000u)
            return (uint16_t)((u >> 16) | 64u);
        return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
    }

    static inline float pyl_kvq_bf2f(uint16_t h) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }

    /* x86 AVX2 quantize_row_q8_0 on one block: qs[32] and the f16-rounded scale (as f32) */
    static inline float pyl_q8_0_quant(const float *x, int8_t *qs, uint16_t *dh) {
        float amax = 0.0f, d, id;
        int j;
        for (j = 0; j < 32; j++) {
            float a = fabsf(x[j]);
            amax = a > amax ? a : amax;
        }
        d = amax / 127.f;
        id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (j = 0; j < 32; j++) {
            float r = nearbyintf(x[j] * id);
            int32_t v = fabsf(r) < 2147483648.0f ? (int32_t)r : INT32_MIN;
            qs[j] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
        }
        *dh = pyl_kvq_f2h(d);
        return pyl_h2f(*dh);
    }

    /* quantize_row_q4_0_ref on one block */
    static inline void pyl_q4_0_quant(const float *x, uint8_t *blk) {
        float amax = 0.0f, mx = 0.0f, d, id;
        uint16_t dh;
        int j;
        for (j = 0; j < 32; j++)
            if (amax < fabsf(x[j])) {
                amax = fabsf(x[j]);
                mx = x[j];
            }
        d = mx / -8;
        id = d ? 1.0f / d : 0.0f;
        dh = pyl_kvq_f2h(d);
        memcpy(blk, &dh, 2);
        for (j = 0; j < 16; j++) {
            /* two roundings, x * id then + 8.5: llama.cpp runs this in ggml-base, built without
               FMA; gcc would contract it into an fma here (a different nibble now and then) */
            volatile float ta = x[j] * id, tb = x[16 + j] * id;
            int8_t a = (int8_t)(ta + 8.5f), b = (int8_t)(tb + 8.5f);
            uint8_t xi0 = (uint8_t)(a < 15 ? a : 15), xi1 = (uint8_t)(b < 15 ? b : 15);
            blk[2 + j] = (uint8_t)(xi0 | (xi1 << 4));
        }
    }

    /* one row of n elements into dst, as the type's from_float */
    static void pyl_kvq_encode(const float *x, uint8_t *dst, int t, int64_t n) {
        int64_t i;
        if (t == PYL_T_Q8_0) {
            for (i = 0; i < n; i += 32) {
                uint16_t dh;
                pyl_q8_0_quant(x + i, (int8_t *)(dst + i / 32 * 34 + 2), &dh);
                memcpy(dst + i / 32 * 34, &dh, 2);
            }
        } else if (t == PYL_T_Q4_0) {
            for (i = 0; i < n; i += 32)
                pyl_q4_0_quant(x + i, dst + i / 32 * 18);
        } else if (t == PYL_T_BF16) {
            for (i = 0; i < n; i++) {
                uint16_t h = pyl_kvq_f2bf(x[i]);
                memcpy(dst + 2 * i, &h, 2);
            }
        } else if (t == PYL_T_F16) {
            for (i = 0; i < n; i++) {
                uint16_t h = pyl_kvq_f2h(x[i]);
                memcpy(dst + 2 * i, &h, 2);
            }
        } else {
            memcpy(dst, x, (size_t)n * 4);
        }
    }

    /* element e of a row of type t, dequantized exactly */
    static inline float pyl_kvq_ld1(const uint8_t *p, int t, int64_t e) {
        const uint8_t *b;
        switch (t) {
        case PYL_T_F32: { float f; memcpy(&f, p + 4 * e, 4); return f; }
        case PYL_T_F16: return pyl_kvq_h(p + 2 * e);
        case PYL_T_BF16: { uint16_t h; memcpy(&h, p + 2 * e, 2); return pyl_kvq_bf2f(h); }
        case PYL_T_Q8_0:
            b = p + e / 32 * 34;
            return (float)(int8_t)b[2 + e % 32] * pyl_kvq_h(b);
        default:
            b = p + e / 32 * 18;
            return (float)((e % 32 < 16 ? b[2 + e % 32] & 15 : b[2 + e % 32 - 16] >> 4) - 8) * pyl_kvq_h(b);
        }
    }

    /* hsum of 8 lanes in pyl_hsum8's tree: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) */
    static inline float pyl_kvq_hsum(const float *a) {
        float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
        return (s0 + s2) + (s1 + s3);
    }

    /* K block row (nb blocks) . q8_0 query (qq, qd) as ggml_vec_dot_q{8,4}_0_q8_0 (AVX2) */
    static inline float pyl_kvq_dot_blocks(const uint8_t *k, int t, const int8_t *qq,
                                           const float *qd, int nb) {
        int b;
    #if PYL_VM_SIMD
        __m256 acc = _mm256_setzero_ps();
        for (b = 0; b < nb; b++) {
            __m256i qx, qy = _mm256_loadu_si256((const __m256i *)(qq + 32 * b));
            float dk;
            if (t == PYL_T_Q8_0) {
                dk = pyl_kvq_h(k + 34 * b);
                qx = _mm256_loadu_si256((const __m256i *)(k + 34 * b + 2));
            } else {
                __m128i n = _mm_loadu_si128((const __m128i *)(k + 18 * b + 2));
                dk = pyl_kvq_h(k + 18 * b);
                qx = _mm256_set_m128i(_mm_srli_epi16(n, 4), n);
                qx = _mm256_sub_epi8(_mm256_and_si256(qx, _mm256_set1_epi8(15)), _mm256_set1_epi8(8));
            }
            __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx));
            __m256 lanes = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(dk * qd[b]), lanes, acc);
        }
        return pyl_hsum8(acc);
    #else
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (b = 0; b < nb; b++) {
            int l, e;
            float dk = pyl_kvq_h(k + (t == PYL_T_Q8_0 ? 34 : 18) * b);
            for (l = 0; l < 8; l++) {
                int32_t s = 0;
                for (e = 4 * l; e < 4 * l + 4; e++) {
                    int x = t == PYL_T_Q8_0 ? (int8_t)k[34 * b + 2 + e]
                          : (e < 16 ? k[18 * b + 2 + e] & 15 : k[18 * b + 2 + e - 16] >> 4) - 8;
                    s += x * qq[32 * b + e];
                }
                acc[l] = fmaf(dk * qd[b], (float)s, acc[l]);
            }
        }
        return pyl_kvq_hsum(acc);
    #endif
    }

    #if PYL_VM_SIMD
    /* 8 f32 values of a row of type t from element i (i % 8 == 0) */
    static inline __m256 pyl_kvq_ld8(const uint8_t *p, int t, int64_t i) {
        const uint8_t *b;
        __m128i n;
        switch (t) {
        case PYL_T_F32: return _mm256_loadu_ps((const float *)(p + 4 * i));
        case PYL_T_F16: return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 2 * i)));
        case PYL_T_BF16:
            return _mm256_castsi256_ps(_mm256_slli_epi32(
                _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(p + 2 * i))), 16));
        case PYL_T_Q8_0:
            b = p + i / 32 * 34;
            n = _mm_loadl_epi64((const __m128i *)(b + 2 + i % 32));
            return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(n)),
                                 _mm256_set1_ps(pyl_kvq_h(b)));
        default:
            b = p + i / 32 * 18;
            n = _mm_loadl_epi64((const __m128i *)(b + 2 + i % 16));
            if (i % 32 >= 16)
                n = _mm_srli_epi16(n, 4);
            n = _mm_and_si128(n, _mm_set1_epi8(15));
            return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(n),
                                                                     _mm256_set1_epi32(8))),
                                 _mm256_set1_ps(pyl_kvq_h(b)));
        }
    }
    #endif

    /* float K row (f32/f16/bf16) . qf: one 8-lane FMA chain, hsum, tail in order */
    static inline float pyl_kvq_dot_float(const uint8_t *k, int t, const float *qf, int d) {
        int i = 0, l;
        float r;
    #if PYL_VM_SIMD
        __m256 acc = _mm256_setzero_ps();
        for (; i + 8 <= d; i += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(qf + i), pyl_kvq_ld8(k, t, i), acc);
        r = pyl_hsum8(acc);
    #else
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (; i + 8 <= d; i += 8)
            for (l = 0; l < 8; l++)
                acc[l] = fmaf(qf[i + l], pyl_kvq_ld1(k, t, i + l), acc[l]);
        r = pyl_kvq_hsum(acc);
    #endif
        (void)l;
        for (; i < d; i++)
            r += qf[i] * pyl_kvq_ld1(k, t, i);
        return r;
    }

    /* acc[0:d] = fma(p, v[0:d], acc[0:d]) */
    static inline void pyl_kvq_mad(float *acc, float p, const uint8_t *v, int t, int d) {
        int i = 0;
    #if PYL_VM_SIMD
        __m256 pv = _mm256_set1_ps(p);
        for (; i + 8 <= d; i += 8)
            _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, pyl_kvq_ld8(v, t, i), _mm256_loadu_ps(acc + i)));
    #endif
        for (; i < d; i++)
            acc[i] = fmaf(p, pyl_kvq_ld1(v, t, i), acc[i]);
    }

    /* p = exp(s - mx) in place over n; returns the sum (8-blocks' f32 sums added in double) */
    static inline double pyl_kvq_softmax(float *s, int n, float mx) {
        double sum = 0.0;
        int j;
    #if PYL_VM_SIMD
        for (j = n; j < ((n + 7) & ~7); j++)
            s[j] = -INFINITY;
        for (j = 0; j < n; j += 8) {
            __m256 p = pyl_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(mx)));
            _mm256_storeu_ps(s + j, p);
            sum += (double)pyl_hsum8(p);
        }
    #else
        for (j = 0; j < n; j++) {
            s[j] = expf(s[j] - mx);
            sum += (double)s[j];
        }
    #endif
        return sum;
    }

    /* x[0:n] = H_n x (orthonormal Walsh-Hadamard, Sylvester order) as ggml's CPU FWHT: scale by
       1/sqrtf(n) first, then butterflies (u + v, u - v) over h = 1, 2, ..., n/2; no contraction */
    #if defined(__GNUC__) && !defined(__clang__)
    __attribute__((optimize("fp-contract=off")))
    #endif
    static void pyl_kvq_fwht(float *x, int n) {
        const float s = 1.0f / sqrtf((float)n);
        int h, i, j;
        for (i = 0; i < n; i++)
            x[i] = x[i] * s;
        for (h = 1; h < n; h <<= 1)
            for (i = 0; i < n; i += 2 * h)
                for (j = i; j < i + h; j++) {
                    float u = x[j], v = x[j + h];
                    x[j] = u + v;
                    x[j + h] = u - v;
                }
    }

    /* row of type t -> f32, exactly the values pyl_kvq_ld8 / pyl_kvq_ld1 give */
    static inline void pyl_kvq_deq(const uint8_t *p, int t, int d, float *dst) {
        int i = 0;
    #if PYL_VM_SIMD
        if (t == PYL_T_Q8_0)                    /* the scale converted once per block */
            for (; i + 32 <= d; i += 32) {
                const uint8_t *b = p + i / 32 * 34;
                __m256 dv = _mm256_set1_ps(pyl_kvq_h(b));
                __m128i lo = _mm_loadu_si128((const __m128i *)(b + 2));
                __m128i hi = _mm_loadu_si128((const __m128i *)(b + 18));
                _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), dv));
                _mm256_storeu_ps(dst + i + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(
                    _mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), dv));
                _mm256_storeu_ps(dst + i + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), dv));
                _mm256_storeu_ps(dst + i + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(
                    _mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), dv));
            }
        for (; i + 8 <= d; i += 8)
            _mm256_storeu_ps(dst + i, pyl_kvq_ld8(p, t, i));
    #endif
        for (; i < d; i++)
            dst[i] = pyl_kvq_ld1(p, t, i);
    }

    /* q of one head as the scores use it: q8_0 blocks (qq, qd) or floats (qf) */
    static inline void pyl_kvq_prep_q(const float *q, int kt, int blocks, int qconv, int dk,
                                      float *qf, float *qd, int8_t *qq) {
        int j, b;
        if (blocks)
            for (b = 0; b < dk / 32; b++) {
                uint16_t dh;
                qd[b] = pyl_q8_0_quant(q + 32 * b, qq + 32 * b, &dh);
            }
        else
            for (j = 0; j < dk; j++)
                qf[j] = qconv && kt == PYL_T_BF16 ? pyl_kvq_bf2f(pyl_kvq_f2bf(q[j])) : q[j];
    }

    /* acc[0:d] = fma(p[c], v[c][0:d], acc) for c = 0..m-1 in order (rows d apart, f32):
       the pyl_kvq_mad chain per element, with the accumulator kept in a register */
    static inline void pyl_kvq_mad_rows(float *acc, const float *p, const float *v, int m, int d) {
        int i = 0, c;
    #if PYL_VM_SIMD
        for (; i + 32 <= d; i += 32) {          /* 4 independent chains in flight */
            __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
            __m256 a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);
            for (c = 0; c < m; c++) {
                const float *vr = v + (int64_t)c * d + i;
                __m256 pv = _mm256_set1_ps(p[c]);
                a0 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr), a0);
                a1 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 8), a1);
                a2 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 16), a2);
                a3 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 24), a3);
            }
            _mm256_storeu_ps(acc + i, a0);
            _mm256_storeu_ps(acc + i + 8, a1);
            _mm256_storeu_ps(acc + i + 16, a2);
            _mm256_storeu_ps(acc + i + 24, a3);
        }
        for (; i + 8 <= d; i += 8) {
            __m256 a = _mm256_loadu_ps(acc + i);
            for (c = 0; c < m; c++)
                a = _mm256_fmadd_ps(_mm256_set1_ps(p[c]), _mm256_loadu_ps(v + (int64_t)c * d + i), a);
            _mm256_storeu_ps(acc + i, a);
        }
    #endif
        for (; i < d; i++)
            for (c = 0; c < m; c++)
                acc[i] = fmaf(p[c], v[(int64_t)c * d + i], acc[i]);
    }

    #if PYL_VM_SIMD
    /* r[c] = pyl_kvq_dot_float(k + c * d as f32, qf, d) for c = 0..3, d % 8 == 0: the same four
       FMA chains and hsums, run side by side */
    static inline void pyl_kvq_dot4_f32(const float *k, const float *qf, int d, float *r) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int i;
        for (i = 0; i < d; i += 8) {
            __m256 qv = _mm256_loadu_ps(qf + i);
            a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + i), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + d + i), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 2 * d + i), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k + 3 * d + i), a3);
        }
        r[0] = pyl_hsum8(a0);
        r[1] = pyl_hsum8(a1);
        r[2] = pyl_hsum8(a2);
        r[3] = pyl_hsum8(a3);
    }
    #endif

    /* one query, nh heads (h = 0..nh-1, q and out rows dk / dv apart) sharing one KV head: the
       listed K/V rows are dequantized once, PYL_KVQ_CH cells at a time, for all of them. Per
       head the arithmetic is fixed whatever nh: the f32 dot / FMA chains run on the dequantized
       rows, which hold the same values the row-type loads give, in cell order. k/v point at
       this KV head's first element in cell 0; scratch: s [nh * ns], acc [nh * dv], qf [nh * dk],
       qd [nh * dk / 32], qq [nh * dk] bytes, kf [CH * dk], vf [CH * dv] */
    static void pyl_kvq_task(const float *q, int nh, const uint8_t *k, const uint8_t *v,
                             int64_t kst, int64_t vst, int kt, int vt, int qconv,
                             const int32_t *cells, int n, int dk, int dv, float scale, float cap,
                             float *s, int64_t ns, float *acc, float *qf, float *qd, int8_t *qq,
                             float *kf, float *vf, float *out) {
        int j, j0, m, c, h, nb = dk / 32, blocks = qconv && (kt == PYL_T_Q8_0 || kt == PYL_T_Q4_0);
        float mx[PYL_KVQ_HB], inv[PYL_KVQ_HB], r4[4];
        if (n <= 0) {
            memset(out, 0, sizeof(float) * (size_t)dv * nh);
            return;
        }
        for (h = 0; h < nh; h++) {
            pyl_kvq_prep_q(q + (int64_t)h * dk, kt, blocks, qconv, dk, qf + (int64_t)h * dk,
                           qd + h * nb, qq + (int64_t)h * dk);
            mx[h] = -INFINITY;
        }
        for (j0 = 0; j0 < n; j0 += PYL_KVQ_CH) {
            m = n - j0 < PYL_KVQ_CH ? n - j0 : PYL_KVQ_CH;
            if (!blocks)
                for (c = 0; c < m; c++)
                    pyl_kvq_deq(k + (int64_t)cells[j0 + c] * kst, kt, dk, kf + (int64_t)c * dk);
            for (h = 0; h < nh; h++)
                for (c = 0; c < m; c++) {
                    float x;
    #if PYL_VM_SIMD
                    if (!blocks && dk % 8 == 0 && c % 4 == 0 && c + 4 <= m)
                        pyl_kvq_dot4_f32(kf + (int64_t)c * dk, qf + (int64_t)h * dk, dk, r4);
                    if (!blocks && dk % 8 == 0 && (m - m % 4) > c)
                        x = r4[c % 4];
                    else
    #endif
                    x = blocks
                        ? pyl_kvq_dot_blocks(k + (int64_t)cells[j0 + c] * kst, kt,
                                             qq + (int64_t)h * dk, qd + h * nb, nb)
                        : pyl_kvq_dot_float((const uint8_t *)(kf + (int64_t)c * dk), PYL_T_F32,
                                            qf + (int64_t)h * dk, dk);
                    x *= scale;
                    if (cap > 0.0f)
                        x = tanhf(x * (1.0f / cap)) * cap;
                    s[h * ns + j0 + c] = x;
                    mx[h] = x > mx[h] ? x : mx[h];
                }
        }
        for (h = 0; h < nh; h++)
            inv[h] = (float)(1.0 / pyl_kvq_softmax(s + h * ns, n, mx[h]));
        memset(acc, 0, sizeof(float) * (size_t)dv * nh);
        for (j0 = 0; j0 < n; j0 += PYL_KVQ_CH) {
            m = n - j0 < PYL_KVQ_CH ? n - j0 : PYL_KVQ_CH;
            for (c = 0; c < m; c++)
                pyl_kvq_deq(v + (int64_t)cells[j0 + c] * vst, vt, dv, vf + (int64_t)c * dv);
            for (h = 0; h < nh; h++)
                pyl_kvq_mad_rows(acc + (int64_t)h * dv, s + h * ns + j0, vf, m, dv);
        }
        for (h = 0; h < nh; h++)
            for (j = 0; j < dv; j++)
                out[(int64_t)h * dv + j] = acc[(int64_t)h * dv + j] * inv[h];
    }
    """
    int PYL_VM_SIMD
    void pyl_kvq_fwht(float* x, int n) noexcept nogil
    int64_t pyl_kvq_bytes(int t, int64_t e) noexcept nogil
    void pyl_kvq_encode(const float* x, uint8_t* dst, int t, int64_t n) noexcept nogil
    int PYL_KVQ_HB
    int PYL_KVQ_CH
    void pyl_kvq_task(const float* q, int nh, const uint8_t* k, const uint8_t* v, int64_t kst,
                      int64_t vst, int kt, int vt, int qconv, const int32_t* cells, int n, int dk,
                      int dv, float scale, float cap, float* s, int64_t ns, float* acc, float* qf,
                      float* qd, signed char* qq, float* kf, float* vf, float* out) noexcept nogil


def simd():
    """True when the AVX2/FMA/F16C paths were compiled in."""
    return bool(PYL_VM_SIMD)


def row_bytes(int t, int64_t n):
    """Bytes of a row of n elements of ggml type t (0 f32, 1 f16, 2 q4_0, 8 q8_0, 30 bf16)."""
    return pyl_kvq_bytes(t, n)


def set_rows(uint8_t[:, ::1] cache, int t, const int64_t[::1] cells, const float[:, ::1] rows,
             int n_threads):
    """cache[cells[i]] = encode(rows[i]); False (nothing written) if a cell is out of range."""
    cdef Py_ssize_t i, n = rows.shape[0]
    cdef int64_t ncol = rows.shape[1]
    for i in range(n):
        if cells[i] < 0 or cells[i] >= cache.shape[0]:
            return False
    if n == 0:
        return True
    if pyl_kvq_bytes(t, ncol) != cache.shape[1]:
        raise ValueError("set_rows: row size does not match the cache")
    for i in prange(n, nogil=True, num_threads=n_threads, schedule="static"):
        pyl_kvq_encode(&rows[i, 0], &cache[cells[i], 0], t, ncol)
    return True


def heads_per_task(int n_q, int n_kv, int group, int n_threads):
    """Heads per task: the group split into as few equal blocks (<= PYL_KVQ_HB heads) as give
    every thread a task."""
    cdef int pairs = max(n_q * n_kv, 1)
    cdef int blocks = max((n_threads + pairs - 1) // pairs, (group + PYL_KVQ_HB - 1) // PYL_KVQ_HB)
    return max(1, (group + blocks - 1) // blocks)


def attention(const float[:, :, ::1] q, const uint8_t[:, ::1] kb, const uint8_t[:, ::1] vb,
              int kt, int vt, bint qconv, int n_head_kv, const int32_t[::1] cells,
              const int64_t[::1] q_start, const int64_t[::1] q_end, float scale, float softcap,
              float[:, :, ::1] out, int max_len, int n_threads, int hb=0):
    """q [n_q, n_head, dk]; kb/vb the caches as bytes [n_cells, row_bytes]; out [n_q, n_head, dv].
    qconv: convert q to K's vec_dot_type (llama.cpp's arithmetic) instead of dotting the float q
    with the exactly dequantized K row. A task is one query and up to hb heads of one KV head
    (0: heads_per_task); hb only splits work, never changes a result. The caller validated
    cells and ranges, and dk, dv multiples of 32 for block types."""
    cdef int n_q = q.shape[0], n_head = q.shape[1], dk = q.shape[2], dv = out.shape[2]
    cdef int group = n_head // n_head_kv
    cdef int64_t kst = kb.strides[0], vst = vb.strides[0], ns = (max_len + 7) // 8 * 8
    cdef int nblk, i, g, b, h0, nh
    cdef int64_t width
    cdef Py_ssize_t t, n_tasks
    cdef float* sp
    cdef const int32_t* cp = &cells[0] if cells.shape[0] > 0 else NULL
    cdef float[:, ::1] scratch
    if n_q == 0 or n_head == 0:
        return
    if cp == NULL or max_len <= 0:
        out[:, :, :] = 0
        return
    if hb <= 0:
        hb = heads_per_task(n_q, n_head_kv, group, n_threads)
    hb = max(1, min(hb, PYL_KVQ_HB, group))
    nblk = (group + hb - 1) // hb
    n_tasks = <Py_ssize_t>n_q * n_head_kv * nblk
    width = hb * (ns + dv + dk + dk // 32 + dk // 4) + PYL_KVQ_CH * (dk + dv) + 8
    scratch = np.empty((max(n_threads, 1), width), dtype=np.float32)
    for t in prange(n_tasks, nogil=True, num_threads=n_threads, schedule="dynamic", chunksize=1):
        i = t // (n_head_kv * nblk)
        g = (t // nblk) % n_head_kv
        b = t % nblk
        h0 = g * group + b * hb
        nh = min(hb, group - b * hb)
        sp = &scratch[threadid(), 0]
        pyl_kvq_task(&q[i, h0, 0], nh, &kb[0, 0] + pyl_kvq_bytes(kt, <int64_t>g * dk),
                     &vb[0, 0] + pyl_kvq_bytes(vt, <int64_t>g * dv), kst, vst, kt, vt, qconv,
                     cp + q_start[i], <int>(q_end[i] - q_start[i]), dk, dv, scale, softcap,
                     sp, ns, sp + hb * ns, sp + hb * (ns + dv), sp + hb * (ns + dv + dk),
                     <signed char*>(sp + hb * (ns + dv + dk + dk // 32)),
                     sp + hb * (ns + dv + dk + dk // 32 + dk // 4),
                     sp + hb * (ns + dv + dk + dk // 32 + dk // 4) + PYL_KVQ_CH * dk, &out[i, h0, 0])


def hadamard(float[:, ::1] x, int n, int n_threads):
    """In place: every n-element chunk of the rows of x [r, m * n] -> H_n chunk (base.hadamard,
    bit for bit). Chunks are independent; threads split chunks only for large inputs."""
    cdef Py_ssize_t c, n_chunks = x.shape[0] * (x.shape[1] // n)
    cdef float* p = &x[0, 0] if x.shape[0] > 0 and x.shape[1] > 0 else NULL
    if n <= 0 or n & (n - 1) or x.shape[1] % n:
        raise ValueError(f"hadamard: n={n} must be a power of two dividing the row ({x.shape[1]})")
    if p == NULL:
        return
    if n_chunks * n < 32768 or n_threads <= 1:
        with nogil:
            for c in range(n_chunks):
                pyl_kvq_fwht(p + c * n, n)
        return
    for c in prange(n_chunks, nogil=True, num_threads=n_threads, schedule="static"):
        pyl_kvq_fwht(p + c * n, n)
