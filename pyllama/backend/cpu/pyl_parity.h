/* llama.cpp (ggml CPU, AVX2) numerics that pyllama reproduces bit for bit (docs/numerics.md):
 * - pyl_gexp8: ggml_v_expf (vec.h), the exp of ggml's soft_max and SiLU;
 * - pyl_gelu_table: ggml_table_gelu_f16, GELU of every f16 value rounded to f16 (GGML_GELU_FP16),
 *   built with ggml's own expression. The compiler must contract it the way ggml's build does
 *   (gcc's default -ffp-contract=fast with FMA): checked against libggml-cpu's table, 0 of 63488
 *   finite entries differ; with -ffp-contract=off one does.
 */
#ifndef PYL_PARITY_H
#define PYL_PARITY_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define PYL_PARITY_SIMD 1
#else
#define PYL_PARITY_SIMD 0
#endif

static const float PYL_GELU_COEF_A = 0.044715f;
static const float PYL_SQRT_2_OVER_PI = 0.79788456080286535587989211986876f;

/* ggml_gelu_f32, same expression (same contraction) */
static inline float pyl_gelu_f32(float x) {
    return 0.5f*x*(1.0f + tanhf(PYL_SQRT_2_OVER_PI*x*(1.0f + PYL_GELU_COEF_A*x*x)));
}

/* f16 bits <-> f32 without F16C: exact decode; encode rounds to nearest even */
static inline float pyl_p_h2f(uint16_t h) {
#if PYL_PARITY_SIMD
    return _cvtsh_ss(h);
#else
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 31, m = h & 1023, u;
    float f;
    if (e == 31) u = s | 0x7f800000u | (m << 13);
    else if (e) u = s | ((e + 112) << 23) | (m << 13);
    else { f = (float)m * 5.9604644775390625e-8f; return s ? -f : f; }
    memcpy(&f, &u, 4);
    return f;
#endif
}

static inline uint16_t pyl_p_f2h(float f) {
#if PYL_PARITY_SIMD
    return _cvtss_sh(f, 0);
#else
    uint32_t u, s, a;
    memcpy(&u, &f, 4);
    s = (u >> 16) & 0x8000;
    a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00);
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00);          /* rounds past 65504 */
    if (a < 0x38800000u) {                                          /* f16 subnormal or 0 */
        float t, m;
        memcpy(&t, &a, 4);
        m = t + 0.5f;                                               /* 2^-24 units, RNE by the add */
        memcpy(&a, &m, 4);
        return (uint16_t)(s | (a - 0x3f000000u));
    }
    a += ((a >> 13) & 1) + 0x0fffu - (112u << 23);
    return (uint16_t)(s | (a >> 13));
#endif
}

static uint16_t pyl_gelu_table[1 << 16];
static int pyl_gelu_ready = 0;

static __attribute__((unused)) void pyl_gelu_table_init(void) {
    int i;
    if (pyl_gelu_ready)
        return;
    for (i = 0; i < (1 << 16); i++)
        pyl_gelu_table[i] = pyl_p_f2h(pyl_gelu_f32(pyl_p_h2f((uint16_t)i)));
    pyl_gelu_ready = 1;
}

/* ggml_vec_gelu_f32 / geglu with GGML_GELU_FP16: x <= -10 -> 0, x >= 10 -> x, else the table
   at f16(x) */
static inline float pyl_gelu_lut(float x) {
    if (x <= -10.0f)
        return 0.0f;
    if (x >= 10.0f)
        return x;
    return pyl_p_h2f(pyl_gelu_table[pyl_p_f2h(x)]);
}

