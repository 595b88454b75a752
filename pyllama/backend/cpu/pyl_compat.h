/* llama.cpp's small-batch CPU arithmetic (x86 AVX2 build of llama.cpp 0c1e570), for the rows that
 * numerics="llama.cpp" computes as llama.cpp computes a one-token decode (docs/numerics.md):
 *
 *  - activations -> q8_K by quantize_row_q8_K_ref (llama.cpp's from_float for q8_K on x86);
 *  - Q4_K (repacked q4_K_8x8 in llama.cpp): ggml_gemv_q4_K_8x8_q8_K: per super-block exact integer
 *    sums I = sum sc*q*q8 and M = sum mins*bsums, acc = fma((float)I, f32(d*d8), acc),
 *    accm = fma((float)M, f32(dmin*d8), accm); result acc - accm;
 *  - Q6_K: ggml_vec_dot_q6_K_q8_K (AVX2): 8 int32 lanes per super-block, lane l = element % 32 / 4,
 *    minus 32 * (bsums . scales) by pairs, acc8 = fma(f32(d8*d), (float)lanes, acc8), hsum;
 *  - f16 attention of one query (mul_mat with one src1 row -> ggml_vec_dot_f16): 4 accumulators of
 *    8 lanes over 32-element steps, reduced x0+x2, x1+x3, x0+x1, ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7));
 *    for kq over the head dimension, for kqv over the cell index (p = 0 for unlisted cells);
 *    softmax between them as ggml_soft_max_f32 over the row of cells (8-blocks by cell index).
 *
 * Integer sums are exact in any order; every float operation is written out in llama.cpp's order
 * (fmaf is exact fma; no -ffast-math). Scalar twins exist for builds without AVX2/FMA/F16C.
 * Layouts: block_q4_K = d, dmin (f16), scales[12], qs[128]; block_q6_K = ql[128], qh[64],
 * scales[16] (int8), d (f16); q8_K row: qs int8 [k], d f32 [k/256], bsums int16 [k/16].
 */
#ifndef PYL_COMPAT_H
#define PYL_COMPAT_H
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "pyl_parity.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define PYL_C_SIMD 1
#else
#define PYL_C_SIMD 0
#endif

#define PYL_C_Q4_K 12
#define PYL_C_Q5_K 13
#define PYL_C_Q6_K 14
#define PYL_C_Q4K_BYTES 144
#define PYL_C_Q6K_BYTES 210

/* f16 -> f32, exact (pyl_parity.h's decode) */
static inline float pyl_c_h2f(uint16_t h) { return pyl_p_h2f(h); }

static inline float pyl_c_rd16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return pyl_c_h2f(h); }

/* quantize_row_q8_K_ref: per 256 block max = the first element of largest |x|, iscale = -127/max,
 * q = min(127, nearest_int(iscale * x)), d = 1/iscale, bsums per 16. nearest_int (round half to
 * even) is rintf here: ggml's magic-number form would let gcc contract iscale * x + 0x1.8p23 into
 * one fma, which rounds differently */
static void pyl_c_quant_q8_K(const float *x, int k, int8_t *q, float *d, int16_t *bs) {
    int b, j, l;
    for (b = 0; b < k / 256; b++) {
        const float *xb = x + 256 * b;
        float amax = 0.0f, mx = 0.0f, iscale;
        for (j = 0; j < 256; j++) {
            float ax = fabsf(xb[j]);
            if (ax > amax) {
                amax = ax;
                mx = xb[j];
            }
        }
        if (amax == 0.0f) {
            d[b] = 0.0f;
            memset(q + 256 * b, 0, 256);
            for (j = 0; j < 16; j++)
                bs[16 * b + j] = 0;
            continue;
        }
        iscale = -127.0f / mx;
        for (j = 0; j < 256; j++) {
            int v = (int)rintf(iscale * xb[j]);
            q[256 * b + j] = (int8_t)(v < 127 ? v : 127);
        }
        for (j = 0; j < 16; j++) {
            int s = 0;
            for (l = 0; l < 16; l++)
                s += q[256 * b + 16 * j + l];
            bs[16 * b + j] = (int16_t)s;
        }
        d[b] = 1.0f / iscale;
    }
}

/* get_scale_min_k4 for all 8 sub-blocks */
static inline void pyl_c_scale_min_k4(const uint8_t *s, int *sc, int *mn) {
    int j;
    for (j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0xF) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
}

#if PYL_C_SIMD
static inline int pyl_c_hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

/* hsum_float_8 of llama.cpp's x86 quants.c */
static inline float pyl_c_hsum_f8(__m256 x) {
    __m128 r = _mm256_extractf128_ps(x, 1);
    r = _mm_add_ps(r, _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
#endif

#if PYL_C_SIMD
/* sc*q*q8 over one Q4_K super-block as 8 int32 lanes (their sum is exact in any order) */
static inline __m256i pyl_c_q4k_lanes(const uint8_t *qs, const int *sc, const int8_t *q8) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m256i acc = _mm256_setzero_si256();
    int j;
    for (j = 0; j < 4; j++) {
        __m256i b = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
        __m256i lo = _mm256_and_si256(b, m4), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
        __m256i plo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j)));
        __m256i phi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(q8 + 64 * j + 32)));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(plo, _mm256_set1_epi16((short)sc[2 * j])));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(phi, _mm256_set1_epi16((short)sc[2 * j + 1])));
    }
    return acc;
}
#endif

/* sum sc*q*q8 over one Q4_K super-block (exact integer) */
static inline int pyl_c_q4k_isum(const uint8_t *qs, const int *sc, const int8_t *q8) {
#if PYL_C_SIMD
    return pyl_c_hsum_i32(pyl_c_q4k_lanes(qs, sc, q8));
#else
    int j, l, s = 0;
    for (j = 0; j < 4; j++) {
        int slo = 0, shi = 0;
        for (l = 0; l < 32; l++) {
            slo += (qs[32 * j + l] & 0xF) * q8[64 * j + l];
            shi += (qs[32 * j + l] >> 4) * q8[64 * j + 32 + l];
        }
        s += sc[2 * j] * slo + sc[2 * j + 1] * shi;
    }
    return s;
#endif
}

/* one weight row . one q8_K row, ggml_gemv_q4_K_8x8_q8_K's float chain */
static float pyl_c_dot_q4_K(const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                            const int16_t *bs) {
    float acc = 0.0f, accm = 0.0f;
    int b, j, sc[8], mn[8];
    for (b = 0; b < nsb; b++) {
        const uint8_t *x = w + (int64_t)b * PYL_C_Q4K_BYTES;
        int isum, imin = 0;
        pyl_c_scale_min_k4(x + 4, sc, mn);
        isum = pyl_c_q4k_isum(x + 16, sc, q8 + 256 * b);
        for (j = 0; j < 8; j++)
            imin += mn[j] * (bs[16 * b + 2 * j] + bs[16 * b + 2 * j + 1]);
        acc = fmaf((float)isum, pyl_c_rd16(x) * d8[b], acc);
        accm = fmaf((float)imin, pyl_c_rd16(x + 2) * d8[b], accm);
    }
    return acc - accm;
}

/* pyl_c_dot_q4_K for 4 weight rows (row stride rs bytes) at once: the same integers and, per row,
 * the same float chain. SIMD: the scales broadcast by byte shuffles, the bsum pairs shared, the 4
 * rows' integer sums leave the registers in one reduction and their float chains run in the 4
 * lanes of one register (lane-wise mul / fma: the same roundings). */
