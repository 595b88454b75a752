/* Small vector-math helpers shared by _ops.pyx and _attn.pyx (non-matmul CPU kernels).
 *
 * PYL_VM_SIMD is 1 when AVX2 + FMA + F16C are targeted; every function used on both paths has a
 * scalar twin. Fixed operation order everywhere: results depend only on the inputs.
 */
#ifndef PYL_VMATH_H
#define PYL_VMATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define PYL_VM_SIMD 1
#else
#define PYL_VM_SIMD 0
#endif

/* f16 bits -> f32 (exact) */
static inline float pyl_h2f(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
    float f;
    if (e == 0) {
        f = (float)m * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    bits = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
    memcpy(&f, &bits, 4);
    return f;
#endif
}

#if PYL_VM_SIMD
/* 8-lane exp: n = round(x / ln2), r = x - n ln2 (two-part ln2), degree-7 Taylor polynomial of
 * e^r (|r| <= 0.35: truncation < 1e-8 relative), times 2^n. Under 2 ulp. Saturates: x > 88 -> inf,
 * x < -87 -> 0 (keeps 2^n a normal float); NaN stays NaN. */
static inline __m256 pyl_exp8(__m256 x) {
    const __m256 hi = _mm256_set1_ps(88.0f), lo = _mm256_set1_ps(-87.0f);
    __m256 xc = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
    __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
    y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/* horizontal sum, fixed tree: (l0+l4, l1+l5, l2+l6, l3+l7) -> pairs -> one */
static inline float pyl_hsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 8 values from an f16 (f16 != 0) or f32 row at element offset i */
static inline __m256 pyl_ld8(const void *p, int f16, int64_t i) {
    return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)))
               : _mm256_loadu_ps((const float *)p + i);
}
#endif

static inline float pyl_ld1(const void *p, int f16, int64_t i) {
    return f16 ? pyl_h2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

#endif