#if PYL_PARITY_SIMD
/* ggml_v_expf (AVX2 + FMA), verbatim */
static inline __m256 pyl_gexp8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(
        _mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
    const __m256i c = _mm256_castps_si256(
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n),
                      _mm256_set1_ps(126), _CMP_GT_OQ));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b,
                                                                     _mm256_set1_ps(0x1.573e2ep-5f)), u,
                                                     _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b,
                                                                     _mm256_set1_ps(0x1.fffdb6p-2f))),
                                     u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    if (!_mm256_movemask_ps(_mm256_castsi256_ps(c)))
        return _mm256_fmadd_ps(j, k, k);
    const __m256i g = _mm256_and_si256(
        _mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
        _mm256_set1_epi32(0x82000000u));
    const __m256 s1 =
        _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000u)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256i d = _mm256_castps_si256(
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n),
                      _mm256_set1_ps(192), _CMP_GT_OQ));
    return _mm256_or_ps(
        _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
        _mm256_andnot_ps(
            _mm256_castsi256_ps(d),
            _mm256_or_ps(
                _mm256_and_ps(_mm256_castsi256_ps(c),
                              _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}

/* ggml_v_silu: x / (1 + exp(-x)) */
static inline __m256 pyl_gsilu8(__m256 x) {
    __m256 e = pyl_gexp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

/* ggml's AVX hsum (tinyBLAS hsum, hsum_float_8, soft_max block sums):
   ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) */
static inline float pyl_ghsum8(__m256 a) {
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#endif

/* SiLU of n values, times g (optional): y = silu(x) * g (ggml_vec_swiglu_f32 / ggml_silu: 8 at a
 * time by pyl_gsilu8, a partial last 8 through a zero-padded block, so each value's bits do not
 * depend on where a row starts or ends); shared by _ops (the unary ops) and _mmid (the fused MoE
 * experts) */
static inline float pyl_silu1(float x) {
    return x / (1.0f + expf(-x));
}

static inline void pyl_silu_rows(const float *x, const float *g, float *y, int64_t n) {
    int64_t i = 0;
#if PYL_PARITY_SIMD
    for (; i + 8 <= n; i += 8) {
        __m256 v = pyl_gsilu8(_mm256_loadu_ps(x + i));
        if (g) v = _mm256_mul_ps(v, _mm256_loadu_ps(g + i));
        _mm256_storeu_ps(y + i, v);
    }
    if (i < n) {
        float bx[8] = {0}, bg[8] = {0}, by[8];
        memcpy(bx, x + i, sizeof(float) * (size_t)(n - i));
        if (g) memcpy(bg, g + i, sizeof(float) * (size_t)(n - i));
        __m256 v = pyl_gsilu8(_mm256_loadu_ps(bx));
        if (g) v = _mm256_mul_ps(v, _mm256_loadu_ps(bg));
        _mm256_storeu_ps(by, v);
        memcpy(y + i, by, sizeof(float) * (size_t)(n - i));
    }
#else
    for (; i < n; i++)
        y[i] = g ? pyl_silu1(x[i]) * g[i] : pyl_silu1(x[i]);
#endif
}

/* build_moe_ffn's softmax gating of one row of router logits x[E] (the CPU backend's moe_route;
 * the numpy oracle is Backend.moe_route): p[E] = softmax (ggml_v_expf 8 at a time, block sums
 * added in double), ids[k] / w[k] = the k largest, largest first, ties to the lower index, w
 * normalised by their double sum (clamped to >= 6.103515625e-5) when norm, times scale unless 0
 * or 1; shared by _ops and _mmid (the fused MoE decode) */
#if PYL_PARITY_SIMD
static inline float pyl_route_hsum8(__m256 v) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    float b0 = _mm_cvtss_f32(a) + _mm_cvtss_f32(_mm_shuffle_ps(a, a, 2));
    float b1 = _mm_cvtss_f32(_mm_shuffle_ps(a, a, 1)) + _mm_cvtss_f32(_mm_shuffle_ps(a, a, 3));
    return b0 + b1;
}
/* one row: p[E] (scratch, the softmax), ids[k], w[k] */
static inline void pyl_route_row(const float *x, int E, int k, int norm, float scale, float *p,
                          int *ids, float *w) {
    float mx = -INFINITY;
    for (int i = 0; i < E; i++) mx = x[i] > mx ? x[i] : mx;
    const int nb = E - E % 8;
    double tot = 0.0;
    for (int i = 0; i < nb; i += 8) {
        __m256 e = pyl_gexp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(mx)));
        _mm256_storeu_ps(p + i, e);
        tot += (double)pyl_route_hsum8(e);
    }
    for (int i = nb; i < E; i++) {
        float d = x[i] - mx;
        p[i] = (float)exp((double)d);
        tot += (double)p[i];
    }
    const float inv = (float)(1.0 / tot);
    for (int i = 0; i < E; i++) p[i] = p[i] * inv;
    for (int j = 0; j < k; j++) {          /* selection: largest first, ties to lower index */
        int best = -1;
        for (int i = 0; i < E; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= ids[q] == i;
            if (taken) continue;
            if (best < 0 || p[i] > p[best]) best = i;
        }
        ids[j] = best;
        w[j] = p[best];
    }
    if (norm) {
        double s = 0.0;
        for (int j = 0; j < k; j++) s += (double)w[j];
        float sf = (float)s;
        if (sf < 6.103515625e-5f) sf = 6.103515625e-5f;     /* np.maximum: NaN stays */
        for (int j = 0; j < k; j++) w[j] = w[j] / sf;
    }
    if (scale != 0.0f && scale != 1.0f)
        for (int j = 0; j < k; j++) w[j] = w[j] * scale;
}
#else
static inline void pyl_route_row(const float *x, int E, int k, int norm, float scale, float *p,
                          int *ids, float *w) { (void)x; (void)E; (void)k; (void)norm;
    (void)scale; (void)p; (void)ids; (void)w; }
#endif

#endif