#if PYL_C_SIMD
/* per 32-chunk c: the int16 scale of chunk c (of 8 int16 scales) in every 16-bit lane */
static const int8_t pyl_c_k4_shuf[8][32] __attribute__((aligned(32))) = {
#define PYL_C_S2(c) 2 * c, 2 * c + 1
#define PYL_C_ROW(c) {PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c), \
    PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c), \
    PYL_C_S2(c), PYL_C_S2(c), PYL_C_S2(c)}
    PYL_C_ROW(0), PYL_C_ROW(1), PYL_C_ROW(2), PYL_C_ROW(3), PYL_C_ROW(4), PYL_C_ROW(5),
    PYL_C_ROW(6), PYL_C_ROW(7)
#undef PYL_C_ROW
#undef PYL_C_S2
};

static void pyl_c_dot4_q4_K(const uint8_t *w, int64_t rs, int nsb, const int8_t *q8,
                            const float *d8, const int16_t *bs, float *out) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    __m128 acc = _mm_setzero_ps(), accm = _mm_setzero_ps();
    int b, r, p;
    for (b = 0; b < nsb; b++) {
        const int8_t *y = q8 + 256 * b;
        const __m256i bsv = _mm256_loadu_si256((const __m256i *)(bs + 16 * b));
        const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bsv), _mm256_extracti128_si256(bsv, 1));
        __m256i L[4];
        __m128i M[4];
        float dw[4], dm[4];
        for (r = 0; r < 4; r++) {
            const uint8_t *x = w + r * rs + (int64_t)b * PYL_C_Q4K_BYTES;
            uint32_t u[4];
            dw[r] = pyl_c_rd16(x);
            dm[r] = pyl_c_rd16(x + 2);
            memcpy(u, x + 4, 12);                      /* llama.cpp's utmp unpacking */
            u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
            const uint32_t ua = u[1] & k1;
            u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
            u[2] = ua;
            u[0] &= k1;
            const __m128i smv = _mm_loadu_si128((const __m128i *)u);  /* 8 scales, 8 mins */
            const __m256i scs = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(smv));
            M[r] = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(smv, smv)), q8s);
            __m256i l = _mm256_setzero_si256();
            for (p = 0; p < 4; p++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(x + 16 + 32 * p));
                const __m256i lo = _mm256_and_si256(q, m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                const __m256i s0 = _mm256_shuffle_epi8(scs, _mm256_load_si256((const __m256i *)pyl_c_k4_shuf[2 * p]));
                const __m256i s1 = _mm256_shuffle_epi8(scs, _mm256_load_si256((const __m256i *)pyl_c_k4_shuf[2 * p + 1]));
                l = _mm256_add_epi32(l, _mm256_madd_epi16(_mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(y + 64 * p))), s0));
                l = _mm256_add_epi32(l, _mm256_madd_epi16(_mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(y + 64 * p + 32))), s1));
            }
            L[r] = l;
        }
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(L[0], L[1]), _mm256_hadd_epi32(L[2], L[3]));
        const __m128i isum = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        const __m128i imin = _mm_hadd_epi32(_mm_hadd_epi32(M[0], M[1]), _mm_hadd_epi32(M[2], M[3]));
        const __m128 dy = _mm_set1_ps(d8[b]);
        acc = _mm_fmadd_ps(_mm_cvtepi32_ps(isum), _mm_mul_ps(_mm_loadu_ps(dw), dy), acc);
        accm = _mm_fmadd_ps(_mm_cvtepi32_ps(imin), _mm_mul_ps(_mm_loadu_ps(dm), dy), accm);
    }
    _mm_storeu_ps(out, _mm_sub_ps(acc, accm));
}
#else
static void pyl_c_dot4_q4_K(const uint8_t *w, int64_t rs, int nsb, const int8_t *q8,
                            const float *d8, const int16_t *bs, float *out) {
    int r;
    for (r = 0; r < 4; r++)
        out[r] = pyl_c_dot_q4_K(w + r * rs, nsb, q8, d8, bs);
}
#endif

#if PYL_C_SIMD
/* ggml_vec_dot_q6_K_q8_K, AVX2 branch (same lanes) */
static float pyl_c_dot_q6_K(const uint8_t *w, int nsb, const int8_t *q8all, const float *d8,
                            const int16_t *bsall) {
    static const uint8_t k_shuffle[128] = {
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
        4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7,
        8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11,
        11, 11, 11, 11, 12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13, 14, 14, 14, 14,
        14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15};
    const __m256i m3 = _mm256_set1_epi8(3), m15 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    int i, j;
    for (i = 0; i < nsb; i++) {
        const uint8_t *x = w + (int64_t)i * PYL_C_Q6K_BYTES;
        const float d = d8[i] * pyl_c_rd16(x + 208);
        const uint8_t *q4 = x, *qh = x + 128;
        const int8_t *q8 = q8all + 256 * i;
        const __m256i q8sums = _mm256_loadu_si256((const __m256i *)(bsall + 16 * i));
        const __m128i scales = _mm_loadu_si128((const __m128i *)(x + 192));
        const __m256i q8sclsub = _mm256_slli_epi32(
            _mm256_madd_epi16(q8sums, _mm256_cvtepi8_epi16(scales)), 5);
        __m256i sumi = _mm256_setzero_si256();
        int is = 0;
        for (j = 0; j < 2; j++) {
            const __m256i b1 = _mm256_loadu_si256((const __m256i *)q4);
            const __m256i b2 = _mm256_loadu_si256((const __m256i *)(q4 + 32));
            const __m256i bh = _mm256_loadu_si256((const __m256i *)qh);
            const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(bh, m3), 4);
            const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(12)), 2);
            const __m256i h2 = _mm256_and_si256(bh, _mm256_set1_epi8(48));
            const __m256i h3 = _mm256_srli_epi16(_mm256_and_si256(bh, _mm256_set1_epi8(-64)), 2);
            const __m256i v0 = _mm256_or_si256(_mm256_and_si256(b1, m15), h0);
            const __m256i v1 = _mm256_or_si256(_mm256_and_si256(b2, m15), h1);
            const __m256i v2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b1, 4), m15), h2);
            const __m256i v3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b2, 4), m15), h3);
            __m256i p0 = _mm256_maddubs_epi16(v0, _mm256_loadu_si256((const __m256i *)q8));
            __m256i p1 = _mm256_maddubs_epi16(v1, _mm256_loadu_si256((const __m256i *)(q8 + 32)));
            __m256i p2 = _mm256_maddubs_epi16(v2, _mm256_loadu_si256((const __m256i *)(q8 + 64)));
            __m256i p3 = _mm256_maddubs_epi16(v3, _mm256_loadu_si256((const __m256i *)(q8 + 96)));
            const __m128i *sh = (const __m128i *)k_shuffle;
            p0 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, _mm_loadu_si128(sh + is))), p0);
            p1 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, _mm_loadu_si128(sh + is + 1))), p1);
            p2 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, _mm_loadu_si128(sh + is + 2))), p2);
            p3 = _mm256_madd_epi16(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(scales, _mm_loadu_si128(sh + is + 3))), p3);
            is += 4;
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
            sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p2, p3));
            q4 += 64;
            qh += 32;
            q8 += 128;
        }
        sumi = _mm256_sub_epi32(sumi, q8sclsub);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
    }
    return pyl_c_hsum_f8(acc);
}
#else
/* the same lanes in scalar code: element e = 128h + 32g + l goes to lane l / 4 */
static float pyl_c_dot_q6_K(const uint8_t *w, int nsb, const int8_t *q8all, const float *d8,
                            const int16_t *bsall) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, a[4], b2[2];
    int i, h, g, l, m;
    for (i = 0; i < nsb; i++) {
        const uint8_t *x = w + (int64_t)i * PYL_C_Q6K_BYTES;
        const int8_t *sc = (const int8_t *)(x + 192), *q8 = q8all + 256 * i;
        const int16_t *bs = bsall + 16 * i;
        const float d = d8[i] * pyl_c_rd16(x + 208);
        int lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (h = 0; h < 2; h++)
            for (g = 0; g < 4; g++)
                for (l = 0; l < 32; l++) {
                    int e = 128 * h + 32 * g + l;
                    const uint8_t *ql = x + 64 * h + (g & 1) * 32, *qh = x + 128 + 32 * h;
                    int lo = (g < 2) ? (ql[l] & 0xF) : (ql[l] >> 4);
                    int q = lo | (((qh[l] >> (2 * g)) & 3) << 4);
                    lanes[l / 4] += sc[e / 16] * q * q8[e];
                }
        for (m = 0; m < 8; m++) {
            lanes[m] -= 32 * (bs[2 * m] * sc[2 * m] + bs[2 * m + 1] * sc[2 * m + 1]);
            acc[m] = fmaf(d, (float)lanes[m], acc[m]);
        }
    }
    for (m = 0; m < 4; m++)
        a[m] = acc[m + 4] + acc[m];
    b2[0] = a[0] + a[2];
    b2[1] = a[1] + a[3];
    return b2[0] + b2[1];
}
#endif

/* The 8 int32 lanes of a K-quant super-block dot, as llama.cpp's AVX2 vec_dots form them
 * (maddubs + madd by scale: lane m of 32-element chunk c holds elements 32c + 4m .. 32c + 4m + 3):
 * lanes[m] = sum over chunks c, elements e in lane m of sc16[e / 16] * q[e] * q8[e].
 * kind 2: Q2_K (q 0..3), 3: Q3_K (low + 4*hbit - 4), 4: Q4_K (nibbles), 5: Q5_K (+ 16*hbit). */
/* ggml_vec_dot_iq4_xs_q8_K (AVX2): per super-block 8 int32 lanes of (ls - 32) * |v| . sign(q8, v)
 * (lane l: elements 4l..4l+3 of each 32-block), acc8 = fma(d * d8, (float)lanes, acc8) */
static const int8_t pyl_c_kv_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1, 13, 25, 38, 53, 69, 89, 113};
#if PYL_C_SIMD
static float pyl_c_dot_iq4_xs(const uint8_t *w, int nsb, const int8_t *q8all, const float *d8) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)pyl_c_kv_iq4nl);
    const __m128i m4 = _mm_set1_epi8(0x0F);
    __m256 acc = _mm256_setzero_ps();
    for (int i = 0; i < nsb; i++) {
        const uint8_t *x = w + 136 * (int64_t)i, *qs = x + 8;
        const int8_t *q8 = q8all + 256 * (int64_t)i;
        uint16_t sh;
        memcpy(&sh, x + 2, 2);
        __m256i sumi = _mm256_setzero_si256();
        for (int ib = 0; ib < 8; ib++) {
            const __m128i b = _mm_loadu_si128((const __m128i *)(qs + 16 * ib));
            const __m256i v = _mm256_set_m128i(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), m4)),
                                               _mm_shuffle_epi8(lut, _mm_and_si128(b, m4)));
            const __m256i y = _mm256_loadu_si256((const __m256i *)(q8 + 32 * ib));
            const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v));
            const int ls = (((x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p16, _mm256_set1_epi16((int16_t)ls)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(pyl_c_rd16(x) * d8[i]), _mm256_cvtepi32_ps(sumi), acc);
    }
    return pyl_c_hsum_f8(acc);
}
#else
static float pyl_c_dot_iq4_xs(const uint8_t *w, int nsb, const int8_t *q8all, const float *d8) {
    float acc[8] = {0};
    for (int i = 0; i < nsb; i++) {
        const uint8_t *x = w + 136 * (int64_t)i, *qs = x + 8;
        const int8_t *q8 = q8all + 256 * (int64_t)i;
        uint16_t sh;
        memcpy(&sh, x + 2, 2);
        int lane[8] = {0};
        for (int ib = 0; ib < 8; ib++) {
            const int ls = (((x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4)) - 32;
            for (int j = 0; j < 32; j++) {
                const int v = pyl_c_kv_iq4nl[j < 16 ? qs[16 * ib + j] & 0xF : qs[16 * ib + j - 16] >> 4];
                lane[j / 4] += ls * v * q8[32 * ib + j];
            }
        }
        const float dd = pyl_c_rd16(x) * d8[i];
        for (int l = 0; l < 8; l++) acc[l] = fmaf(dd, (float)lane[l], acc[l]);
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}
#endif

static inline int pyl_c_kq(int kind, const uint8_t *x, int e) {
    int h = e / 128, j = (e % 128) / 32, l = e % 32, c = e / 32;
    if (kind == 2)
        return (x[16 + 32 * h + l] >> (2 * j)) & 3;
    if (kind == 3)
        return ((x[32 + 32 * h + l] >> (2 * j)) & 3) + 4 * ((x[l] >> (4 * h + j)) & 1) - 4;
    if (kind == 4)
        return (c & 1) ? (x[16 + 32 * (c / 2) + l] >> 4) : (x[16 + 32 * (c / 2) + l] & 0xF);
    return ((c & 1) ? (x[48 + 32 * (c / 2) + l] >> 4) : (x[48 + 32 * (c / 2) + l] & 0xF))
           | (((x[16 + l] >> c) & 1) << 4);
}

static inline void pyl_c_klanes(int kind, const uint8_t *x, const int *sc16, const int8_t *q8,
                                int *lanes) {
#if PYL_C_SIMD
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    __m256i acc = _mm256_setzero_si256();
    int c;
    for (c = 0; c < 8; c++) {
        int h = c / 4, j = c % 4;
        __m256i v, p, neg = _mm256_setzero_si256();
        __m256i y = _mm256_loadu_si256((const __m256i *)(q8 + 32 * c));
        if (kind == 2) {
            v = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(x + 16 + 32 * h)), 2 * j), m3);
        } else if (kind == 3) {
            __m256i hb = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)x), 4 * h + j), one);
            v = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(x + 32 + 32 * h)), 2 * j), m3);
            neg = _mm256_maddubs_epi16(_mm256_slli_epi16(_mm256_andnot_si256(hb, one), 2), y);
        } else {
            const uint8_t *qs = x + (kind == 4 ? 16 : 48) + 32 * (c / 2);
            v = _mm256_and_si256(_mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)qs), 4 * (c & 1)), m4);
            if (kind == 5)
                v = _mm256_or_si256(v, _mm256_slli_epi16(_mm256_and_si256(
                        _mm256_srli_epi16(_mm256_loadu_si256((const __m256i *)(x + 16)), c), one), 4));
        }
        p = _mm256_sub_epi16(_mm256_maddubs_epi16(v, y), neg);
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_setr_m128i(
                  _mm_set1_epi16((short)sc16[2 * c]), _mm_set1_epi16((short)sc16[2 * c + 1]))));
    }
    _mm256_storeu_si256((__m256i *)lanes, acc);
#else
    int e, m;
    for (m = 0; m < 8; m++)
        lanes[m] = 0;
    for (e = 0; e < 256; e++)
        lanes[(e % 32) / 4] += sc16[e / 16] * pyl_c_kq(kind, x, e) * q8[e];
#endif
}

/* ggml_vec_dot_q4_K_q8_K / ggml_vec_dot_q5_K_q8_K (AVX2 branches; Q4_K weights llama.cpp does not
 * repack, Q5_K under 8 rows): per super-block 8 int32 lanes of sc*q*q8 (lane = element % 32 / 4),
 * acc8 = fma(f32(d8*d), (float)lanes, acc8). Mins: Q4_K: 4 lanes p_i = mn[2i]*S[2i] +
 * mn[2i+1]*S[2i+1] (S_j = sub-block sum of q8), acc4 = fma(f32(-d8*dmin), (float)p, acc4), result
 * hsum_float_8(acc8) + ((acc4_0 + acc4_2) + (acc4_1 + acc4_3)); Q5_K: summs = fma(f32(-d8*dmin),
 * (float)sum p, summs) (gcc contracts llama.cpp's summs += dmin * sum), result hsum + summs. */
static float pyl_c_dot_q45_K(int q5, const uint8_t *w, int nsb, const int8_t *q8all,
                             const float *d8, const int16_t *bsall) {
    const int bytes = q5 ? 176 : PYL_C_Q4K_BYTES;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, acc4[4] = {0, 0, 0, 0}, summs = 0.0f, a[4], b2[2];
    int i, j, m, sc[8], mn[8];
    for (i = 0; i < nsb; i++) {
        const uint8_t *x = w + (int64_t)i * bytes;
        const int8_t *q8 = q8all + 256 * i;
        const int16_t *bs = bsall + 16 * i;
        const float d = d8[i] * pyl_c_rd16(x), dmin = -d8[i] * pyl_c_rd16(x + 2);
        int lanes[8], p[4], psum = 0, sc16[16];
        pyl_c_scale_min_k4(x + 4, sc, mn);
        for (j = 0; j < 16; j++)
            sc16[j] = sc[j / 2];
        pyl_c_klanes(q5 ? 5 : 4, x, sc16, q8, lanes);
        for (m = 0; m < 4; m++) {
            p[m] = mn[2 * m] * (bs[4 * m] + bs[4 * m + 1]) + mn[2 * m + 1] * (bs[4 * m + 2] + bs[4 * m + 3]);
            psum += p[m];
            if (!q5)
                acc4[m] = fmaf(dmin, (float)p[m], acc4[m]);
        }
        if (q5)
            summs = fmaf(dmin, (float)psum, summs);
        for (m = 0; m < 8; m++)
            acc[m] = fmaf(d, (float)lanes[m], acc[m]);
    }
    for (m = 0; m < 4; m++)
        a[m] = acc[m + 4] + acc[m];
    b2[0] = a[0] + a[2];
    b2[1] = a[1] + a[3];
    if (q5)
        return (b2[0] + b2[1]) + summs;
    return (b2[0] + b2[1]) + ((acc4[0] + acc4[2]) + (acc4[1] + acc4[3]));
}

/* ggml_vec_dot_q2_K_q8_K / ggml_vec_dot_q3_K_q8_K (AVX2 branches, batches under 8 rows): the same 8
 * lanes of sc*q*q8 (q signed for Q3_K: low 2 bits + 4*hbit - 4, 6-bit scales - 32); Q2_K first
 * acc8 = fma(f32(-d8*dmin), (float)(mn[2m]*bs[2m] + mn[2m+1]*bs[2m+1]), acc8) per lane m, then
 * acc8 = fma(f32(d8*d), (float)lanes, acc8); result hsum_float_8(acc8). */
static float pyl_c_dot_q23_K(int q3, const uint8_t *w, int nsb, const int8_t *q8all,
                             const float *d8, const int16_t *bsall) {
    const int bytes = q3 ? 110 : 84;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0}, a[4], b2[2];
    int i, j, m, sc[16], mn[16];
    for (i = 0; i < nsb; i++) {
        const uint8_t *x = w + (int64_t)i * bytes;
        const int8_t *q8 = q8all + 256 * i;
        const int16_t *bs = bsall + 16 * i;
        int lanes[8];
        float d;
        if (q3) {
            const uint8_t *s = x + 96;
            for (j = 0; j < 16; j++) {
                int lo = j < 8 ? (s[j % 8] & 0xF) : (s[j % 8] >> 4);
                sc[j] = (lo | (((s[8 + (j & 3)] >> (2 * (j >> 2))) & 3) << 4)) - 32;
            }
            d = d8[i] * pyl_c_rd16(x + 108);
        } else {
            const float dmin = -d8[i] * pyl_c_rd16(x + 82);
            for (j = 0; j < 16; j++) {
                sc[j] = x[j] & 0xF;
                mn[j] = x[j] >> 4;
            }
            for (m = 0; m < 8; m++)
                acc[m] = fmaf(dmin, (float)(mn[2 * m] * bs[2 * m] + mn[2 * m + 1] * bs[2 * m + 1]), acc[m]);
            d = d8[i] * pyl_c_rd16(x + 80);
        }
        pyl_c_klanes(q3 ? 3 : 2, x, sc, q8, lanes);
        for (m = 0; m < 8; m++)
            acc[m] = fmaf(d, (float)lanes[m], acc[m]);
    }
    for (m = 0; m < 4; m++)
        a[m] = acc[m + 4] + acc[m];
    b2[0] = a[0] + a[2];
    b2[1] = a[1] + a[3];
    return b2[0] + b2[1];
}

/* ---- f16 attention of one query (ggml_vec_dot_f16 on both products) -------------------------- */

/* GGML_F32x8_REDUCE of 4 accumulators given as 32 floats a[8 * j + lane] */
static inline float pyl_c_reduce32(const float *a) {
    float x[8], t[4];
    int l;
    for (l = 0; l < 8; l++) {
        float x0 = a[l] + a[16 + l], x1 = a[8 + l] + a[24 + l];
        x[l] = x0 + x1;
    }
    for (l = 0; l < 4; l++)
        t[l] = x[l] + x[l + 4];
    return (t[0] + t[1]) + (t[2] + t[3]);
}

static inline float pyl_c_f16r(float f) {
#if PYL_C_SIMD
    return _cvtsh_ss(_cvtss_sh(f, 0));
#else
    return (float)(_Float16)f;
#endif
}

/* ggml_vec_dot_f16 of an f16-rounded f32 query and an f16 row of length d: 4x8 lanes over the
 * first d - d % 32 elements, reduced, then the rest added in double */
static inline float pyl_c_vdot_f16(const float *q16, const uint16_t *k, int d) {
    float a[32];
    double s;
    int i, j, np = d - d % 32;
#if PYL_C_SIMD
    __m256 v[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (i = 0; i < np; i += 32)
        for (j = 0; j < 4; j++)
            v[j] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i + 8 * j))),
                                   _mm256_loadu_ps(q16 + i + 8 * j), v[j]);
    for (j = 0; j < 4; j++)
        _mm256_storeu_ps(a + 8 * j, v[j]);
#else
    memset(a, 0, sizeof a);
    for (i = 0; i < np; i += 32)
        for (j = 0; j < 32; j++)
            a[j] = fmaf(pyl_c_h2f(k[i + j]), q16[i + j], a[j]);
#endif
    s = (double)pyl_c_reduce32(a);
    for (i = np; i < d; i++)
        s += (double)(pyl_c_h2f(k[i]) * q16[i]);
    return (float)s;
}

/* ggml_v_expf on 8 lanes (pyl_parity.h; expf without AVX2: not bit-exact there) */
static inline void pyl_c_exp8(const float *x, float *y) {
#if PYL_C_SIMD && PYL_PARITY_SIMD
    _mm256_storeu_ps(y, pyl_gexp8(_mm256_loadu_ps(x)));
#else
    int l;
    for (l = 0; l < 8; l++)
        y[l] = expf(x[l]);
#endif
}

/* ggml's 8-lane hsum ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)) */
static inline float pyl_c_hsum8(const float *v) {
    float a0 = v[0] + v[4], a1 = v[1] + v[5], a2 = v[2] + v[6], a3 = v[3] + v[7];
    return (a0 + a2) + (a1 + a3);
}

/* softmax of scores s[L] over cells[L] (ascending cell index) as ggml_soft_max_f32 over the whole
 * row of cells: e = ggml_v_expf(s - max) by 8-blocks of cell index (unlisted cells: e = 0), block
 * hsums added in double, p = f16(e * (float)(1/sum)); p written over s */
static void pyl_c_softmax_cells(float *s, const int32_t *cells, int L) {
    float mx = -INFINITY, v[8], e[8], inv;
    double sum = 0.0;
    int j = 0, l, j0;
    for (l = 0; l < L; l++)
        mx = s[l] > mx ? s[l] : mx;
    while (j < L) {
        int blk = cells[j] / 8;
        for (l = 0; l < 8; l++)
            v[l] = -INFINITY;
        for (j0 = j; j < L && cells[j] / 8 == blk; j++)
            v[cells[j] % 8] = s[j] - mx;
        pyl_c_exp8(v, e);
        sum += (double)pyl_c_hsum8(e);
        for (l = j0; l < j; l++)
            s[l] = e[cells[l] % 8];
    }
    inv = (float)(1.0 / sum);
    for (l = 0; l < L; l++)
        s[l] = pyl_c_f16r(s[l] * inv);
}

/* out[dv] = sum_j p_j v_j as ggml_vec_dot_f16 over the cell index (lane slot = cell % 32, chains in
 * cell order; unlisted cells have p = 0 and add nothing); acc: 32 * dv floats of scratch */
static void pyl_c_pv_cells(const float *p, const int32_t *cells, int L, const uint16_t *V,
                           int64_t v_stride, int dv, float *acc, float *out) {
    int j, c, sl;
    float a[32];
    memset(acc, 0, sizeof(float) * 32 * (size_t)dv);
    for (j = 0; j < L; j++) {
        const uint16_t *vr = V + (int64_t)cells[j] * v_stride;
        float *ac = acc + (size_t)(cells[j] % 32) * dv;
        c = 0;
#if PYL_C_SIMD
        for (; c + 8 <= dv; c += 8)
            _mm256_storeu_ps(ac + c, _mm256_fmadd_ps(
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(vr + c))),
                _mm256_set1_ps(p[j]), _mm256_loadu_ps(ac + c)));
#endif
        for (; c < dv; c++)
            ac[c] = fmaf(pyl_c_h2f(vr[c]), p[j], ac[c]);
    }
    for (c = 0; c < dv; c++) {
        for (sl = 0; sl < 32; sl++)
            a[sl] = acc[(size_t)sl * dv + c];
        out[c] = pyl_c_reduce32(a);
    }
}

/* one query, one head: q [dk] f32 (rounded to f16 here); K/V point at this head's KV columns of
 * f16 caches with row strides in elements; cells ascending; work: dk + L + 32 * dv floats */
static void pyl_c_attn_head(const float *q, int dk, int dv, const uint16_t *K, int64_t k_stride,
                            const uint16_t *V, int64_t v_stride, const int32_t *cells, int L,
                            float scale, float softcap, float *work, float *out) {
    float *qf = work, *s = work + dk, *acc = work + dk + L;
    int j, e;
    if (L == 0) {
        memset(out, 0, sizeof(float) * (size_t)dv);
        return;
    }
    for (e = 0; e < dk; e++)
        qf[e] = pyl_c_f16r(q[e]);
    for (j = 0; j < L; j++) {
        float r = scale * pyl_c_vdot_f16(qf, K + (int64_t)cells[j] * k_stride, dk);
        if (softcap > 0.0f)
            r = tanhf(r * (1.0f / softcap)) * softcap;
        s[j] = r;
    }
    pyl_c_softmax_cells(s, cells, L);
    pyl_c_pv_cells(s, cells, L, V, v_stride, dv, acc, out);
}

/* ---- flash attention (llama.cpp's CPU ggml_compute_forward_flash_attn_ext_f16) ------------------
 * Per (query, head); cells listed ascending. Three kernels, chosen as llama.cpp does
 * (ref_compat.fa_kernel): tiled from PYL_C_FA_TILE_Q queries, split-KV for one query over a KV
 * view of >= 512 cells (one one_chunk per thread's slice, partials merged), one_chunk otherwise. */
#define PYL_C_FA_TILE_Q 64
#define PYL_C_FA_TILE_KV 64

static inline float pyl_c_kv_at(const uint8_t *row, int f16, int e) {
    if (f16) {
        uint16_t h;
        memcpy(&h, row + 2 * (size_t)e, 2);
        return pyl_c_h2f(h);
    }
    float f;
    memcpy(&f, row + 4 * (size_t)e, 4);
    return f;
}

static inline void pyl_c_fa_normalise(float S, int dv, float *out) {
    float inv = S == 0.0f ? 0.0f : 1.0f / S;
    int c;
    for (c = 0; c < dv; c++)
        out[c] *= inv;
}

/* ---- ggml_compute_forward_flash_attn_ext_tiled --------------------------------------------------
 * Per row (one query, one head; f32 q): per 64-cell tile of cell index (tiles with none of the
 * query's cells skipped): s = FMA chain over d ascending (simd_gemm), * scale, softcap tanhf,
 * unlisted lanes -inf; M' = max(M, tile max), VKQ and S scaled by expf(M - M') when it grows;
 * e = ggml_v_expf(s - M') by 8 lanes, S += sum (8-lane hsums in double); VKQ += e . V as FMA
 * chains over the tile's lanes in order; out = VKQ * (1/S). K/V rows f16 (f16 = 1) or f32,
 * strides in bytes, pointing at the KV head's columns.
 * The rows of a block (ggml's Q tile) share each tile's work: K^T and V converted to f32 once,
 * the scores and the V products as register-tiled gemms (6 rows x 16 columns). Lanes no row of
 * the block lists are left out of the V product (their weight is 0 in every row, as in ggml's);
 * rows of queries with no cell in a tile are left out of it (ggml's skip). */
#define PYL_C_FA_ROWS 64                         /* rows per block: (query, head) pairs */
#define PYL_C_FA_RM 6

/* C_r[0..n) (+)= sum over kk of A_r[ki[kk]] * B[ki[kk] * ldb + c] as one FMA chain per element,
 * kk ascending; C_r starts from 0 (load = 0) or its value (load = 1). nr rows by pointer, any
 * n; a last group of fewer than PYL_C_FA_RM rows is padded with A = zero (as many floats as the
 * largest ki + 1) and C = spare (n floats). */
static void pyl_c_fa_gemm(int nr, float *const *C, int load, const float *const *A, const int *ki,
                          int nk, const float *B, int64_t ldb, int n, const float *zero,
                          float *spare) {
    int r0, i, kk, c;
    for (r0 = 0; r0 < nr; r0 += PYL_C_FA_RM) {
        const float *a[PYL_C_FA_RM];
        float *cr[PYL_C_FA_RM];
        for (i = 0; i < PYL_C_FA_RM; i++) {
            a[i] = r0 + i < nr ? A[r0 + i] : zero;
            cr[i] = r0 + i < nr ? C[r0 + i] : spare;
        }
        c = 0;
#if PYL_C_SIMD
        for (; c + 16 <= n; c += 16) {
            __m256 acc[PYL_C_FA_RM][2];
            for (i = 0; i < PYL_C_FA_RM; i++) {
                acc[i][0] = load ? _mm256_loadu_ps(cr[i] + c) : _mm256_setzero_ps();
                acc[i][1] = load ? _mm256_loadu_ps(cr[i] + c + 8) : _mm256_setzero_ps();
            }
            for (kk = 0; kk < nk; kk++) {
                const int k = ki[kk];
                const float *b = B + (int64_t)k * ldb + c;
                const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
                for (i = 0; i < PYL_C_FA_RM; i++) {
                    const __m256 p = _mm256_broadcast_ss(a[i] + k);
                    acc[i][0] = _mm256_fmadd_ps(b0, p, acc[i][0]);
                    acc[i][1] = _mm256_fmadd_ps(b1, p, acc[i][1]);
                }
            }
            for (i = 0; i < PYL_C_FA_RM; i++) {
                _mm256_storeu_ps(cr[i] + c, acc[i][0]);
                _mm256_storeu_ps(cr[i] + c + 8, acc[i][1]);
            }
        }
        for (; c + 8 <= n; c += 8) {
            __m256 acc[PYL_C_FA_RM];
            for (i = 0; i < PYL_C_FA_RM; i++)
                acc[i] = load ? _mm256_loadu_ps(cr[i] + c) : _mm256_setzero_ps();
            for (kk = 0; kk < nk; kk++) {
                const int k = ki[kk];
                const __m256 b0 = _mm256_loadu_ps(B + (int64_t)k * ldb + c);
                for (i = 0; i < PYL_C_FA_RM; i++)
                    acc[i] = _mm256_fmadd_ps(b0, _mm256_broadcast_ss(a[i] + k), acc[i]);
            }
            for (i = 0; i < PYL_C_FA_RM; i++)
                _mm256_storeu_ps(cr[i] + c, acc[i]);
        }
#endif
        for (; c < n; c++)
            for (i = 0; i < PYL_C_FA_RM; i++) {
                float s = load ? cr[i][c] : 0.0f;
                for (kk = 0; kk < nk; kk++)
                    s = fmaf(B[(int64_t)ki[kk] * ldb + c], a[i][ki[kk]], s);
                cr[i][c] = s;
            }
    }
}

#if PYL_C_SIMD
/* r[i] <- (r[0][i], ..., r[7][i]): an 8 x 8 transpose in registers */
static inline void pyl_c_tr8(__m256 *r) {
    __m256 t[8], u[8];
    int i;
    for (i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (i = 0; i < 2; i++) {
        u[4 * i] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 1] = _mm256_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[4 * i + 2] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[4 * i + 3] = _mm256_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (i = 0; i < 4; i++) {
        r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
        r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
    }
}
#endif

/* KT[d * 64 + l] = K row l's element d (as f32) for the lanes l in groups g0..g1-1 of 8 of a
 * tile whose row 0 is at K (row stride ks bytes); lanes not in U are 0 */
static void pyl_c_fa_pack_kt(const uint8_t *K, int64_t ks, int f16, uint64_t U, int g0, int g1,
                             int dk, float *KT) {
    const int T = PYL_C_FA_TILE_KV;
    int l, d = 0, gi;
#if PYL_C_SIMD
    for (gi = g0; gi < g1; gi++)
        for (d = 0; d + 8 <= dk; d += 8) {
            __m256 r[8];
            for (l = 0; l < 8; l++) {
                const uint8_t *kr = K + (int64_t)(8 * gi + l) * ks;
                if (!(U >> (8 * gi + l) & 1))
                    r[l] = _mm256_setzero_ps();
                else if (f16)
                    r[l] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(kr + 2 * (size_t)d)));
                else
                    r[l] = _mm256_loadu_ps((const float *)kr + d);
            }
            pyl_c_tr8(r);
            for (l = 0; l < 8; l++)
                _mm256_storeu_ps(KT + (size_t)(d + l) * T + 8 * gi, r[l]);
        }
#endif
    for (l = g0 * 8; l < g1 * 8; l++) {           /* the rest of d (all of it without SIMD) */
        const uint8_t *kr = K + (int64_t)l * ks;
        int e;
        for (e = d; e < dk; e++)
            KT[(size_t)e * T + l] = U >> l & 1 ? pyl_c_kv_at(kr, f16, e) : 0.0f;
    }
}

/* rows r = qq * g + hh for the block's nq queries (qq) and g heads (hh) of one KV head: q row
 * q + qq * qs + hh * dk, out row out + qq * os + hh * dv; query qq lists
 * cells[q_start[qq]:q_end[qq]] (ascending). nq * g <= PYL_C_FA_ROWS. work: dk * 64 (K^T) +
 * 64 * dv (V) + PYL_C_FA_ROWS * 64 (scores) + 2 * max(dk, dv, 64) floats, then dk + 64 ints. */
static void pyl_c_fa_tiled_block(const float *q, int64_t qs, int nq, int g, int dk, int dv,
                                 const uint8_t *K, int64_t ks, const uint8_t *V, int64_t vs,
                                 int f16, const int32_t *cells, const int64_t *q_start,
                                 const int64_t *q_end, float scale, float softcap, float *work,
                                 float *out, int64_t os) {
    const int T = PYL_C_FA_TILE_KV, nrow = nq * g, wide = dk > dv ? (dk > T ? dk : T)
                                                                  : (dv > T ? dv : T);
    float *KT = work, *V32 = KT + (size_t)dk * T, *P = V32 + (size_t)T * dv;
    float *zero = P + (size_t)PYL_C_FA_ROWS * T, *spare = zero + wide;
    int *ki = (int *)(spare + wide), *lanes = ki + dk;  /* d = 0..dk-1; a tile's listed lanes */
    const float *arow[PYL_C_FA_ROWS], *prow[PYL_C_FA_ROWS];
    float *crow[PYL_C_FA_ROWS], *orow[PYL_C_FA_ROWS];
    float M[PYL_C_FA_ROWS], S[PYL_C_FA_ROWS];
    int64_t pos[PYL_C_FA_ROWS];
    uint64_t m[PYL_C_FA_ROWS];
    float sc = softcap != 0.0f ? scale / softcap : scale;
    int r, qq, hh, l, d, c;
    memset(zero, 0, sizeof(float) * (size_t)wide);
    for (d = 0; d < dk; d++)
        ki[d] = d;
    for (qq = 0; qq < nq; qq++) {
        pos[qq] = q_start[qq];
        for (hh = 0; hh < g; hh++) {
            r = qq * g + hh;
            M[r] = -INFINITY;
            S[r] = 0.0f;
            memset(out + qq * os + (int64_t)hh * dv, 0, sizeof(float) * (size_t)dv);
        }
    }
    for (;;) {
        int64_t tile = -1;
        uint64_t U = 0;
        int na = 0, nl = 0, g0, g1;
        for (qq = 0; qq < nq; qq++)
            if (pos[qq] < q_end[qq]) {
                int64_t t = cells[pos[qq]] / T;
                tile = tile < 0 || t < tile ? t : tile;
            }
        if (tile < 0)
            break;
        for (qq = 0; qq < nq; qq++) {                    /* each query's lanes in this tile */
            m[qq] = 0;
            while (pos[qq] < q_end[qq] && cells[pos[qq]] / T == tile)
                m[qq] |= (uint64_t)1 << (cells[pos[qq]++] % T);
            U |= m[qq];
        }
        g0 = __builtin_ctzll(U) / 8;
        g1 = (63 - __builtin_clzll(U)) / 8 + 1;
        pyl_c_fa_pack_kt(K + tile * T * ks, ks, f16, U, g0, g1, dk, KT);
        for (qq = 0; qq < nq; qq++)
            if (m[qq])
                for (hh = 0; hh < g; hh++) {
                    arow[na] = q + qq * qs + (int64_t)hh * dk;
                    crow[na++] = P + (size_t)(qq * g + hh) * T + g0 * 8;
                }
        pyl_c_fa_gemm(na, crow, 0, arow, ki, dk, KT + g0 * 8, T, (g1 - g0) * 8, zero, spare);
        na = 0;
        for (qq = 0; qq < nq; qq++) {                    /* online softmax per row */
            if (!m[qq])
                continue;
            for (hh = 0; hh < g; hh++) {
                float *s = P + (size_t)(r = qq * g + hh) * T, tmax = -INFINITY, Mnew;
                float *o = out + qq * os + (int64_t)hh * dv;
                double sum = 0.0;
                for (l = 0; l < T; l++) {
                    float a;
                    if (!(m[qq] >> l & 1)) {
                        s[l] = -INFINITY;
                        continue;
                    }
                    a = s[l] * sc;
                    if (softcap != 0.0f)
                        a = tanhf(a) * softcap;
                    s[l] = a;
                    tmax = a > tmax ? a : tmax;
                }
                Mnew = M[r] > tmax ? M[r] : tmax;
                if (Mnew > M[r]) {
                    float ms = expf(M[r] - Mnew);
                    for (c = 0; c < dv; c++)
                        o[c] *= ms;
                    S[r] *= ms;
                }
                M[r] = Mnew;
                for (l = 0; l < T; l += 8) {
                    float x[8];
                    int t;
                    for (t = 0; t < 8; t++)
                        x[t] = s[l + t] - Mnew;
                    pyl_c_exp8(x, s + l);
                    sum += (double)pyl_c_hsum8(s + l);
                }
                S[r] = (float)((double)S[r] + sum);
                prow[na] = s;
                orow[na++] = o;
            }
        }
        for (l = 0; l < T; l++) {                        /* V [64, dv] of the listed lanes */
            const uint8_t *vr = V + (tile * T + l) * vs;
            float *vd = V32 + (size_t)l * dv;
            if (!(U >> l & 1))
                continue;
            lanes[nl++] = l;
            c = 0;
#if PYL_C_SIMD
            if (f16)
                for (; c + 8 <= dv; c += 8)
                    _mm256_storeu_ps(vd + c, _mm256_cvtph_ps(
                        _mm_loadu_si128((const __m128i *)(vr + 2 * (size_t)c))));
#endif
            for (; c < dv; c++)
                vd[c] = pyl_c_kv_at(vr, f16, c);
        }
        pyl_c_fa_gemm(na, orow, 1, prow, lanes, nl, V32, dv, dv, zero, spare);
    }
    for (r = 0; r < nrow; r++)
        pyl_c_fa_normalise(S[r], dv, out + (r / g) * os + (int64_t)(r % g) * dv);
}

static inline uint16_t pyl_c_f2h(float f) {
#if PYL_C_SIMD
    return _cvtss_sh(f, 0);
#else
    return pyl_p_f2h(f);
#endif
}

/* ---- flash attention over q8_0 / q4_0 K (one_chunk: llama.cpp runs no other FA kernel for them)
 * q as q8_0 blocks (qq int8 [dk], qd [dk / 32] f16 values: quantize_row_q8_0, AVX2); K types by
 * ggml id: 8 q8_0 (34-byte blocks), 2 q4_0 (18-byte blocks). */
#define PYL_C_KV_F16 1
#define PYL_C_KV_Q4_0 2
#define PYL_C_KV_Q8_0 8

/* ggml_vec_dot_q8_0_q8_0 / ggml_vec_dot_q4_0_q8_0 (AVX2): per block 8 lanes of 4-element integer
 * sums, acc = fma(f16(x.d) * f16(y.d), (float)lanes, acc); hsum_float_8 */
static inline float pyl_c_vdot_q8(int kt, const uint8_t *k, const int8_t *qq, const float *qd,
                                  int nb) {
    const int bb = kt == PYL_C_KV_Q8_0 ? 34 : 18;
    int b;
#if PYL_C_SIMD
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc = _mm256_setzero_ps();
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = k + (int64_t)bb * b;
        __m256i x;
        if (kt == PYL_C_KV_Q8_0) {
            x = _mm256_loadu_si256((const __m256i *)(blk + 2));
        } else {
            const __m128i t = _mm_loadu_si128((const __m128i *)(blk + 2));
            x = _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t),
                                                 _mm256_set1_epi8(15)), _mm256_set1_epi8(8));
        }
        const __m256i y = _mm256_loadu_si256((const __m256i *)(qq + 32 * b));
        const __m256i p = _mm256_madd_epi16(
            _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)), ones);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(pyl_c_rd16(blk) * qd[b]), _mm256_cvtepi32_ps(p), acc);
    }
    return pyl_c_hsum_f8(acc);
#else
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int l, e;
    for (b = 0; b < nb; b++) {
        const uint8_t *blk = k + (int64_t)bb * b;
        const float dd = pyl_c_rd16(blk) * qd[b];
        for (l = 0; l < 8; l++) {
            int sum = 0;
            for (e = 4 * l; e < 4 * l + 4; e++) {
                int x = kt == PYL_C_KV_Q8_0 ? (int)(int8_t)blk[2 + e]
                      : (e < 16 ? (blk[2 + e] & 15) : (blk[2 + e - 16] >> 4)) - 8;
                sum += x * qq[32 * b + e];
            }
            acc[l] = fmaf(dd, (float)sum, acc[l]);
        }
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
#endif
}

/* dequantize_row_q8_0 / _q4_0 of one V row (dv elements) */
static inline void pyl_c_deq_v(int vt, const uint8_t *v, int dv, float *y) {
    int b, j;
    for (b = 0; b < dv / 32; b++) {
        if (vt == PYL_C_KV_Q8_0) {
            const uint8_t *blk = v + 34 * b;
            const float d = pyl_c_rd16(blk);
            for (j = 0; j < 32; j++)
                y[32 * b + j] = (float)(int8_t)blk[2 + j] * d;
        } else {
            const uint8_t *blk = v + 18 * b;
            const float d = pyl_c_rd16(blk);
            for (j = 0; j < 16; j++) {
                y[32 * b + j] = (float)((blk[2 + j] & 15) - 8) * d;
                y[32 * b + j + 16] = (float)((blk[2 + j] >> 4) - 8) * d;
            }
        }
    }
}

/* ggml_vec_scale_f16 / ggml_vec_mad_f16 (AVX2): per element y = f16(f32(y) * v), y =
 * f16(fma(f32(x), v, f32(y))); elementwise, so 8 at a time gives the same bits */
static inline void pyl_c_scale_f16(uint16_t *y, int n, float v) {
    int c = 0;
#if PYL_C_SIMD
    const __m256 vv = _mm256_set1_ps(v);
    for (; c + 8 <= n; c += 8)
        _mm_storeu_si128((__m128i *)(y + c), _mm256_cvtps_ph(_mm256_mul_ps(
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + c))), vv), 0));
#endif
    for (; c < n; c++)
        y[c] = pyl_c_f2h(pyl_c_h2f(y[c]) * v);
}

static inline void pyl_c_mad_f16(uint16_t *y, const uint16_t *x, int n, float v) {
    int c = 0;
#if PYL_C_SIMD
    const __m256 vv = _mm256_set1_ps(v);
    for (; c + 8 <= n; c += 8)
        _mm_storeu_si128((__m128i *)(y + c), _mm256_cvtps_ph(_mm256_fmadd_ps(
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + c))), vv,
            _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(y + c)))), 0));
#endif
    for (; c < n; c++)
        y[c] = pyl_c_f2h(fmaf(pyl_c_h2f(x[c]), v, pyl_c_h2f(y[c])));
}

/* ggml_compute_forward_flash_attn_ext_f16_one_chunk for one query row, before the normalisation,
 * over K of type kt (ggml id: 1 f16, 2 q4_0, 8 q8_0) and V of type vt: scores s = vec_dot(k, q)
 * * scale (softcap: softcap * tanhf) with q in K's vec_dot type (f16 K: qd = q rounded to f16,
 * ggml_vec_dot_f16; q8_0 / q4_0 K: qq / qd = q as q8_0 blocks, vec_dot_q*_0_q8_0); online softmax
 * with expf in cell order; an f16 V accumulates in an f16 vector (ggml_vec_scale_f16 /
 * ggml_vec_mad_f16: f32 multiply or fma, rounded to f16 each step), a quantized V is dequantized
 * and summed in f32 (ggml_vec_scale_f32 / ggml_vec_mad_f32); S = fma(S, ms, vs) (gcc contracts
 * it). Returns S, sets *Mout and vkq[dv] = the f32 accumulator. K/V point at this head's first
 * element in cell 0, strides in bytes. work: dv floats. */
static float pyl_c_fa_core(int kt, int vt, const int8_t *qq, const float *qd, int dk, int dv,
                           const uint8_t *K, int64_t ks, const uint8_t *V, int64_t vs,
                           const int32_t *cells, int L, float scale, float softcap, float *work,
                           float *Mout, float *vkq) {
    float *v32 = work;
    uint16_t *acc16 = (uint16_t *)vkq;   /* f16 V: the f16 accumulator in vkq's first bytes */
    float M = -INFINITY, S = 0.0f, sc = softcap != 0.0f ? scale / softcap : scale;
    int j, c;
    if (vt == PYL_C_KV_F16)
        memset(acc16, 0, sizeof(uint16_t) * (size_t)dv);
    else
        memset(vkq, 0, sizeof(float) * (size_t)dv);
    for (j = 0; j < L; j++) {
        const uint8_t *kr = K + (int64_t)cells[j] * ks, *vr = V + (int64_t)cells[j] * vs;
        float s = (kt == PYL_C_KV_F16 ? pyl_c_vdot_f16(qd, (const uint16_t *)kr, dk)
                                      : pyl_c_vdot_q8(kt, kr, qq, qd, dk / 32)) * sc;
        float ms = 1.0f, w = 1.0f;
        if (softcap != 0.0f)
            s = softcap * tanhf(s);
        if (s > M) {
            float Mold = M;
            M = s;
            ms = expf(Mold - M);
            if (vt == PYL_C_KV_F16)
                pyl_c_scale_f16(acc16, dv, ms);
            else
                for (c = 0; c < dv; c++)
                    vkq[c] *= ms;
        } else {
            w = expf(s - M);
        }
        if (vt == PYL_C_KV_F16) {
            pyl_c_mad_f16(acc16, (const uint16_t *)vr, dv, w);
        } else {
            pyl_c_deq_v(vt, vr, dv, v32);
            for (c = 0; c < dv; c++)
                vkq[c] = fmaf(v32[c], w, vkq[c]);
        }
        S = fmaf(S, ms, w);
    }
    if (vt == PYL_C_KV_F16)              /* widen in place, from the top (2-byte -> 4-byte slots) */
        for (c = dv - 1; c >= 0; c--)
            vkq[c] = pyl_c_h2f(acc16[c]);
    *Mout = M;
    return S;
}

/* one_chunk for one query row over q8_0 / q4_0 / f16 K and q8_0 / q4_0 / f16 V
 * (pyl_c_fa_core), normalised. work: dv floats. */
static void pyl_c_fa_chunk_q(int kt, int vt, const int8_t *qq, const float *qd, int dk, int dv,
                             const uint8_t *K, int64_t ks, const uint8_t *V, int64_t vs,
                             const int32_t *cells, int L, float scale, float softcap,
                             float *work, float *out) {
    float M;
    pyl_c_fa_normalise(pyl_c_fa_core(kt, vt, qq, qd, dk, dv, K, ks, V, vs, cells, L, scale,
                                     softcap, work, &M, out), dv, out);
}

/* q rounded to f16 (ggml's from_float for an f16 K) into qf[dk] */
static inline void pyl_c_q_f16(const float *q, int dk, float *qf) {
    int c;
    for (c = 0; c < dk; c++)
        qf[c] = pyl_c_f16r(q[c]);
}

/* one_chunk for one query row over f16 K/V, normalised. work: dk + dv floats */
static void pyl_c_fa_chunk_head(const float *q, int dk, int dv, const uint16_t *K, int64_t ks,
                                const uint16_t *V, int64_t vs, const int32_t *cells, int L,
                                float scale, float softcap, float *work, float *out) {
    pyl_c_q_f16(q, dk, work);
    pyl_c_fa_chunk_q(PYL_C_KV_F16, PYL_C_KV_F16, 0, work, dk, dv, (const uint8_t *)K, 2 * ks,
                     (const uint8_t *)V, 2 * vs, cells, L, scale, softcap, work + dk, out);
}

/* the split-KV decode path (one query, a KV view of nek1 >= 512 cells, f16): nth chunks of
 * ceil(nek1 / nth) cells of the view (cell - base), one_chunk on each, then
 * ggml_flash_attn_ext_reduce_partials in chunk order: chunks with S = 0 skipped;
 * M' = fmaxf(M, Mc), VKQ = VKQ * expf(M - M') + VKQc * expf(Mc - M') and S likewise (gcc
 * contracts the first product into an fma), out = VKQ * (1/S). work: dk + 2 * dv floats. */
static void pyl_c_fa_split_head(const float *q, int dk, int dv, const uint16_t *K, int64_t ks,
                                const uint16_t *V, int64_t vs, const int32_t *cells, int L,
                                int base, int nek1, int nth, float scale, float softcap,
                                float *work, float *out) {
    float *part = work + dk + dv, Mf = -INFINITY, Sf = 0.0f;
    int64_t cs = (nek1 + nth - 1) / nth;
    int ch, j = 0, c;
    pyl_c_q_f16(q, dk, work);
    memset(out, 0, sizeof(float) * (size_t)dv);
    for (ch = 0; ch < nth; ch++) {
        int j0 = j;
        float Mc, Sc, Mn, so, sn;
        while (j < L && cells[j] - base < (ch + 1) * cs)
            j++;
        if ((int64_t)ch * cs >= nek1 || j == j0)
            continue;                            /* empty chunk: M = -inf, S = 0 */
        Sc = pyl_c_fa_core(PYL_C_KV_F16, PYL_C_KV_F16, 0, work, dk, dv, (const uint8_t *)K,
                           2 * ks, (const uint8_t *)V, 2 * vs, cells + j0, j - j0, scale, softcap,
                           work + dk, &Mc, part);
        if (Sc == 0.0f)
            continue;
        Mn = fmaxf(Mf, Mc);
        so = expf(Mf - Mn);
        sn = expf(Mc - Mn);
        for (c = 0; c < dv; c++)
            out[c] = fmaf(out[c], so, part[c] * sn);
        Sf = fmaf(Sf, so, Sc * sn);
        Mf = Mn;
    }
    pyl_c_fa_normalise(Sf, dv, out);
}

#endif
