/* Quantized mat-vec / mat-mat kernels (llama.cpp numerics), used by _matmul.pyx.
 *
 * Plan (batch invariance: docs/architecture.md, docs/numerics.md):
 * - activations x [n, k] f32 are quantized once per call into the weight type's vec_dot type
 *   (q8_0 / q8_1 for 32-blocks, q8_K for K-quants, f16/bf16/f32 for float weights);
 * - a tile of PYL_R weight rows is decoded once into a per-thread scratch ("decoded rows":
 *   int8 values + integer sub-scales + float block scales), then multiplied with every token in
 *   tiles of up to PYL_T tokens;
 * - each output element y[t, r] is produced by the same sequence of operations whatever the tile
 *   shape, the number of tokens or threads.  32-blocks: 8 lanes of exact integer partial sums
 *   per block, acc_lane = fma(d_w * d_x, (float)lane, acc_lane) over blocks in order, then one
 *   fixed horizontal sum.  K-quants: llama.cpp's prefill arithmetic (docs/numerics.md) as scalar
 *   chains of exact integer sums: Q4_K (and the other min types) one fma per 64-element
 *   sub-block pair plus a separate min chain, activations by the 4x8 repack rule for Q4_K;
 *   Q6_K/Q3_K one fma per super-block (ggml tiled).  Threads split row tiles only.
 * - with few tokens (token generation; speculative verification) the weight blocks are decoded
 *   in registers instead of through the scratch (pyl_dot*_direct, pyl_dotA_group): the same
 *   integer lanes and the same float operations in the same order, so the same bits (tests
 *   compare the paths for every row count).  32-block types: up to PYL_DIRECT_MAX_A tokens, each
 *   block decoded once per group of up to PYL_DG tokens; K-quants: up to PYL_DIRECT_MAX_K tokens,
 *   each super-block decoded once per row into a stack block, then the 1-token operations per
 *   token (a 1-row version of the 4-token K tile was slower: its float chain is latency-bound
 *   without the tile's 4 independent rows); one token of Q4_K / Q6_K runs 4 rows at once
 *   (pyl_q4K_r4 / pyl_q6K_r4: integer sums straight from the packed blocks, the 4 rows' float
 *   chains in the lanes of one register), the same bits as pyl_dotK_direct1 row by row.
 * - where the CPU has them, VNNI (dpbusd) gives the 32-block integer lanes and AVX-512 runs the
 *   32-block tile on 4 tokens in 2 token pairs per register: the same exact integers and the
 *   same float operations per 8-lane half, so the same bits as the AVX2 build.
 * - AVX2 without VNNI: the repacked 8x8 types (| PYL_R8) read an 8-row interleaved copy of the
 *   weight (| PYL_RP, pyl_r8_repack: lane = row, as llama.cpp's block_*x8) and IQ4_XS from 4
 *   tokens takes 8-row tiles of the same layout (pyl_tile_rows): one exact integer per block
 *   and row with no horizontal sums, then each row's own fma chain.
 * A portable scalar path (no __AVX2__) keeps the same structure with one scalar accumulator
 * (tiles only); its results are self-consistent but not bit-equal to the AVX2 build's.
 */
#ifndef PYL_MATMUL_H
#define PYL_MATMUL_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "pyl_iq_grids.h"
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define PYL_AVX2 1
#else
#define PYL_AVX2 0
#endif

#define PYL_R 4 /* weight rows per tile */
#define PYL_T 4 /* tokens per tile (K-quant and float tiles) */
#define PYL_TA 2 /* tokens per tile for 32-block types */

/* ggml type ids */
enum {
    PYL_F32 = 0, PYL_F16 = 1, PYL_Q4_0 = 2, PYL_Q4_1 = 3, PYL_Q5_0 = 6, PYL_Q5_1 = 7,
    PYL_Q8_0 = 8, PYL_Q2_K = 10, PYL_Q3_K = 11, PYL_Q4_K = 12, PYL_Q5_K = 13, PYL_Q6_K = 14,
    PYL_IQ2_XXS = 16, PYL_IQ2_XS = 17, PYL_IQ3_XXS = 18, PYL_IQ1_S = 19, PYL_IQ3_S = 21,
    PYL_IQ2_S = 22, PYL_IQ4_XS = 23, PYL_IQ1_M = 29, PYL_BF16 = 30, PYL_IQ4_NL = 20,
    PYL_MXFP4 = 39, PYL_TQ1_0 = 34, PYL_TQ2_0 = 35
};
/* a weight type id | PYL_R8: the weight as llama.cpp repacks it on AVX2 (Q4_0, IQ4_NL, MXFP4 with
 * rows % 8 == 0: block_*x8, ggml_gemm/gemv_*_8x8_q8_0): per 32-block the exact integer dot I,
 * acc = fma((float)I, d_w * d_x, acc) */
#define PYL_R8 256
/* a weight type id | PYL_V2: ggml_vec_dot_{iq4_nl,mxfp4}_q8_0 (AVX2) for every row: block pairs
 * into two 8-lane fma chains, hsum8(acc1 + acc2), an odd last block added as
 * fma(d, (float)I, sum) */
#define PYL_V2 512
/* Q4_K | PYL_KT: a Q4_K llama.cpp does not repack (rows % 8 != 0): the tiled kernel with mins
 * (mode 3 below) on plain q8_K activations */
#define PYL_KT 1024
#define PYL_Q4_KT (PYL_Q4_K | PYL_KT)
/* a PYL_R8 kernel type | PYL_RP: the weight bytes are pyl_r8_repack's copy (8-row groups
 * interleaved as llama.cpp's block_*x8; AVX2 builds without VNNI, see PYL_HAVE_RP) instead of
 * the GGUF rows; the same arithmetic */
#define PYL_RP 2048
/* activation kinds (the vec_dot type) */
enum { PYL_ACT_Q8_0 = 0, PYL_ACT_Q8_K = 1, PYL_ACT_F16 = 2, PYL_ACT_BF16 = 3, PYL_ACT_F32 = 4,
       PYL_ACT_Q8_K4 = 5 /* q8_K values by the 4x8 repack rule (Q4_K) */ };

/* ---------------------------------------------------------------- fp16 / bf16 ------------ */
static inline uint32_t pyl_fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float pyl_bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline float pyl_f16_to_f32(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    const uint32_t w = (uint32_t)h << 16, sign = w & 0x80000000u, two_w = w + w;
    const float norm = pyl_bitsf((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denorm = pyl_bitsf((two_w >> 17) | (126u << 23)) - 0.5f;
    return pyl_bitsf(sign | (two_w < (1u << 27) ? pyl_fbits(denorm) : pyl_fbits(norm)));
#endif
}

static inline uint16_t pyl_f32_to_f16(float f) {
#if defined(__F16C__)
    return _cvtss_sh(f, 0);
#else
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = pyl_fbits(f), shl1_w = w + w, sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = pyl_bitsf((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = pyl_fbits(base);
    const uint32_t nonsign = ((bits >> 13) & 0x7C00u) + (bits & 0x0FFFu);
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
#endif
}

static inline float pyl_rd_f16(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return pyl_f16_to_f32(h); }
static inline float pyl_round_f16(float f) { return pyl_f16_to_f32(pyl_f32_to_f16(f)); }

/* f16 -> f32 for every bit pattern (as ggml_table_f32_f16): the mat-vec kernels read block scales
 * through it (one broadcast load instead of insert + convert + broadcast). Filled once by
 * pyl_init_tables() when _matmul is imported. */
static float pyl_f16_table[65536];
/* ggml_e8m0_to_fp32_half for every byte (MXFP4 block scales) */
static float pyl_e8m0h_table[256];
static void pyl_init_tables(void) {
    for (uint32_t i = 0; i < 65536; i++) pyl_f16_table[i] = pyl_f16_to_f32((uint16_t)i);
    for (uint32_t e = 0; e < 256; e++) {
        const uint32_t bits = e < 2 ? 0x00200000u << e : (e - 1) << 23;
        memcpy(&pyl_e8m0h_table[e], &bits, 4);
    }
}
static inline const float *pyl_f16_ref(const uint8_t *p) { uint16_t h; memcpy(&h, p, 2); return &pyl_f16_table[h]; }
/* the scale of a family-A block: f16 d first, MXFP4's E8M0 exponent byte */
static inline const float *pyl_scaleA_ref(int t, const uint8_t *x) {
    return t == PYL_MXFP4 ? &pyl_e8m0h_table[x[0]] : pyl_f16_ref(x);
}

static inline float pyl_round_bf16(float f) { /* ggml_compute_fp32_to_bf16, back to f32 */
    uint32_t u = pyl_fbits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return pyl_bitsf(((u >> 16) | 64u) << 16);
    return pyl_bitsf(((u + (0x7fffu + ((u >> 16) & 1u))) >> 16) << 16);
}

/* ---------------------------------------------------------------- activation quantizers -- */
/* q8_0 / q8_1 row (llama.cpp x86 quantize_row_q8_0/q8_1): d = amax/127 (stored as f16),
 * q = round_half_even(x * (127/amax)); s = f16(d * sum(q)).  d, s are written as f32 values. */
static inline void pyl_quant_q8_0(const float *x, int k, int8_t *q, float *d, float *s) {
    for (int b = 0; b < k / 32; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f;
        int sum = 0;
#if PYL_AVX2
        __m256 v[4];
        const __m256 sign = _mm256_set1_ps(-0.0f);
        __m256 ma = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(xb + 8 * i);
            ma = _mm256_max_ps(ma, _mm256_andnot_ps(sign, v[i]));
        }
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(ma, 1), _mm256_castps256_ps128(ma));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        amax = _mm_cvtss_f32(m4);
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        __m256i iv[4], acc = _mm256_setzero_si256();
        for (int i = 0; i < 4; i++) {
            iv[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], id),
                                                       _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
            acc = _mm256_add_epi32(acc, iv[i]);
        }
        const __m256i p01 = _mm256_packs_epi32(iv[0], iv[1]), p23 = _mm256_packs_epi32(iv[2], iv[3]);
        const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + 32 * b), p);
        __m128i a4 = _mm_add_epi32(_mm256_extracti128_si256(acc, 1), _mm256_castsi256_si128(acc));
        a4 = _mm_add_epi32(a4, _mm_shuffle_epi32(a4, 0x4E));
        a4 = _mm_add_epi32(a4, _mm_shuffle_epi32(a4, 0xB1));
        sum = _mm_cvtsi128_si32(a4);
#else
        for (int j = 0; j < 32; j++) { const float ax = fabsf(xb[j]); amax = ax > amax ? ax : amax; }
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int j = 0; j < 32; j++) {
            const int v = (int)nearbyintf(xb[j] * id);
            q[32 * b + j] = (int8_t)v;
            sum += v;
        }
#endif
        const float dd = amax / 127.f;
        d[b] = pyl_round_f16(dd);
        s[b] = pyl_round_f16(dd * (float)sum);
    }
}

/* q8_K row (quantize_row_q8_K_ref): iscale = -127/max (max = the first value of largest |x|),
 * q = min(127, nearest_int(iscale*x)), bsums per 16, d = 1/iscale (f32).
 * rule4x8 (ggml_quantize_mat_q8_K_4x8, the activations of llama.cpp's repacked Q4_K gemm):
 * max = +amax if some element equals +amax, else -amax; the rest is the same. */
static inline void pyl_quant_q8_K(const float *x, int k, int8_t *q, float *d, int16_t *bs, int rule4x8) {
    for (int b = 0; b < k / 256; b++) {
        const float *xb = x + 256 * b;
        int8_t *qb = q + 256 * b;
        float amax = 0.0f, mx = 0.0f;
#if PYL_AVX2
        const __m256 sign = _mm256_set1_ps(-0.0f);
        __m256 ma = _mm256_setzero_ps();
        for (int j = 0; j < 256; j += 8) ma = _mm256_max_ps(ma, _mm256_andnot_ps(sign, _mm256_loadu_ps(xb + j)));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(ma, 1), _mm256_castps256_ps128(ma));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        amax = _mm_cvtss_f32(m4);
        for (int j = 0; j < 256; j++)       /* the first value of largest magnitude */
            if (fabsf(xb[j]) == amax) { mx = xb[j]; break; }
#else
        for (int j = 0; j < 256; j++) {
            const float ax = fabsf(xb[j]);
            if (ax > amax) { amax = ax; mx = xb[j]; }
        }
#endif
        if (rule4x8) {
            mx = -amax;
            for (int j = 0; j < 256; j++)
                if (xb[j] == amax) { mx = amax; break; }
        }
        if (amax == 0.0f) {
            d[b] = 0.0f;
            memset(qb, 0, 256);
            memset(bs + 16 * b, 0, 32);
            continue;
        }
        const float iscale = -127.f / mx;
#if PYL_AVX2
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i lim = _mm256_set1_epi32(127);
        for (int j = 0; j < 256; j += 32) {
            __m256i iv[4];
            for (int i = 0; i < 4; i++)
                iv[i] = _mm256_min_epi32(lim, _mm256_cvtps_epi32(_mm256_round_ps(
                    _mm256_mul_ps(is, _mm256_loadu_ps(xb + j + 8 * i)),
                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)));
            const __m256i p01 = _mm256_packs_epi32(iv[0], iv[1]), p23 = _mm256_packs_epi32(iv[2], iv[3]);
            _mm256_storeu_si256((__m256i *)(qb + j), _mm256_permutevar8x32_epi32(
                _mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        }
#else
        for (int j = 0; j < 256; j++) {
            const int v = (int)nearbyintf(iscale * xb[j]);
            qb[j] = (int8_t)(v < 127 ? v : 127);
        }
#endif
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += qb[16 * j + i];
            bs[16 * b + j] = (int16_t)sum;
        }
        d[b] = 1.0f / iscale;
    }
}

/* ---------------------------------------------------------------- decoded rows ----------- */
/* One decoded weight row inside a scratch buffer of PYL_ROWB(k) bytes.
 * family A (32-blocks): w int8[k] (signed values), aw uint8[k] (|w|), d f32[k/32], m f32[k/32]
 * family K (256-blocks): w uint8[k] (values + offset, 0..63), sc int16[k/2] (per 32-chunk c:
 *   16 int16, positions 0-7 the scale of elements 0-15, 8-15 of 16-31), mn int16[k/16]
 *   (per 16 elements: the min, or offset*scale for offset types), d f32[k/256], dm f32[k/256]
 * family F: f f32[k] */
#define PYL_ROWB(k) (4 * (int64_t)(k) + 256)

typedef struct {
    int8_t *w; uint8_t *aw; float *d; float *m;
    int16_t *sc; int16_t *mn; float *dm;
    float *f;
} pyl_wrow;

static inline void pyl_wrow_init(pyl_wrow *W, uint8_t *buf, int k) {
    W->w = (int8_t *)buf;
    W->aw = buf + k;
    W->sc = (int16_t *)(buf + k);                  /* K family uses this slot for scales */
    W->mn = (int16_t *)(buf + 2 * (int64_t)k);
    W->d = (float *)(buf + 2 * (int64_t)k + k / 4 + 32);
    W->m = W->d + k / 32 + 8;
    W->dm = W->m;                                   /* K family: d[k/256], dmin[k/256] */
    W->f = (float *)buf;
}

/* family of a weight type: 0 = A (q8_0 activations), 1 = K (q8_K), 2 = float; -1 unsupported */
static inline int pyl_family(int t) {
    switch (t & 255) {
    case PYL_Q4_0: case PYL_Q4_1: case PYL_Q5_0: case PYL_Q5_1: case PYL_Q8_0: return 0;
    case PYL_IQ4_NL: case PYL_MXFP4: return 0;
    case PYL_Q2_K: case PYL_Q3_K: case PYL_Q4_K: case PYL_Q5_K: case PYL_Q6_K: return 1;
    case PYL_IQ2_XXS: case PYL_IQ2_XS: case PYL_IQ2_S: case PYL_IQ3_XXS: case PYL_IQ3_S:
    case PYL_IQ1_S: case PYL_IQ1_M: case PYL_IQ4_XS: return 1;
    case PYL_TQ1_0: case PYL_TQ2_0: return 1;
    case PYL_F32: case PYL_F16: case PYL_BF16: return 2;
    default: return -1;
    }
}
static inline int pyl_act_kind(int t) {
    if (t & PYL_KT) return PYL_ACT_Q8_K;
    t &= 255;
    switch (pyl_family(t)) {
    case 0: return PYL_ACT_Q8_0;
    case 1: return t == PYL_Q4_K ? PYL_ACT_Q8_K4 : PYL_ACT_Q8_K;
    default: return t == PYL_F16 ? PYL_ACT_F16 : t == PYL_BF16 ? PYL_ACT_BF16 : PYL_ACT_F32;
    }
}
/* K family arithmetic modes:
 * 0: offset types (the -off*sc*bsum term folds into the integer sum; ggml tiled kernel);
 * 1: Q4_K, repacked by llama.cpp (ggml_gemm_q4_K_8x8_q8_K: I, M per 64-element pair);
 * 2: signed values (IQ4_XS: int8 in [-127, 113], dotted by the sign trick; tiled kernel);
 * 3: Q2_K / Q5_K (ggml tiled kernel with mins: S1 = sum sc*q*y, S2 = sum mins*bsums per
 *    super-block, res = fma(-dmin, (float)S2, d*(float)S1), acc = fma(res, dy, acc)) */
static inline int pyl_has_min(int t) {
    if (t & PYL_KT) return 3;
    return t == PYL_Q4_K ? 1 : t == PYL_Q2_K || t == PYL_Q5_K ? 3 : t == PYL_IQ4_XS ? 2 : 0;
}
static inline int pyl_is_iq(int t) {
    switch (t) {
    case PYL_IQ2_XXS: case PYL_IQ2_XS: case PYL_IQ2_S: case PYL_IQ3_XXS: case PYL_IQ3_S:
    case PYL_IQ1_S: case PYL_IQ1_M: case PYL_IQ4_XS: case PYL_TQ1_0: case PYL_TQ2_0: return 1;
    default: return 0;
    }
}
static inline int pyl_has_m(int t) { return t == PYL_Q4_1 || t == PYL_Q5_1; }

/* ---- family A decoders: one 32-block -> w[32] signed */
static inline void pyl_dec_q4_0(const uint8_t *__restrict x, int8_t *__restrict w, float *d, float *m) {
    *d = pyl_rd_f16(x); *m = 0.0f;
    for (int j = 0; j < 16; j++) {
        w[j] = (int8_t)((x[2 + j] & 0xF) - 8);
        w[j + 16] = (int8_t)((x[2 + j] >> 4) - 8);
    }
}
static inline void pyl_dec_q4_1(const uint8_t *__restrict x, int8_t *__restrict w, float *d, float *m) {
    *d = pyl_rd_f16(x); *m = pyl_rd_f16(x + 2);
    for (int j = 0; j < 16; j++) {
        w[j] = (int8_t)(x[4 + j] & 0xF);
        w[j + 16] = (int8_t)(x[4 + j] >> 4);
    }
}
static inline void pyl_qh_bits(const uint8_t *qh, uint8_t *hb) { /* hb[j] = bit j of qh, 0/16 */
    for (int j = 0; j < 32; j++) hb[j] = (uint8_t)(((qh[j >> 3] >> (j & 7)) & 1) << 4);
}
static inline void pyl_dec_q5_0(const uint8_t *__restrict x, int8_t *__restrict w, float *d, float *m) {
    uint8_t hb[32];
    *d = pyl_rd_f16(x); *m = 0.0f;
    pyl_qh_bits(x + 2, hb);
    for (int j = 0; j < 16; j++) {
        w[j] = (int8_t)(((x[6 + j] & 0xF) | hb[j]) - 16);
        w[j + 16] = (int8_t)(((x[6 + j] >> 4) | hb[j + 16]) - 16);
    }
}
static inline void pyl_dec_q5_1(const uint8_t *__restrict x, int8_t *__restrict w, float *d, float *m) {
    uint8_t hb[32];
    *d = pyl_rd_f16(x); *m = pyl_rd_f16(x + 2);
    pyl_qh_bits(x + 4, hb);
    for (int j = 0; j < 16; j++) {
        w[j] = (int8_t)((x[8 + j] & 0xF) | hb[j]);
        w[j + 16] = (int8_t)((x[8 + j] >> 4) | hb[j + 16]);
    }
}
static inline void pyl_dec_q8_0(const uint8_t *__restrict x, int8_t *__restrict w, float *d, float *m) {
    *d = pyl_rd_f16(x); *m = 0.0f;
    memcpy(w, x + 2, 32);
}
/* IQ4_NL / MXFP4: 4-bit indices into kvalues_iq4nl / kvalues_mxfp4 (low nibbles 0-15, high 16-31) */
static inline void pyl_dec_lut4(const uint8_t *__restrict qs, const int8_t *lut, int8_t *__restrict w) {
    for (int j = 0; j < 16; j++) { w[j] = lut[qs[j] & 0xF]; w[j + 16] = lut[qs[j] >> 4]; }
}

static inline int pyl_block_bytes(int t) {
    switch (t & 255) {
    case PYL_Q4_0: return 18; case PYL_Q4_1: return 20; case PYL_Q5_0: return 22;
    case PYL_Q5_1: return 24; case PYL_Q8_0: return 34; case PYL_Q2_K: return 84;
    case PYL_Q3_K: return 110; case PYL_Q4_K: return 144; case PYL_Q5_K: return 176;
    case PYL_Q6_K: return 210; case PYL_F32: return 4;
    case PYL_IQ4_NL: return 18; case PYL_MXFP4: return 17;
    case PYL_IQ2_XXS: return 66; case PYL_IQ2_XS: return 74; case PYL_IQ2_S: return 82;
    case PYL_IQ3_XXS: return 98; case PYL_IQ3_S: return 110; case PYL_IQ1_S: return 50;
    case PYL_IQ1_M: return 56; case PYL_IQ4_XS: return 136;
    case PYL_TQ1_0: return 54; case PYL_TQ2_0: return 66;
    default: return 2;
    }
}

#if PYL_AVX2
/* 16 packed bytes -> 32 values: low nibbles (elements 0-15), high nibbles (16-31) */
static inline __m256i pyl_nib32(const uint8_t *x) { /* broadcast load, one shift (no insert) */
    const __m256i q = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)x));
    return _mm256_and_si256(_mm256_srlv_epi64(q, _mm256_set_epi64x(4, 4, 0, 0)), _mm256_set1_epi8(0xF));
}
static inline __m256i pyl_bits32(const uint8_t *qh) { /* 0xFF where bit j of qh is set */
    uint32_t x32; memcpy(&x32, qh, 4);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32((int)x32), shuf);
    bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
    return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}
static inline __m256i pyl_dec32_avx2(int t, const uint8_t *x) {
    const __m256i b16 = _mm256_set1_epi8(16);
    switch (t) {
    case PYL_Q4_0: return _mm256_sub_epi8(pyl_nib32(x + 2), _mm256_set1_epi8(8));
    case PYL_Q4_1: return pyl_nib32(x + 4);
    case PYL_Q5_0: /* nibble | (bit ? 0x00 : 0xF0) as int8 == (nibble | bit << 4) - 16 */
        return _mm256_or_si256(pyl_nib32(x + 6), _mm256_andnot_si256(pyl_bits32(x + 2),
                                                                      _mm256_set1_epi8((char)0xF0)));
    case PYL_Q5_1: return _mm256_or_si256(pyl_nib32(x + 8), _mm256_and_si256(pyl_bits32(x + 4), b16));
    case PYL_IQ4_NL: return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)pyl_kvalues_iq4nl)), pyl_nib32(x + 2));
    case PYL_MXFP4: return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)pyl_kvalues_fp4)), pyl_nib32(x + 1));
    default: return _mm256_loadu_si256((const __m256i *)(x + 2));
    }
}
#endif

static inline void pyl_decode_A(int t, const uint8_t *src, int k, pyl_wrow *W) {
    const int bb = pyl_block_bytes(t), hm = pyl_has_m(t);
    int8_t *__restrict w = W->w;
    uint8_t *__restrict aw = W->aw;
    float *__restrict d = W->d, *__restrict m = W->m;
    for (int b = 0; b < k / 32; b++) {
        const uint8_t *x = src + (int64_t)bb * b;
        d[b] = *pyl_scaleA_ref(t, x);
        m[b] = hm ? pyl_rd_f16(x + 2) : 0.0f;
#if PYL_AVX2
        const __m256i v = pyl_dec32_avx2(t, x);
        _mm256_storeu_si256((__m256i *)(w + 32 * b), v);
        _mm256_storeu_si256((__m256i *)(aw + 32 * b), _mm256_abs_epi8(v));
#else
        float dd, mm;
        switch (t) {
        case PYL_Q4_0: pyl_dec_q4_0(x, w + 32 * b, &dd, &mm); break;
        case PYL_Q4_1: pyl_dec_q4_1(x, w + 32 * b, &dd, &mm); break;
        case PYL_Q5_0: pyl_dec_q5_0(x, w + 32 * b, &dd, &mm); break;
        case PYL_Q5_1: pyl_dec_q5_1(x, w + 32 * b, &dd, &mm); break;
        case PYL_IQ4_NL: pyl_dec_lut4(x + 2, pyl_kvalues_iq4nl, w + 32 * b); break;
        case PYL_MXFP4: pyl_dec_lut4(x + 1, pyl_kvalues_fp4, w + 32 * b); break;
        default: pyl_dec_q8_0(x, w + 32 * b, &dd, &mm); break;
        }
        for (int j = 0; j < 32; j++) aw[32 * b + j] = (uint8_t)(w[32 * b + j] < 0 ? -w[32 * b + j] : w[32 * b + j]);
#endif
    }
}

/* ---- family K decoders: one 256-superblock -> u[256] unsigned, s16[16] scale per 16 elements,
 * mn[16] per 16 elements (min, or offset*scale), d, dmin */
static inline void pyl_scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) { *sc = q[j] & 63; *m = q[j + 4] & 63; }
    else { *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4); *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4); }
}
/* the 8 scales then the 8 mins of a Q4_K/Q5_K block (llama.cpp's utmp unpacking) */
static inline void pyl_scale_min_k4_all(const uint8_t *q, uint8_t *out16) {
    uint32_t a[4];
    memcpy(a, q, 12);
    const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
    a[3] = ((a[2] >> 4) & k2) | (((a[1] >> 6) & k3) << 4);
    const uint32_t uaux = a[1] & k1;
    a[1] = (a[2] & k2) | (((a[0] >> 6) & k3) << 4);
    a[2] = uaux;
    a[0] &= k1;
    memcpy(out16, a, 16);
}
static inline void pyl_dec_q4_K(const uint8_t *__restrict x, uint8_t *__restrict u, int *__restrict s16, int *__restrict mn, float *d, float *dm) {
    *d = pyl_rd_f16(x); *dm = pyl_rd_f16(x + 2);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        pyl_scale_min_k4(j, x + 4, &sc, &m);
        s16[2 * j] = s16[2 * j + 1] = sc;
        mn[2 * j] = mn[2 * j + 1] = m;
    }
    const uint8_t *qs = x + 16;
    for (int i = 0; i < 4; i++)
        for (int l = 0; l < 32; l++) {
            u[64 * i + l] = qs[32 * i + l] & 0xF;
            u[64 * i + 32 + l] = qs[32 * i + l] >> 4;
        }
}
static inline void pyl_dec_q5_K(const uint8_t *__restrict x, uint8_t *__restrict u, int *__restrict s16, int *__restrict mn, float *d, float *dm) {
    *d = pyl_rd_f16(x); *dm = pyl_rd_f16(x + 2);
    for (int j = 0; j < 8; j++) {
        int sc, m;
        pyl_scale_min_k4(j, x + 4, &sc, &m);
        s16[2 * j] = s16[2 * j + 1] = sc;
        mn[2 * j] = mn[2 * j + 1] = m;
    }
    const uint8_t *qh = x + 16, *qs = x + 48;
    for (int i = 0; i < 4; i++)
        for (int l = 0; l < 32; l++) {
            u[64 * i + l] = (uint8_t)((qs[32 * i + l] & 0xF) | (((qh[l] >> (2 * i)) & 1) << 4));
            u[64 * i + 32 + l] = (uint8_t)((qs[32 * i + l] >> 4) | (((qh[l] >> (2 * i + 1)) & 1) << 4));
        }
}
static inline void pyl_dec_q6_K(const uint8_t *__restrict x, uint8_t *__restrict u, int *__restrict s16, int *__restrict mn, float *d, float *dm) {
    const uint8_t *ql = x, *qh = x + 128;
    const int8_t *sc = (const int8_t *)(x + 192);
    *d = pyl_rd_f16(x + 208); *dm = 0.0f;
    for (int j = 0; j < 16; j++) { s16[j] = sc[j]; mn[j] = 32 * sc[j]; }
    for (int h = 0; h < 2; h++) {
        const uint8_t *l0 = ql + 64 * h, *hh = qh + 32 * h;
        uint8_t *o = u + 128 * h;
        for (int l = 0; l < 32; l++) {
            o[l] = (uint8_t)((l0[l] & 0xF) | ((hh[l] & 3) << 4));
            o[l + 32] = (uint8_t)((l0[l + 32] & 0xF) | (((hh[l] >> 2) & 3) << 4));
            o[l + 64] = (uint8_t)((l0[l] >> 4) | (((hh[l] >> 4) & 3) << 4));
            o[l + 96] = (uint8_t)((l0[l + 32] >> 4) | (((hh[l] >> 6) & 3) << 4));
        }
    }
}
static inline void pyl_dec_q2_K(const uint8_t *__restrict x, uint8_t *__restrict u, int *__restrict s16, int *__restrict mn, float *d, float *dm) {
    const uint8_t *sc = x, *qs = x + 16;
    *d = pyl_rd_f16(x + 80); *dm = pyl_rd_f16(x + 82);
    for (int j = 0; j < 16; j++) { s16[j] = sc[j] & 0xF; mn[j] = sc[j] >> 4; }
#if PYL_AVX2   /* the same bytes: a 16-bit shift keeps bits 0-1 of each byte its own (shift <= 6) */
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h)), m3 = _mm256_set1_epi8(3);
        for (int j = 0; j < 4; j++)
            _mm256_storeu_si256((__m256i *)(u + 128 * h + 32 * j), _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3));
    }
#else
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++)
                u[128 * h + 32 * j + l] = (qs[32 * h + l] >> (2 * j)) & 3;
#endif
}
static inline void pyl_dec_q3_K(const uint8_t *__restrict x, uint8_t *__restrict u, int *__restrict s16, int *__restrict mn, float *d, float *dm) {
    const uint8_t *hm = x, *qs = x + 32, *sc = x + 96;
    *d = pyl_rd_f16(x + 108); *dm = 0.0f;
    for (int s = 0; s < 16; s++) {
        const int lo = s < 8 ? (sc[s] & 0xF) : (sc[s - 8] >> 4);
        const int hi = (sc[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
        s16[s] = (lo | (hi << 4)) - 32;
        mn[s] = 4 * s16[s];
    }
#if PYL_AVX2
    const __m256i hv = _mm256_loadu_si256((const __m256i *)hm), m3 = _mm256_set1_epi8(3), b4 = _mm256_set1_epi8(4);
    for (int h = 0; h < 2; h++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
        for (int j = 0; j < 4; j++) {
            const __m256i bit = _mm256_set1_epi8((char)(1 << (4 * h + j)));
            const __m256i hi = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, bit), bit), b4);
            _mm256_storeu_si256((__m256i *)(u + 128 * h + 32 * j),
                                _mm256_add_epi8(_mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3), hi));
        }
    }
#else
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++) {
            const int m = 1 << (4 * h + j);
            for (int l = 0; l < 32; l++)
                u[128 * h + 32 * j + l] = (uint8_t)(((qs[32 * h + l] >> (2 * j)) & 3) + ((hm[l] & m) ? 4 : 0));
        }
#endif
}

/* ---- i-quant decoders (family K, llama.cpp's tiled-kernel representation, ggml-cpu/tiled):
 * signed values v (grid entry times sign; IQ1: 8*grid + delta), stored u = v + 64 (IQ4_XS: v as
 * int8), integer scales per 16 elements (s16), mn = 64*scale, d = the f16 scale times the
 * power of two the integer scales leave out (0.125 for IQ1/IQ2, 0.25 for IQ3_XXS) */
#define PYL_IQ_OFF 64
static inline void pyl_iq_signed8(uint64_t g, uint8_t signs, uint8_t *u) {
    for (int j = 0; j < 8; j++) {
        const int v = (int)((g >> (8 * j)) & 0xFF);
        u[j] = (uint8_t)(PYL_IQ_OFF + ((signs >> j) & 1 ? -v : v));
    }
}
/* four 8-value groups (g[l]: grid entry, s[l]: its 8 sign bits) -> 32 values u (AVX2: the same
 * bytes in one register: sign masks by bit test, v ^ m - m) */
static inline void pyl_iq_signed4(const uint64_t *g, const uint8_t *s, uint8_t *u) {
#if PYL_AVX2
    const __m256i v = _mm256_set_epi64x((long long)g[3], (long long)g[2], (long long)g[1], (long long)g[0]);
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202,
                                           0x0101010101010101, 0x0000000000000000);
    const __m256i bits = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    const int s4 = (int)((uint32_t)s[0] | (uint32_t)s[1] << 8 | (uint32_t)s[2] << 16 | (uint32_t)s[3] << 24);
    const __m256i m = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(s4), shuf), bits), bits);
    _mm256_storeu_si256((__m256i *)u, _mm256_add_epi8(_mm256_sub_epi8(_mm256_xor_si256(v, m), m),
                                                      _mm256_set1_epi8(PYL_IQ_OFF)));
#else
    for (int l = 0; l < 4; l++) pyl_iq_signed8(g[l], s[l], u + 8 * l);
#endif
}
static inline void pyl_iq_scales32(int s, int ib, int16_t *s16) { s16[2 * ib] = s16[2 * ib + 1] = (int16_t)s; }
static inline void pyl_dec_iq(int t, const uint8_t *__restrict x, uint8_t *__restrict u,
                              int16_t *__restrict s16, int16_t *__restrict mn, float *d, float *dm) {
    *dm = 0.0f;
    switch (t) {
    case PYL_IQ2_XXS: {
        *d = pyl_rd_f16(x) * 0.125f;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t a[2];
            memcpy(a, x + 2 + 8 * ib, 8);
            pyl_iq_scales32(2 * (int)(a[1] >> 28) + 1, ib, s16);
            uint64_t g[4];
            uint8_t sg[4];
            for (int l = 0; l < 4; l++) {
                g[l] = pyl_iq2xxs_grid[(a[0] >> (8 * l)) & 0xFF];
                sg[l] = pyl_ksigns_iq2xs[(a[1] >> (7 * l)) & 127];
            }
            pyl_iq_signed4(g, sg, u + 32 * ib);
        }
        break;
    }
    case PYL_IQ2_XS: {
        *d = pyl_rd_f16(x) * 0.125f;
        const uint8_t *sc = x + 66;
        for (int ib = 0; ib < 8; ib++) {
            s16[2 * ib] = (int16_t)(2 * (sc[ib] & 0xF) + 1);
            s16[2 * ib + 1] = (int16_t)(2 * (sc[ib] >> 4) + 1);
            uint64_t g[4];
            uint8_t sg[4];
            for (int l = 0; l < 4; l++) {
                uint16_t q;
                memcpy(&q, x + 2 + 8 * ib + 2 * l, 2);
                g[l] = pyl_iq2xs_grid[q & 511];
                sg[l] = pyl_ksigns_iq2xs[q >> 9];
            }
            pyl_iq_signed4(g, sg, u + 32 * ib);
        }
        break;
    }
    case PYL_IQ2_S: {
        *d = pyl_rd_f16(x) * 0.125f;
        const uint8_t *qs = x + 2, *signs = x + 34, *qh = x + 66, *sc = x + 74;
        for (int ib = 0; ib < 8; ib++) {
            s16[2 * ib] = (int16_t)(2 * (sc[ib] & 0xF) + 1);
            s16[2 * ib + 1] = (int16_t)(2 * (sc[ib] >> 4) + 1);
            uint64_t g[4];
            for (int l = 0; l < 4; l++) g[l] = pyl_iq2s_grid[qs[4 * ib + l] | ((qh[ib] << (8 - 2 * l)) & 0x300)];
            pyl_iq_signed4(g, signs + 4 * ib, u + 32 * ib);
        }
        break;
    }
    case PYL_IQ3_XXS: {
        *d = pyl_rd_f16(x) * 0.25f;
        const uint8_t *qs = x + 2, *ss = x + 66;
        for (int ib = 0; ib < 8; ib++) {
            uint32_t a;
            memcpy(&a, ss + 4 * ib, 4);
            pyl_iq_scales32(2 * (int)(a >> 28) + 1, ib, s16);
            uint64_t g[4];
            uint8_t sg[4];
            for (int l = 0; l < 4; l++) {
                g[l] = (uint64_t)pyl_iq3xxs_grid[qs[8 * ib + 2 * l + 1]] << 32 | pyl_iq3xxs_grid[qs[8 * ib + 2 * l]];
                sg[l] = pyl_ksigns_iq2xs[(a >> (7 * l)) & 127];
            }
            pyl_iq_signed4(g, sg, u + 32 * ib);
        }
        break;
    }
    case PYL_IQ3_S: {
        *d = pyl_rd_f16(x);
        const uint8_t *qs = x + 2, *qh = x + 66, *signs = x + 74, *sc = x + 106;
        for (int ib = 0; ib < 8; ib++) {
            pyl_iq_scales32(1 + 2 * ((sc[ib / 2] >> (4 * (ib % 2))) & 0xF), ib, s16);
            uint64_t g[4];
            for (int l = 0; l < 4; l++) {
                const int i0 = qs[8 * ib + 2 * l] | ((qh[ib] << (8 - 2 * l)) & 256);
                const int i1 = qs[8 * ib + 2 * l + 1] | ((qh[ib] << (7 - 2 * l)) & 256);
                g[l] = (uint64_t)pyl_iq3s_grid[i1] << 32 | pyl_iq3s_grid[i0];
            }
            pyl_iq_signed4(g, signs + 4 * ib, u + 32 * ib);
        }
        break;
    }
    case PYL_IQ1_S: case PYL_IQ1_M: {
        const uint8_t *qs = t == PYL_IQ1_S ? x + 2 : x;
        uint16_t sc[4];
        if (t == PYL_IQ1_S) *d = pyl_rd_f16(x) * 0.125f;
        else {
            memcpy(sc, x + 48, 8);
            const uint16_t h = (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000));
            *d = pyl_f16_to_f32(h) * 0.125f;
        }
        for (int ib = 0; ib < 8; ib++) {
            int idx[4], delta[4];
            if (t == PYL_IQ1_S) {
                uint16_t h;
                memcpy(&h, x + 34 + 2 * ib, 2);
                pyl_iq_scales32(2 * ((h >> 12) & 7) + 1, ib, s16);
                for (int l = 0; l < 4; l++) {
                    idx[l] = qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8);
                    delta[l] = h & 0x8000 ? -1 : 1;
                }
            } else {
                const uint8_t *qh = x + 32 + 2 * ib;
                const int w = sc[ib / 2], sh = 6 * (ib % 2);
                s16[2 * ib] = (int16_t)(2 * ((w >> sh) & 7) + 1);
                s16[2 * ib + 1] = (int16_t)(2 * ((w >> (sh + 3)) & 7) + 1);
                idx[0] = qs[4 * ib + 0] | ((qh[0] << 8) & 0x700);
                idx[1] = qs[4 * ib + 1] | ((qh[0] << 4) & 0x700);
                idx[2] = qs[4 * ib + 2] | ((qh[1] << 8) & 0x700);
                idx[3] = qs[4 * ib + 3] | ((qh[1] << 4) & 0x700);
                delta[0] = qh[0] & 0x08 ? -1 : 1; delta[1] = qh[0] & 0x80 ? -1 : 1;
                delta[2] = qh[1] & 0x08 ? -1 : 1; delta[3] = qh[1] & 0x80 ? -1 : 1;
            }
            for (int l = 0; l < 4; l++) {
                const uint64_t g = pyl_iq1s_grid[idx[l]];
                for (int j = 0; j < 8; j++)
                    u[32 * ib + 8 * l + j] = (uint8_t)(PYL_IQ_OFF + 8 * (int8_t)((g >> (8 * j)) & 0xFF) + delta[l]);
            }
        }
        break;
    }
    case PYL_TQ1_0: case PYL_TQ2_0: { /* ternary: u = trit in {0, 1, 2}, value u - 1, scale 1 */
        static const uint8_t pow3[6] = {1, 3, 9, 27, 81, 243};
        if (t == PYL_TQ2_0) {
            *d = pyl_rd_f16(x + 64);
            for (int j = 0; j < 2; j++)
                for (int l = 0; l < 4; l++)
                    for (int m = 0; m < 32; m++) u[128 * j + 32 * l + m] = (x[32 * j + m] >> (2 * l)) & 3;
        } else {
            *d = pyl_rd_f16(x + 52);
            int o = 0;
            for (int n = 0; n < 5; n++)
                for (int m = 0; m < 32; m++) u[o++] = (uint8_t)(((uint16_t)(uint8_t)(x[m] * pow3[n]) * 3) >> 8);
            for (int n = 0; n < 5; n++)
                for (int m = 0; m < 16; m++) u[o++] = (uint8_t)(((uint16_t)(uint8_t)(x[32 + m] * pow3[n]) * 3) >> 8);
            for (int n = 0; n < 4; n++)
                for (int j = 0; j < 4; j++) u[o++] = (uint8_t)(((uint16_t)(uint8_t)(x[48 + j] * pow3[n]) * 3) >> 8);
        }
        for (int j = 0; j < 16; j++) { s16[j] = 1; mn[j] = 1; }
        return;
    }
    default: { /* IQ4_XS */
        *d = pyl_rd_f16(x);
        uint16_t sh;
        memcpy(&sh, x + 2, 2);
        const uint8_t *sl = x + 4, *qs = x + 8;
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
            pyl_iq_scales32(ls - 32, ib, s16);
#if PYL_AVX2
            _mm256_storeu_si256((__m256i *)(u + 32 * ib), _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(
                _mm_loadu_si128((const __m128i *)pyl_kvalues_iq4nl)), pyl_nib32(qs + 16 * ib)));
#else
            for (int j = 0; j < 16; j++) {
                u[32 * ib + j] = (uint8_t)pyl_kvalues_iq4nl[qs[16 * ib + j] & 0xF];
                u[32 * ib + 16 + j] = (uint8_t)pyl_kvalues_iq4nl[qs[16 * ib + j] >> 4];
            }
#endif
        }
        for (int j = 0; j < 16; j++) mn[j] = 0;
        return;
    }
    }
    for (int j = 0; j < 16; j++) mn[j] = (int16_t)(PYL_IQ_OFF * s16[j]);
}

#if PYL_AVX2
/* AVX2 bodies of the hot K decoders (same values as the scalar ones) */
static inline void pyl_dec_q4_K_avx2(const uint8_t *x, uint8_t *u) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    for (int i = 0; i < 4; i++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x + 16 + 32 * i));
        _mm256_storeu_si256((__m256i *)(u + 64 * i), _mm256_and_si256(q, m4));
        _mm256_storeu_si256((__m256i *)(u + 64 * i + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
    }
}
static inline void pyl_dec_q5_K_avx2(const uint8_t *x, uint8_t *u) {
    const __m256i m4 = _mm256_set1_epi8(0xF), one = _mm256_set1_epi8(1);
    const __m256i qh = _mm256_loadu_si256((const __m256i *)(x + 16));
    for (int i = 0; i < 4; i++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x + 48 + 32 * i));
        const __m256i h0 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), one), 4);
        const __m256i h1 = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i + 1), one), 4);
        _mm256_storeu_si256((__m256i *)(u + 64 * i), _mm256_or_si256(_mm256_and_si256(q, m4), h0));
        _mm256_storeu_si256((__m256i *)(u + 64 * i + 32),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), h1));
    }
}
static inline void pyl_dec_q6_K_avx2(const uint8_t *x, uint8_t *u) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i q0 = _mm256_loadu_si256((const __m256i *)(x + 64 * h));
        const __m256i q1 = _mm256_loadu_si256((const __m256i *)(x + 64 * h + 32));
        const __m256i hh = _mm256_loadu_si256((const __m256i *)(x + 128 + 32 * h));
        uint8_t *o = u + 128 * h;
        _mm256_storeu_si256((__m256i *)o, _mm256_or_si256(_mm256_and_si256(q0, m4),
                            _mm256_slli_epi16(_mm256_and_si256(hh, m3), 4)));
        _mm256_storeu_si256((__m256i *)(o + 32), _mm256_or_si256(_mm256_and_si256(q1, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 2), m3), 4)));
        _mm256_storeu_si256((__m256i *)(o + 64), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 4), m3), 4)));
        _mm256_storeu_si256((__m256i *)(o + 96), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 6), m3), 4)));
    }
}
#endif

/* one K super-block -> u[256] (values + offset), s16[16] scale and mn[16] min (or offset*scale)
 * per 16 elements, d, dmin.  Shared by the scratch path and the direct mat-vec path. */
static inline void pyl_decK_sb(int t, const uint8_t *x, uint8_t *u, int16_t *s16, int16_t *mn,
                               float *d, float *dm) {
    int s[16], m[16];
    t &= 255;
    if (pyl_is_iq(t)) { pyl_dec_iq(t, x, u, s16, mn, d, dm); return; }
    switch (t) {
    case PYL_Q2_K: pyl_dec_q2_K(x, u, s, m, d, dm); break;
    case PYL_Q3_K: pyl_dec_q3_K(x, u, s, m, d, dm); break;
#if PYL_AVX2
    case PYL_Q4_K: case PYL_Q5_K: {
        *d = pyl_rd_f16(x); *dm = pyl_rd_f16(x + 2);
        uint8_t sm[16];
        pyl_scale_min_k4_all(x + 4, sm);
        const __m256i sc2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)sm),
                                                                   _mm_loadl_epi64((const __m128i *)sm)));
        const __m256i mn2 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_loadl_epi64((const __m128i *)(sm + 8)),
                                                                   _mm_loadl_epi64((const __m128i *)(sm + 8))));
        _mm256_storeu_si256((__m256i *)s16, sc2);
        _mm256_storeu_si256((__m256i *)mn, mn2);
        if (t == PYL_Q4_K) pyl_dec_q4_K_avx2(x, u); else pyl_dec_q5_K_avx2(x, u);
        return;
    }
    default: {
        *d = pyl_rd_f16(x + 208); *dm = 0.0f;
        const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(x + 192)));
        _mm256_storeu_si256((__m256i *)s16, sc);
        _mm256_storeu_si256((__m256i *)mn, _mm256_slli_epi16(sc, 5));
        pyl_dec_q6_K_avx2(x, u);
        return;
    }
#else
    case PYL_Q4_K: pyl_dec_q4_K(x, u, s, m, d, dm); break;
    case PYL_Q5_K: pyl_dec_q5_K(x, u, s, m, d, dm); break;
    default: pyl_dec_q6_K(x, u, s, m, d, dm); break;
#endif
    }
    for (int j = 0; j < 16; j++) { s16[j] = (int16_t)s[j]; mn[j] = (int16_t)m[j]; }
}

static inline void pyl_decode_K(int t, const uint8_t *src, int k, pyl_wrow *W) {
    const int bb = pyl_block_bytes(t);
    for (int b = 0; b < k / 256; b++) {
        int16_t s16[16];
        pyl_decK_sb(t, src + (int64_t)bb * b, (uint8_t *)W->w + 256 * b, s16, W->mn + 16 * b,
                    W->d + b, W->dm + b);
        int16_t *__restrict sc = W->sc + 128 * b;
        for (int c = 0; c < 8; c++)
            for (int i = 0; i < 16; i++) sc[16 * c + i] = s16[2 * c + (i >> 3)];
    }
}

static inline void pyl_decode_F(int t, const uint8_t *src, int k, pyl_wrow *W) {
    if (t == PYL_F32) { memcpy(W->f, src, 4 * (size_t)k); return; }
    const uint16_t *h = (const uint16_t *)src;
    if (t == PYL_F16) { for (int i = 0; i < k; i++) W->f[i] = pyl_f16_to_f32(h[i]); return; }
    for (int i = 0; i < k; i++) W->f[i] = pyl_bitsf((uint32_t)h[i] << 16);
}

static inline void pyl_decode(int t, const uint8_t *src, int k, pyl_wrow *W) {
    switch (pyl_family(t)) {
    case 0: pyl_decode_A(t, src, k, W); break;
    case 1: pyl_decode_K(t, src, k, W); break;
    default: pyl_decode_F(t, src, k, W); break;
    }
}

/* ---------------------------------------------------------------- dequantize (get_rows) --- */
/* ggml's dequantize_row_* float expressions, without contraction into fma */
__attribute__((optimize("fp-contract=off")))
static void pyl_dequant_row(int t, const uint8_t *src, int k, uint8_t *scratch, float *y) {
    pyl_wrow W;
    pyl_wrow_init(&W, scratch, k);
    pyl_decode(t, src, k, &W);
    const int fam = pyl_family(t);
    if (fam == 2) { memcpy(y, W.f, 4 * (size_t)k); return; }
    if (fam == 0) {
        for (int i = 0; i < k; i++) {
            const float v = (float)W.w[i] * W.d[i / 32];
            y[i] = pyl_has_m(t) ? v + W.m[i / 32] : v;
        }
        return;
    }
    const int off = t == PYL_Q6_K ? 32 : t == PYL_Q3_K ? 4 : 0;
    const uint8_t *u = (const uint8_t *)W.w;
    for (int i = 0; i < k; i++) {
        const int b = i / 256, c = i / 32, s = (i % 32) / 16;
        const float dl = W.d[b] * (float)W.sc[16 * c + 8 * s];
        if (off) y[i] = dl * (float)(u[i] - off);
        else y[i] = dl * (float)u[i] - W.dm[b] * (float)W.mn[i / 16];
    }
}

/* ---------------------------------------------------------------- activations ------------ */
typedef struct {
    const int8_t *q; const float *d; const float *s; const int16_t *bs; const float *f;
    int64_t sq, sd, sbs, sf; /* row strides in elements */
} pyl_acts;

typedef struct { const int8_t *q; const float *d; const float *s; const int16_t *bs; const float *f; } pyl_arow;

static inline pyl_arow pyl_act_row(const pyl_acts *A, int64_t t) {
    pyl_arow a;
    a.q = A->q ? A->q + t * A->sq : 0;
    a.d = A->d ? A->d + t * A->sd : 0;
    a.s = A->s ? A->s + t * A->sd : 0;
    a.bs = A->bs ? A->bs + t * A->sbs : 0;
    a.f = A->f ? A->f + t * A->sf : 0;
    return a;
}

/* ---------------------------------------------------------------- tile kernels ----------- */
#if PYL_AVX2
static inline float pyl_hsum8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

/* 8 int32 lanes of 4 consecutive products |w| * sign(y, w) each (exact: no int16 pair can
 * saturate, |w| <= 128, |y| <= 127): one VNNI dpbusd where the CPU has it, else madd(maddubs, 1).
 * The same integers either way, so the results do not depend on which. */
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define PYL_DOT4(aw, sy, ones) ((void)(ones), _mm256_dpbusd_epi32(_mm256_setzero_si256(), (aw), (sy)))
#else
#define PYL_DOT4(aw, sy, ones) _mm256_madd_epi16(_mm256_maddubs_epi16((aw), (sy)), (ones))
#endif

/* family A: per 32-block, lanes = PYL_DOT4(|w|, sign(y, w)) */
static inline __attribute__((always_inline)) void
pyl_tileA(const int NR, const int NT, const int HAS_M, int nb, const pyl_wrow *W,
          const pyl_arow *A, float *out, int64_t os) {
    __m256 acc[PYL_R][PYL_T];
    float accm[PYL_R][PYL_T];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++) { acc[r][t] = _mm256_setzero_ps(); accm[r][t] = 0.0f; }
    for (int b = 0; b < nb; b++) {
        for (int r = 0; r < NR; r++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(W[r].w + 32 * b));
            const __m256i aw = _mm256_loadu_si256((const __m256i *)(W[r].aw + 32 * b));
            const __m256 dw = _mm256_broadcast_ss(W[r].d + b);
            for (int t = 0; t < NT; t++) {
                const __m256i y = _mm256_loadu_si256((const __m256i *)(A[t].q + 32 * b));
                const __m256i p = PYL_DOT4(aw, _mm256_sign_epi8(y, w), ones);
                const __m256 dd = _mm256_mul_ps(dw, _mm256_broadcast_ss(A[t].d + b));
                acc[r][t] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[r][t]);
                if (HAS_M) accm[r][t] = fmaf(W[r].m[b], A[t].s[b], accm[r][t]);
            }
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++) out[t * os + r] = pyl_hsum8(acc[r][t]) + accm[r][t];
}

/* the full 4-row x 2-token family-A tile with named accumulators (kept in registers); the
 * same per-element operations as pyl_tileA */
#define PYL_A_ROW(r)                                                                              \
    {                                                                                             \
        const __m256i w = _mm256_loadu_si256((const __m256i *)(w##r + 32 * b));                 \
        const __m256i aw = _mm256_loadu_si256((const __m256i *)(aw##r + 32 * b));               \
        const __m256 dw = _mm256_broadcast_ss(d##r + b);                                         \
        __m256i p = PYL_DOT4(aw, _mm256_sign_epi8(                                                \
            _mm256_loadu_si256((const __m256i *)(y0 + 32 * b)), w), ones);                        \
        acc##r##0 = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(dy0 + b)),             \
                                    _mm256_cvtepi32_ps(p), acc##r##0);                           \
        p = PYL_DOT4(aw, _mm256_sign_epi8(                                                        \
            _mm256_loadu_si256((const __m256i *)(y1 + 32 * b)), w), ones);                        \
        acc##r##1 = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_broadcast_ss(dy1 + b)),             \
                                    _mm256_cvtepi32_ps(p), acc##r##1);                           \
    }
__attribute__((noinline)) static void pyl_tileA_4x2(int nb, const pyl_wrow *W, const pyl_arow *A, float *out, int64_t os) {
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *w0 = W[0].w, *w1 = W[1].w, *w2 = W[2].w, *w3 = W[3].w;
    const uint8_t *aw0 = W[0].aw, *aw1 = W[1].aw, *aw2 = W[2].aw, *aw3 = W[3].aw;
    const float *d0 = W[0].d, *d1 = W[1].d, *d2 = W[2].d, *d3 = W[3].d;
    const int8_t *y0 = A[0].q, *y1 = A[1].q;
    const float *dy0 = A[0].d, *dy1 = A[1].d;
    __m256 acc00 = _mm256_setzero_ps(), acc01 = acc00, acc10 = acc00, acc11 = acc00;
    __m256 acc20 = acc00, acc21 = acc00, acc30 = acc00, acc31 = acc00;
    for (int b = 0; b < nb; b++) {
        PYL_A_ROW(0) PYL_A_ROW(1) PYL_A_ROW(2) PYL_A_ROW(3)
    }
    out[0] = pyl_hsum8(acc00); out[1] = pyl_hsum8(acc10); out[2] = pyl_hsum8(acc20); out[3] = pyl_hsum8(acc30);
    out[os + 0] = pyl_hsum8(acc01); out[os + 1] = pyl_hsum8(acc11);
    out[os + 2] = pyl_hsum8(acc21); out[os + 3] = pyl_hsum8(acc31);
}
#undef PYL_A_ROW

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VNNI__)
#define PYL_AVX512 1
/* the 4-row x 4-token family-A tile on 512-bit registers, tokens in pairs (lanes 0-7: token 2j,
 * lanes 8-15: token 2j+1), each 8-lane half exactly pyl_tileA_4x2's operations: the integer lanes
 * are the same exact sums, computed as dpbusd(-128 * sum4(y), w ^ 0x80, y) (= sum4(w * y) for
 * every int8 w), then dd = d_w * d_y and acc = fma(dd, (float)lanes, acc) per block in order. */
__attribute__((noinline)) static void pyl_tileA_4x4_512(int nb, const pyl_wrow *W, const pyl_arow *A,
                                                       float *out, int64_t os) {
    const __m512i x80 = _mm512_set1_epi8((char)0x80), z = _mm512_setzero_si512();
    __m512 acc[4][2];
    for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int b = 0; b < nb; b++) {
        __m512i y[2], corr[2];
        __m512 dy[2];
        for (int j = 0; j < 2; j++) {
            y[j] = _mm512_inserti64x4(
                _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(A[2 * j].q + 32 * b))),
                _mm256_loadu_si256((const __m256i *)(A[2 * j + 1].q + 32 * b)), 1);
            corr[j] = _mm512_sub_epi32(z, _mm512_dpbusd_epi32(z, x80, y[j]));
            dy[j] = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_broadcast_ss(A[2 * j].d + b)),
                                       _mm256_broadcast_ss(A[2 * j + 1].d + b), 1);
        }
        for (int r = 0; r < 4; r++) {
            const __m512i u = _mm512_xor_si512(
                _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(W[r].w + 32 * b))), x80);
            const __m512 dw = _mm512_set1_ps(W[r].d[b]);
            for (int j = 0; j < 2; j++) {
                const __m512i p = _mm512_dpbusd_epi32(corr[j], u, y[j]);
                acc[r][j] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dy[j]), _mm512_cvtepi32_ps(p), acc[r][j]);
            }
        }
    }
    for (int r = 0; r < 4; r++)
        for (int j = 0; j < 2; j++) {
            out[(2 * j) * os + r] = pyl_hsum8(_mm512_castps512_ps256(acc[r][j]));
            out[(2 * j + 1) * os + r] = pyl_hsum8(_mm512_extractf32x8_ps(acc[r][j], 1));
        }
}
#else
#define PYL_AVX512 0
#endif

/* [sum a, sum b, sum c, sum d] of four int32x8 vectors */
static inline __m128i pyl_hsum4_i32(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_extracti128_si256(h, 1), _mm256_castsi256_si128(h));
}

/* family K, one 256-superblock of one weight row times NT (<= 4) tokens, llama.cpp's prefill
 * arithmetic with exact integer sums; the float chains run in the lanes of acc/accm (lane =
 * token), each lane the scalar sequence:
 * - min types (Q4_K gemm, ggml_gemm_q4_K_8x8_q8_K): per 64-element sub-block pair p in order
 *   acc = fma((float)I_p, d*dy, acc), accm = fma((float)M_p, dmin*dy, accm) (M = mins x bsums);
 * - offset types (Q6_K/Q3_K, ggml tiled): S = sum sc*(q-off)*y, acc = fma(d*(float)S, dy, acc).
 * u: 256 values, sc: per 32-chunk 16 int16 scales, mn: 16 per-16 mins / offset*scale;
 * dyv: the tokens' q8_K scales (lanes >= NT zero). */
static inline __attribute__((always_inline)) void
pyl_k_sb(const int NT, const int MODE, const int SC16, const uint8_t *u, const int16_t *sc, const int16_t *mn,
         const int8_t *const *yq, const int16_t *const *bs, __m128 dyv, float dw, float dmw,
         __m128 *acc, __m128 *accm) {
    const int HAS_MIN = MODE == 1, SGN = MODE == 2, TMIN = MODE == 3;
    __m256i sumi[4], pr[4][4];
    const __m256i z = _mm256_setzero_si256();
    for (int t = 0; t < 4; t++) { sumi[t] = z; for (int p = 0; p < 4; p++) pr[t][p] = z; }
#if PYL_AVX512
    if (NT == 4 && !SGN) { /* token pairs per 512-bit register: the same integer operations per half */
        __m512i s2[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()}, p2[2][4];
#pragma GCC unroll 8
        for (int c = 0; c < 8; c++) {
            const __m512i uc = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(u + 32 * c)));
            const __m512i scc = _mm512_broadcast_i64x4(
                SC16 ? _mm256_set_m128i(_mm_set1_epi16(sc[2 * c + 1]), _mm_set1_epi16(sc[2 * c]))
                     : _mm256_loadu_si256((const __m256i *)(sc + 16 * c)));
            for (int j = 0; j < 2; j++) {
                const __m512i y = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(yq[2 * j] + 32 * c))),
                    _mm256_loadu_si256((const __m256i *)(yq[2 * j + 1] + 32 * c)), 1);
                const __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(uc, y), scc);
                s2[j] = (c == 0 || (HAS_MIN && (c & 1) == 0)) ? p : _mm512_add_epi32(s2[j], p);
                __asm__("" : "+v"(s2[j]));
                if (HAS_MIN && (c & 1)) p2[j][c >> 1] = s2[j];
            }
        }
        for (int j = 0; j < 2; j++) {
            sumi[2 * j] = _mm512_castsi512_si256(s2[j]);
            sumi[2 * j + 1] = _mm512_extracti64x4_epi64(s2[j], 1);
            if (HAS_MIN)
                for (int q = 0; q < 4; q++) {
                    pr[2 * j][q] = _mm512_castsi512_si256(p2[j][q]);
                    pr[2 * j + 1][q] = _mm512_extracti64x4_epi64(p2[j][q], 1);
                }
        }
    } else
#endif
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const __m256i wc = _mm256_loadu_si256((const __m256i *)(u + 32 * c));
        const __m256i uc = SGN ? _mm256_sign_epi8(wc, wc) : wc;   /* |w| (sign trick) */
        const __m256i scc = SC16 ? _mm256_set_m128i(_mm_set1_epi16(sc[2 * c + 1]), _mm_set1_epi16(sc[2 * c]))
                                 : _mm256_loadu_si256((const __m256i *)(sc + 16 * c));
        for (int t = 0; t < NT; t++) {
            const __m256i yc = _mm256_loadu_si256((const __m256i *)(yq[t] + 32 * c));
            const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(uc, SGN ? _mm256_sign_epi8(yc, wc) : yc), scc);
            sumi[t] = (c == 0 || (HAS_MIN && (c & 1) == 0)) ? p : _mm256_add_epi32(sumi[t], p);
            __asm__("" : "+x"(sumi[t]));   /* keep gcc from re-associating into a spilling tree */
            if (HAS_MIN && (c & 1)) pr[t][c >> 1] = sumi[t];
        }
    }
    const __m256i mnv = _mm256_loadu_si256((const __m256i *)mn);
    __m256i ms[4];
    for (int t = 0; t < 4; t++)
        ms[t] = t < NT ? _mm256_madd_epi16(mnv, _mm256_loadu_si256((const __m256i *)bs[t])) : z;
    if (NT == 1) { /* lane 0 only: the same operations without the transposes */
        const __m256i hm = _mm256_hadd_epi32(ms[0], ms[0]);
        const __m128i Mi = _mm_unpacklo_epi64(_mm256_castsi256_si128(hm), _mm256_extracti128_si256(hm, 1));
        if (TMIN) {
            const __m128i Ms = _mm_add_epi32(Mi, _mm_shuffle_epi32(Mi, 0x4E));
            const __m128 S1 = _mm_cvtepi32_ps(pyl_hsum4_i32(sumi[0], z, z, z));
            const __m128 S2 = _mm_cvtepi32_ps(_mm_add_epi32(Ms, _mm_shuffle_epi32(Ms, 0xB1)));
            const __m128 res = _mm_fnmadd_ss(_mm_set_ss(dmw), S2, _mm_mul_ss(_mm_set_ss(dw), S1));
            *acc = _mm_fmadd_ss(res, dyv, *acc);
            return;
        }
        if (!HAS_MIN) {
            const __m128i S = pyl_hsum4_i32(sumi[0], z, z, z);
            const __m128i Ms = _mm_add_epi32(Mi, _mm_shuffle_epi32(Mi, 0x4E));
            const __m128i St = _mm_sub_epi32(S, _mm_add_epi32(Ms, _mm_shuffle_epi32(Ms, 0xB1)));
            *acc = _mm_fmadd_ss(_mm_mul_ss(_mm_set_ss(dw), _mm_cvtepi32_ps(St)), dyv, *acc);
            return;
        }
        const __m128 I = _mm_cvtepi32_ps(pyl_hsum4_i32(pr[0][0], pr[0][1], pr[0][2], pr[0][3]));
        const __m128 M = _mm_cvtepi32_ps(Mi);
        const __m128 dd = _mm_mul_ss(_mm_set_ss(dw), dyv), dm = _mm_mul_ss(_mm_set_ss(dmw), dyv);
        *acc = _mm_fmadd_ss(I, dd, *acc);
        *accm = _mm_fmadd_ss(M, dm, *accm);
        *acc = _mm_fmadd_ss(_mm_shuffle_ps(I, I, 1), dd, *acc);
        *accm = _mm_fmadd_ss(_mm_shuffle_ps(M, M, 1), dm, *accm);
        *acc = _mm_fmadd_ss(_mm_shuffle_ps(I, I, 2), dd, *acc);
        *accm = _mm_fmadd_ss(_mm_shuffle_ps(M, M, 2), dm, *accm);
        *acc = _mm_fmadd_ss(_mm_shuffle_ps(I, I, 3), dd, *acc);
        *accm = _mm_fmadd_ss(_mm_shuffle_ps(M, M, 3), dm, *accm);
        return;
    }
    if (TMIN) {
        const __m128 S1 = _mm_cvtepi32_ps(pyl_hsum4_i32(sumi[0], sumi[1], sumi[2], sumi[3]));
        const __m128 S2 = _mm_cvtepi32_ps(pyl_hsum4_i32(ms[0], ms[1], ms[2], ms[3]));
        const __m128 res = _mm_fnmadd_ps(_mm_set1_ps(dmw), S2, _mm_mul_ps(_mm_set1_ps(dw), S1));
        *acc = _mm_fmadd_ps(res, dyv, *acc);
        return;
    }
    if (!HAS_MIN) {
        const __m128i S = pyl_hsum4_i32(_mm256_sub_epi32(sumi[0], ms[0]), _mm256_sub_epi32(sumi[1], ms[1]),
                                        _mm256_sub_epi32(sumi[2], ms[2]), _mm256_sub_epi32(sumi[3], ms[3]));
        *acc = _mm_fmadd_ps(_mm_mul_ps(_mm_set1_ps(dw), _mm_cvtepi32_ps(S)), dyv, *acc);
        return;
    }
    /* I[p], M[p]: pair p of tokens 0..3 (exact integer sums, reduced straight into that layout) */
    __m128 I[4], M[4];
    for (int p = 0; p < 4; p++)
        I[p] = _mm_cvtepi32_ps(pyl_hsum4_i32(pr[0][p], pr[1][p], pr[2][p], pr[3][p]));
    {   /* ms[t] lanes 2p, 2p+1 hold pair p of token t */
        const __m256i A = _mm256_hadd_epi32(ms[0], ms[1]);  /* t0p0 t0p1 t1p0 t1p1 | t0p2 t0p3 t1p2 t1p3 */
        const __m256i B = _mm256_hadd_epi32(ms[2], ms[3]);  /* t2p0 t2p1 t3p0 t3p1 | t2p2 t2p3 t3p2 t3p3 */
        const __m256i C = _mm256_unpacklo_epi64(A, B), D = _mm256_unpackhi_epi64(A, B);
        const __m256i E = _mm256_unpacklo_epi32(C, D), F = _mm256_unpackhi_epi32(C, D);
        const __m256 G = _mm256_cvtepi32_ps(_mm256_unpacklo_epi64(E, F));   /* p0 | p2 */
        const __m256 H = _mm256_cvtepi32_ps(_mm256_unpackhi_epi64(E, F));   /* p1 | p3 */
        M[0] = _mm256_castps256_ps128(G);
        M[1] = _mm256_castps256_ps128(H);
        M[2] = _mm256_extractf128_ps(G, 1);
        M[3] = _mm256_extractf128_ps(H, 1);
    }
    const __m128 dd = _mm_mul_ps(_mm_set1_ps(dw), dyv), dm = _mm_mul_ps(_mm_set1_ps(dmw), dyv);
    for (int p = 0; p < 4; p++) {
        *acc = _mm_fmadd_ps(I[p], dd, *acc);
        *accm = _mm_fmadd_ps(M[p], dm, *accm);
    }
}

static inline __attribute__((always_inline)) void
pyl_tileK(const int NR, const int NT, const int HAS_MIN, int nsb, const pyl_wrow *W,
          const pyl_arow *A, float *out, int64_t os) {
    __m128 acc[PYL_R], accm[PYL_R];
    for (int r = 0; r < NR; r++) acc[r] = accm[r] = _mm_setzero_ps();
    for (int b = 0; b < nsb; b++) {
        const int8_t *yq[PYL_T];
        const int16_t *bs[PYL_T];
        float dy[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int t = 0; t < NT; t++) { yq[t] = A[t].q + 256 * b; bs[t] = A[t].bs + 16 * b; dy[t] = A[t].d[b]; }
        const __m128 dyv = _mm_loadu_ps(dy);
#pragma GCC unroll 1
        for (int r = 0; r < NR; r++)
            pyl_k_sb(NT, HAS_MIN, 0, (const uint8_t *)W[r].w + 256 * b, W[r].sc + 128 * b, W[r].mn + 16 * b,
                     yq, bs, dyv, W[r].d[b], W[r].dm[b], &acc[r], &accm[r]);
    }
    for (int r = 0; r < NR; r++) {
        float o[4];
        _mm_storeu_ps(o, HAS_MIN == 1 ? _mm_sub_ps(acc[r], accm[r]) : acc[r]);
        for (int t = 0; t < NT; t++) out[t * os + r] = o[t];
    }
}

/* family F: acc = fma(w, x, acc) per 8 elements, hsum, then the k % 8 tail in order */
static inline __attribute__((always_inline)) void
pyl_tileF(const int NR, const int NT, int k, const pyl_wrow *W, const pyl_arow *A, float *out,
          int64_t os) {
    __m256 acc[PYL_R][PYL_T];
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++) acc[r][t] = _mm256_setzero_ps();
    const int k8 = k & ~7;
    for (int i = 0; i < k8; i += 8) {
        __m256 x[PYL_T];
        for (int t = 0; t < NT; t++) x[t] = _mm256_loadu_ps(A[t].f + i);
        for (int r = 0; r < NR; r++) {
            const __m256 w = _mm256_loadu_ps(W[r].f + i);
            for (int t = 0; t < NT; t++) acc[r][t] = _mm256_fmadd_ps(w, x[t], acc[r][t]);
        }
    }
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++) {
            float s = pyl_hsum8(acc[r][t]);
            for (int i = k8; i < k; i++) s = fmaf(W[r].f[i], A[t].f[i], s);
            out[t * os + r] = s;
        }
}

#else /* portable scalar path: one accumulator per output, blocks in order */
static inline void pyl_tileA(const int NR, const int NT, const int HAS_M, int nb, const pyl_wrow *W,
                             const pyl_arow *A, float *out, int64_t os) {
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++) {
            float acc = 0.0f;
            for (int b = 0; b < nb; b++) {
                int sum = 0;
                for (int j = 0; j < 32; j++) sum += W[r].w[32 * b + j] * A[t].q[32 * b + j];
                acc += (W[r].d[b] * A[t].d[b]) * (float)sum;
                if (HAS_M) acc += W[r].m[b] * A[t].s[b];
            }
            out[t * os + r] = acc;
        }
}
static inline void pyl_tileK(const int NR, const int NT, const int HAS_MIN, int nsb, const pyl_wrow *W,
                             const pyl_arow *A, float *out, int64_t os) {
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++) {
            float acc = 0.0f, accm = 0.0f;
            for (int b = 0; b < nsb; b++) {
                const uint8_t *u = (const uint8_t *)W[r].w + 256 * b;
                const int8_t *y = A[t].q + 256 * b;
                const float dy = A[t].d[b];
                int S = 0, S1 = 0, S2 = 0;
                for (int p = 0; p < 4; p++) {
                    int I = 0, M = 0;
                    for (int j = 4 * p; j < 4 * p + 4; j++) {
                        int s = 0;
                        for (int i = 0; i < 16; i++)
                            s += (HAS_MIN == 2 ? (int)(int8_t)u[16 * j + i] : (int)u[16 * j + i]) * y[16 * j + i];
                        I += W[r].sc[128 * b + 16 * (j / 2) + 8 * (j % 2)] * s;
                        M += W[r].mn[16 * b + j] * A[t].bs[16 * b + j];
                    }
                    if (HAS_MIN == 1) {
                        acc = fmaf((float)I, W[r].d[b] * dy, acc);
                        accm = fmaf((float)M, W[r].dm[b] * dy, accm);
                    } else {
                        S += I - M;
                        S1 += I;
                        S2 += M;
                    }
                }
                if (HAS_MIN == 3)
                    acc = fmaf(fmaf(-W[r].dm[b], (float)S2, W[r].d[b] * (float)S1), dy, acc);
                else if (HAS_MIN != 1) acc = fmaf(W[r].d[b] * (float)S, dy, acc);
            }
            out[t * os + r] = acc - accm;
        }
}
static inline void pyl_tileF(const int NR, const int NT, int k, const pyl_wrow *W, const pyl_arow *A,
                             float *out, int64_t os) {
    for (int r = 0; r < NR; r++)
        for (int t = 0; t < NT; t++) {
            float acc = 0.0f;
            for (int i = 0; i < k; i++) acc += W[r].f[i] * A[t].f[i];
            out[t * os + r] = acc;
        }
}
#endif

#ifndef PYL_PREFETCH
#define PYL_PREFETCH 2048
#endif
#if PYL_AVX2
/* ---- direct mat-vec (few tokens): exactly the per-element operations of the tiles above,
 * with each weight block decoded in registers / a stack super-block instead of the row
 * scratch (no stores of whole decoded rows).  Tests check bit-identity with the tiles. */
/* one 32-block of one token: acc = fma(d_w * d_x, (float)lanes, acc) (the tile's operations) */
static inline __attribute__((always_inline)) __m256
pyl_blockA(const int t, const uint8_t *x, const int8_t *yq, const float *dy, __m256 acc) {
    const __m256i w = pyl_dec32_avx2(t, x);
    const __m256i y = _mm256_loadu_si256((const __m256i *)yq);
    const __m256i p = PYL_DOT4(_mm256_abs_epi8(w), _mm256_sign_epi8(y, w), _mm256_set1_epi16(1));
    const __m256 dd = _mm256_mul_ps(_mm256_broadcast_ss(pyl_scaleA_ref(t, x)), _mm256_broadcast_ss(dy));
    return _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc);
}

/* mat-vec of one row: blocks in order, two per iteration (pointer steps, one prefetch per
 * iteration); the min term of Q4_1/Q5_1 in its own scalar chain */
static inline __attribute__((always_inline)) float
pyl_dotA_direct(const int t, const uint8_t *row, int nb, const pyl_arow *a) {
    const int bb = pyl_block_bytes(t), HAS_M = pyl_has_m(t);
    __m256 acc = _mm256_setzero_ps();
    float accm = 0.0f;
    const uint8_t *x = row;
    const int8_t *yq = a->q;
    const float *dy = a->d;
    const uint8_t *end2 = row + (int64_t)bb * (nb & ~1);
    for (; x < end2; x += 2 * bb, yq += 64, dy += 2) {
        _mm_prefetch((const char *)x + PYL_PREFETCH, _MM_HINT_T0);
        acc = pyl_blockA(t, x, yq, dy, acc);
        acc = pyl_blockA(t, x + bb, yq + 32, dy + 1, acc);
    }
    if (nb & 1) acc = pyl_blockA(t, x, yq, dy, acc);
    if (HAS_M)
        for (int b = 0; b < nb; b++) accm = fmaf(*pyl_f16_ref(row + (int64_t)bb * b + 2), a->s[b], accm);
    return pyl_hsum8(acc) + accm;
}

/* mat-vec of 4 adjacent rows (family A): per row exactly pyl_dotA_direct's operations (blocks
 * in order, acc = fma(d_w * d_y, (float)lanes, acc), the same horizontal sum, the min term in
 * its own scalar chain); the 4 independent fma chains overlap and the token's block is loaded
 * once for the 4 rows */
static inline __attribute__((always_inline)) void
pyl_dotA_r4(const int t, const uint8_t *w, int64_t ws, int nb, const pyl_arow *a, float *o) {
    const int bb = pyl_block_bytes(t), HAS_M = pyl_has_m(t);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    const uint8_t *x0 = w, *x1 = w + ws, *x2 = w + 2 * ws, *x3 = w + 3 * ws;
    for (int b = 0; b < nb; b++) {
        const int64_t off = (int64_t)bb * b;
        if ((b & 1) == 0) {
            _mm_prefetch((const char *)x0 + off + PYL_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)x1 + off + PYL_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)x2 + off + PYL_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)x3 + off + PYL_PREFETCH, _MM_HINT_T0);
        }
        const __m256i y = _mm256_loadu_si256((const __m256i *)(a->q + 32 * b));
        const __m256 dy = _mm256_broadcast_ss(a->d + b);
#define PYL_R4_STEP(X, ACC) {                                                                   \
            const __m256i wv = pyl_dec32_avx2(t, X + off);                                        \
            const __m256i p = PYL_DOT4(_mm256_abs_epi8(wv), _mm256_sign_epi8(y, wv), ones);       \
            const __m256 dd = _mm256_mul_ps(_mm256_broadcast_ss(pyl_scaleA_ref(t, X + off)), dy); \
            ACC = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), ACC); }
        PYL_R4_STEP(x0, acc0) PYL_R4_STEP(x1, acc1) PYL_R4_STEP(x2, acc2) PYL_R4_STEP(x3, acc3)
#undef PYL_R4_STEP
    }
    float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (HAS_M)
        for (int r = 0; r < 4; r++)
            for (int b = 0; b < nb; b++)
                m[r] = fmaf(*pyl_f16_ref(w + r * ws + (int64_t)bb * b + 2), a->s[b], m[r]);
    o[0] = pyl_hsum8(acc0) + m[0];
    o[1] = pyl_hsum8(acc1) + m[1];
    o[2] = pyl_hsum8(acc2) + m[2];
    o[3] = pyl_hsum8(acc3) + m[3];
}

static inline __attribute__((always_inline)) float
pyl_dotK_direct1(const int t, const uint8_t *row, int nsb, const pyl_arow *a) {
    const int bb = pyl_block_bytes(t), HAS_MIN = pyl_has_min(t);
    __m128 acc = _mm_setzero_ps(), accm = _mm_setzero_ps();
    uint8_t u[256] __attribute__((aligned(32)));
    int16_t s16[16] __attribute__((aligned(32))), mn[16] __attribute__((aligned(32)));
    for (int b = 0; b < nsb; b++) {
        float dw, dmw;
        _mm_prefetch((const char *)row + (int64_t)bb * b + PYL_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)row + (int64_t)bb * b + PYL_PREFETCH + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)row + (int64_t)bb * b + PYL_PREFETCH + 128, _MM_HINT_T0);
        pyl_decK_sb(t, row + (int64_t)bb * b, u, s16, mn, &dw, &dmw);
        const int8_t *yq = a->q + 256 * b;
        const int16_t *bs = a->bs + 16 * b;
        pyl_k_sb(1, HAS_MIN, 1, u, s16, mn, &yq, &bs, _mm_set_ss(a->d[b]), dw, dmw, &acc, &accm);
    }
    return _mm_cvtss_f32(HAS_MIN == 1 ? _mm_sub_ps(acc, accm) : acc);
}

/* ---- one token, 4 weight rows at once (Q4_K, Q6_K): per row exactly pyl_dotK_direct1's
 * integers and float operations, with the integer sums taken straight from the packed blocks
 * (no decoded super-block in memory; scales broadcast by byte shuffles) and the float chains of
 * the 4 rows in the lanes of one register (lane-wise fma / mul: the same roundings). */

/* per 32-chunk c: the int16 scale of chunk c in every 16-bit lane (Q4_K, from 8 int16 scales) */
static const int8_t pyl_k4_scale_shuf[8][32] __attribute__((aligned(32))) = {
#define S2(c) 2 * c, 2 * c + 1
#define ROW(c) {S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c), S2(c)}
    ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7)
#undef ROW
#undef S2
};
/* per 32-chunk c: bytes 2c (x8), 2c+1 (x8) of the 16 Q6_K scales */
static const int8_t pyl_q6_scale_shuf[8][16] __attribute__((aligned(16))) = {
#define ROW(c) {2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, \
                2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1}
    ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7)
#undef ROW
};

/* 4 rows x 1 token of Q4_K (mode 1): per row the operations of pyl_dotK_direct1 (pair p of
 * super-block b: acc = fma((float)I_p, d*dy, acc), accm = fma((float)M_p, dmin*dy, accm); then
 * acc - accm), the float chains of the 4 rows in the lanes of one register */
static inline void pyl_q4K_r4(const uint8_t *w, int64_t rs, int nsb, const pyl_arow *a, float *o) {
    const __m256i m4 = _mm256_set1_epi8(0xF);
    __m128 acc = _mm_setzero_ps(), accm = _mm_setzero_ps();
    for (int b = 0; b < nsb; b++) {
        const int8_t *yq = a->q + 256 * b;
        const __m256i bsv = _mm256_loadu_si256((const __m256i *)(a->bs + 16 * b));
        const __m128i q8s = _mm_hadd_epi16(_mm256_castsi256_si128(bsv), _mm256_extracti128_si256(bsv, 1));
        __m256i P[4][4];
        __m128i M[4];
        float dw[4], dmw[4];
        for (int r = 0; r < 4; r++) {
            const uint8_t *x = w + r * rs + 144 * (int64_t)b;
            _mm_prefetch((const char *)x + PYL_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)x + PYL_PREFETCH + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)x + PYL_PREFETCH + 128, _MM_HINT_T0);
            dw[r] = pyl_rd_f16(x);
            dmw[r] = pyl_rd_f16(x + 2);
            uint8_t sm[16] __attribute__((aligned(16)));
            pyl_scale_min_k4_all(x + 4, sm);
            const __m128i smv = _mm_load_si128((const __m128i *)sm);
            const __m128i sc8 = _mm_cvtepu8_epi16(smv);                       /* 8 scales int16 */
            const __m256i scs = _mm256_broadcastsi128_si256(sc8);
            M[r] = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(smv, smv)), q8s);
            for (int p = 0; p < 4; p++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)(x + 16 + 32 * p));
                const __m256i lo = _mm256_and_si256(q, m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                const __m256i y0 = _mm256_loadu_si256((const __m256i *)(yq + 64 * p));
                const __m256i y1 = _mm256_loadu_si256((const __m256i *)(yq + 64 * p + 32));
                const __m256i s0 = _mm256_shuffle_epi8(scs, _mm256_load_si256((const __m256i *)pyl_k4_scale_shuf[2 * p]));
                const __m256i s1 = _mm256_shuffle_epi8(scs, _mm256_load_si256((const __m256i *)pyl_k4_scale_shuf[2 * p + 1]));
                P[r][p] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(lo, y0), s0),
                                           _mm256_madd_epi16(_mm256_maddubs_epi16(hi, y1), s1));
            }
        }
        const __m128 dy = _mm_set1_ps(a->d[b]);
        const __m128 dd = _mm_mul_ps(_mm_loadu_ps(dw), dy), dm = _mm_mul_ps(_mm_loadu_ps(dmw), dy);
        /* M[r] lanes p -> Mp lanes r */
        const __m128i t0 = _mm_unpacklo_epi32(M[0], M[1]), t1 = _mm_unpackhi_epi32(M[0], M[1]);
        const __m128i t2 = _mm_unpacklo_epi32(M[2], M[3]), t3 = _mm_unpackhi_epi32(M[2], M[3]);
        const __m128i Mp[4] = {_mm_unpacklo_epi64(t0, t2), _mm_unpackhi_epi64(t0, t2),
                               _mm_unpacklo_epi64(t1, t3), _mm_unpackhi_epi64(t1, t3)};
        for (int p = 0; p < 4; p++) {
            const __m128 I = _mm_cvtepi32_ps(pyl_hsum4_i32(P[0][p], P[1][p], P[2][p], P[3][p]));
            acc = _mm_fmadd_ps(I, dd, acc);
            accm = _mm_fmadd_ps(_mm_cvtepi32_ps(Mp[p]), dm, accm);
        }
    }
    _mm_storeu_ps(o, _mm_sub_ps(acc, accm));
}

/* 4 rows x 1 token of Q6_K (mode 0): per row S = sum sc*(q-32)*y (exact), acc = fma(d*(float)S,
 * dy, acc) per super-block, as pyl_dotK_direct1 */
static inline void pyl_q6K_r4(const uint8_t *w, int64_t rs, int nsb, const pyl_arow *a, float *o) {
    const __m256i m4 = _mm256_set1_epi8(0xF), m3 = _mm256_set1_epi8(3);
    __m128 acc = _mm_setzero_ps();
    for (int b = 0; b < nsb; b++) {
        const int8_t *yq = a->q + 256 * b;
        const __m256i bsv = _mm256_loadu_si256((const __m256i *)(a->bs + 16 * b));
        __m256i S[4];
        float dw[4];
        for (int r = 0; r < 4; r++) {
            const uint8_t *x = w + r * rs + 210 * (int64_t)b;
            _mm_prefetch((const char *)x + PYL_PREFETCH, _MM_HINT_T0);
            _mm_prefetch((const char *)x + PYL_PREFETCH + 64, _MM_HINT_T0);
            _mm_prefetch((const char *)x + PYL_PREFETCH + 128, _MM_HINT_T0);
            _mm_prefetch((const char *)x + PYL_PREFETCH + 192, _MM_HINT_T0);
            dw[r] = pyl_rd_f16(x + 208);
            const __m128i sc8 = _mm_loadu_si128((const __m128i *)(x + 192));
            const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
            __m256i sum = _mm256_sub_epi32(_mm256_setzero_si256(),
                                           _mm256_madd_epi16(_mm256_slli_epi16(sc16, 5), bsv));
            for (int h = 0; h < 2; h++) {
                const __m256i q0 = _mm256_loadu_si256((const __m256i *)(x + 64 * h));
                const __m256i q1 = _mm256_loadu_si256((const __m256i *)(x + 64 * h + 32));
                const __m256i hh = _mm256_loadu_si256((const __m256i *)(x + 128 + 32 * h));
                __m256i u[4];
                u[0] = _mm256_or_si256(_mm256_and_si256(q0, m4), _mm256_slli_epi16(_mm256_and_si256(hh, m3), 4));
                u[1] = _mm256_or_si256(_mm256_and_si256(q1, m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 2), m3), 4));
                u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 4), m3), 4));
                u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hh, 6), m3), 4));
                for (int j = 0; j < 4; j++) {
                    const int c = 4 * h + j;
                    const __m256i y = _mm256_loadu_si256((const __m256i *)(yq + 32 * c));
                    const __m256i s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_load_si128((const __m128i *)pyl_q6_scale_shuf[c])));
                    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(u[j], y), s));
                }
            }
            S[r] = sum;
        }
        const __m128 St = _mm_cvtepi32_ps(pyl_hsum4_i32(S[0], S[1], S[2], S[3]));
        acc = _mm_fmadd_ps(_mm_mul_ps(_mm_loadu_ps(dw), St), _mm_set1_ps(a->d[b]), acc);
    }
    _mm_storeu_ps(o, acc);
}

/* K-quant mat-vec of one row for NT (2..4) tokens: each super-block decoded once, then
 * pyl_dotK_direct1's operations per token */
static inline __attribute__((always_inline)) void
pyl_dotK_direct(const int t, const int NT, const uint8_t *row, int nsb, const pyl_arow *X, float *o,
                int64_t os) {
    const int bb = pyl_block_bytes(t), HAS_MIN = pyl_has_min(t);
    __m128 acc[4], accm[4];
    uint8_t u[256] __attribute__((aligned(32)));
    int16_t s16[16] __attribute__((aligned(32))), mn[16] __attribute__((aligned(32)));
    for (int i = 0; i < NT; i++) acc[i] = accm[i] = _mm_setzero_ps();
    for (int b = 0; b < nsb; b++) {
        float dw, dmw;
        _mm_prefetch((const char *)row + (int64_t)bb * b + PYL_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)row + (int64_t)bb * b + PYL_PREFETCH + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)row + (int64_t)bb * b + PYL_PREFETCH + 128, _MM_HINT_T0);
        pyl_decK_sb(t, row + (int64_t)bb * b, u, s16, mn, &dw, &dmw);
        for (int i = 0; i < NT; i++) {
            const int8_t *yq = X[i].q + 256 * b;
            const int16_t *bs = X[i].bs + 16 * b;
            pyl_k_sb(1, HAS_MIN, 1, u, s16, mn, &yq, &bs, _mm_set_ss(X[i].d[b]), dw, dmw, &acc[i], &accm[i]);
        }
    }
    for (int i = 0; i < NT; i++) o[i * os] = _mm_cvtss_f32(HAS_MIN == 1 ? _mm_sub_ps(acc[i], accm[i]) : acc[i]);
}

/* family A, one weight row times NT tokens (a register group): each weight block is decoded
 * once in registers and dotted against every token's block; per token the operations of
 * pyl_dotA_direct / pyl_tileA (same lanes, same fma chain, same horizontal sum). */
#ifndef PYL_DG
#define PYL_DG 8 /* tokens per register group, family A */
#endif
static inline __attribute__((always_inline)) void
pyl_dotA_group(const int t, const int NT, const uint8_t *row, int nb, const pyl_arow *X, float *o,
               int64_t os) {
    const int bb = pyl_block_bytes(t), HAS_M = pyl_has_m(t);
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[PYL_DG];
    float accm[PYL_DG];
    for (int i = 0; i < NT; i++) { acc[i] = _mm256_setzero_ps(); accm[i] = 0.0f; }
    for (int b = 0; b < nb; b++) {
        const uint8_t *x = row + (int64_t)bb * b;
        _mm_prefetch((const char *)x + PYL_PREFETCH, _MM_HINT_T0);
        const __m256i w = pyl_dec32_avx2(t, x), aw = _mm256_abs_epi8(w);
        const __m256 dw = _mm256_broadcast_ss(pyl_scaleA_ref(t, x));
        for (int i = 0; i < NT; i++) {
            const __m256i y = _mm256_loadu_si256((const __m256i *)(X[i].q + 32 * b));
            const __m256i p = PYL_DOT4(aw, _mm256_sign_epi8(y, w), ones);
            const __m256 dd = _mm256_mul_ps(dw, _mm256_broadcast_ss(X[i].d + b));
            acc[i] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[i]);
            if (HAS_M) accm[i] = fmaf(*pyl_f16_ref(x + 2), X[i].s[b], accm[i]);
        }
    }
    for (int i = 0; i < NT; i++) o[i * os] = pyl_hsum8(acc[i]) + accm[i];
}

/* one row at a time: a single sequential stream, which the hardware prefetcher follows best;
 * family A: tokens in register groups of PYL_DG (the row stays in L1 between groups) */
#define PYL_DG_CASE(T, C)                                                                        \
    case C: pyl_dotA_group(PYL_##T, C < PYL_DG ? C : PYL_DG, row, nb, X + i, o + i * os + r, os); break;
#define PYL_DIRECT_A(T)                                                                          \
    static void pyl_direct_##T(const uint8_t *w, int64_t ws, int nr, int nb, const pyl_arow *X, \
                               int nt, float *o, int64_t os) {                                   \
        const int ng = (nt + PYL_DG - 1) / PYL_DG; /* groups of balanced sizes <= PYL_DG */      \
        int r0 = 0;                                                                              \
        if (nt == 1 && PYL_##T != PYL_Q8_0) /* token generation, types that decode: 4 rows at   \
            once (4 independent chains); Q8_0 streams best one row at a time (measured) */       \
            for (; r0 + 4 <= nr; r0 += 4) pyl_dotA_r4(PYL_##T, w + r0 * ws, ws, nb, X, o + r0); \
        for (int r = r0; r < nr; r++) {                                                          \
            const uint8_t *row = w + r * ws;                                                     \
            if (nt == 1) { o[r] = pyl_dotA_direct(PYL_##T, row, nb, X); continue; }             \
            for (int g = 0, i = 0; g < ng; g++) {                                                \
                const int c = (nt - i + ng - g - 1) / (ng - g);                                  \
                switch (c) {                                                                     \
                PYL_DG_CASE(T, 1) PYL_DG_CASE(T, 2) PYL_DG_CASE(T, 3) PYL_DG_CASE(T, 4)         \
                PYL_DG_CASE(T, 5) PYL_DG_CASE(T, 6) PYL_DG_CASE(T, 7) default:                  \
                    pyl_dotA_group(PYL_##T, PYL_DG, row, nb, X + i, o + i * os + r, os);        \
                }                                                                                \
                i += c;                                                                          \
            }                                                                                    \
        }                                                                                        \
    }
#define PYL_DIRECT_K(T)                                                                          \
    static void pyl_direct_##T(const uint8_t *w, int64_t ws, int nr, int nb, const pyl_arow *X, \
                               int nt, float *o, int64_t os) {                                   \
        if (nt == 1) { /* token generation: the plain mat-vec loop, 4 rows at once if we can */ \
            int r = 0;                                                                           \
            if (PYL_##T == PYL_Q4_K)                                                             \
                for (; r + 4 <= nr; r += 4) pyl_q4K_r4(w + r * ws, ws, nb, X, o + r);            \
            if (PYL_##T == PYL_Q6_K)                                                             \
                for (; r + 4 <= nr; r += 4) pyl_q6K_r4(w + r * ws, ws, nb, X, o + r);            \
            for (; r < nr; r++) o[r] = pyl_dotK_direct1(PYL_##T, w + r * ws, nb, X);             \
            return;                                                                              \
        }                                                                                        \
        for (int r = 0; r < nr; r++)                                                             \
            for (int i = 0; i < nt; i += 4)                                                      \
                switch (nt - i < 4 ? nt - i : 4) {                                               \
                case 1: o[i * os + r] = pyl_dotK_direct1(PYL_##T, w + r * ws, nb, X + i); break;  \
                case 2: pyl_dotK_direct(PYL_##T, 2, w + r * ws, nb, X + i, o + i * os + r, os); break; \
                case 3: pyl_dotK_direct(PYL_##T, 3, w + r * ws, nb, X + i, o + i * os + r, os); break; \
                default: pyl_dotK_direct(PYL_##T, 4, w + r * ws, nb, X + i, o + i * os + r, os); break; \
                }                                                                                \
    }
PYL_DIRECT_A(Q4_0)
PYL_DIRECT_A(Q4_1)
PYL_DIRECT_A(Q5_0)
PYL_DIRECT_A(Q5_1)
PYL_DIRECT_A(Q8_0)
PYL_DIRECT_A(IQ4_NL)
PYL_DIRECT_A(MXFP4)
PYL_DIRECT_K(Q2_K)
PYL_DIRECT_K(Q3_K)
PYL_DIRECT_K(Q4_K)
PYL_DIRECT_K(Q4_KT)
PYL_DIRECT_K(Q5_K)
PYL_DIRECT_K(Q6_K)
PYL_DIRECT_K(IQ2_XXS)
PYL_DIRECT_K(IQ2_XS)
PYL_DIRECT_K(IQ2_S)
PYL_DIRECT_K(IQ3_XXS)
PYL_DIRECT_K(IQ3_S)
PYL_DIRECT_K(IQ1_S)
PYL_DIRECT_K(IQ1_M)
PYL_DIRECT_K(IQ4_XS)
/* IQ4_XS, one token: pyl_dotK_direct1's operations with the super-block decoded in registers
 * (per 32-element sub-block madd(maddubs(|w|, sign(y, w)), scale) into 8 int32 lanes, S = their
 * exact sum, res = d * (float)S, acc = fma(res, d_y, acc)) */
static inline __attribute__((always_inline)) float
pyl_xs_dot1(const uint8_t *row, int nsb, const pyl_arow *a) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pyl_kvalues_iq4nl));
    __m128 acc = _mm_setzero_ps();
    for (int b = 0; b < nsb; b++) {
        const uint8_t *x = row + (int64_t)136 * b;
        _mm_prefetch((const char *)x + PYL_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)x + PYL_PREFETCH + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)x + PYL_PREFETCH + 128, _MM_HINT_T0);
        uint16_t sh;
        memcpy(&sh, x + 2, 2);
        const int8_t *y = a->q + 256 * b;
        __m256i S = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int ib = 0; ib < 8; ib++) {
            const int ls = ((x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
            const __m256i w = _mm256_shuffle_epi8(lut, pyl_nib32(x + 8 + 16 * ib));
            const __m256i yv = _mm256_loadu_si256((const __m256i *)(y + 32 * ib));
            S = _mm256_add_epi32(S, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(yv, w)),
                                                      _mm256_set1_epi16((int16_t)(ls - 32))));
        }
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(S), _mm256_extracti128_si256(S, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        acc = _mm_fmadd_ss(_mm_mul_ss(_mm_set_ss(pyl_rd_f16(x)), _mm_cvtepi32_ps(s4)), _mm_set_ss(a->d[b]), acc);
    }
    return _mm_cvtss_f32(acc);
}
static void pyl_direct_IQ4_XS_1(const uint8_t *w, int64_t ws, int nr, int nb, const pyl_arow *X,
                                int nt, float *o, int64_t os) {
    if (nt != 1) { pyl_direct_IQ4_XS(w, ws, nr, nb, X, nt, o, os); return; }
    for (int r = 0; r < nr; r++) o[r] = pyl_xs_dot1(w + r * ws, nb, X);
}
PYL_DIRECT_K(TQ1_0)
PYL_DIRECT_K(TQ2_0)

typedef void (*pyl_direct_fn)(const uint8_t *, int64_t, int, int, const pyl_arow *, int, float *, int64_t);
static inline pyl_direct_fn pyl_direct_for(int t) {
    switch (t) {
    case PYL_Q4_0: return pyl_direct_Q4_0; case PYL_Q4_1: return pyl_direct_Q4_1;
    case PYL_Q5_0: return pyl_direct_Q5_0; case PYL_Q5_1: return pyl_direct_Q5_1;
    case PYL_Q8_0: return pyl_direct_Q8_0; case PYL_Q2_K: return pyl_direct_Q2_K;
    case PYL_IQ4_NL: return pyl_direct_IQ4_NL; case PYL_MXFP4: return pyl_direct_MXFP4;
    case PYL_Q3_K: return pyl_direct_Q3_K; case PYL_Q4_K: return pyl_direct_Q4_K;
    case PYL_Q4_KT: return pyl_direct_Q4_KT;
    case PYL_Q5_K: return pyl_direct_Q5_K; case PYL_Q6_K: return pyl_direct_Q6_K;
    case PYL_IQ2_XXS: return pyl_direct_IQ2_XXS; case PYL_IQ2_XS: return pyl_direct_IQ2_XS;
    case PYL_IQ2_S: return pyl_direct_IQ2_S; case PYL_IQ3_XXS: return pyl_direct_IQ3_XXS;
    case PYL_IQ3_S: return pyl_direct_IQ3_S; case PYL_IQ1_S: return pyl_direct_IQ1_S;
    case PYL_IQ1_M: return pyl_direct_IQ1_M; case PYL_IQ4_XS: return pyl_direct_IQ4_XS_1;
    case PYL_TQ1_0: return pyl_direct_TQ1_0; case PYL_TQ2_0: return pyl_direct_TQ2_0;
    default: return 0;
    }
}
#ifndef PYL_DIRECT_MAX_A
#define PYL_DIRECT_MAX_A 16 /* family A: direct register groups up to this many tokens */
#endif
#ifndef PYL_DIRECT_MAX_K
#define PYL_DIRECT_MAX_K 3 /* K-quants: super-blocks decoded once per row (tiles win from 4) */
#endif
#else
#define PYL_DIRECT_MAX_A 0
#define PYL_DIRECT_MAX_K 0
#endif

/* specialisations: full tiles (NR = PYL_R, NT = 1..PYL_T) get constant loop bounds; partial
 * tiles take the same code with runtime bounds (identical per-element operations) */
#define PYL_SPECIALISE(NAME, FLAGNAME)                                                            \
    static void NAME##_full1_##FLAGNAME(int nb, const pyl_wrow *W, const pyl_arow *A, float *o, int64_t os) { NAME(PYL_R, 1, FLAGNAME, nb, W, A, o, os); } \
    static void NAME##_full2_##FLAGNAME(int nb, const pyl_wrow *W, const pyl_arow *A, float *o, int64_t os) { NAME(PYL_R, 2, FLAGNAME, nb, W, A, o, os); } \
    static void NAME##_full3_##FLAGNAME(int nb, const pyl_wrow *W, const pyl_arow *A, float *o, int64_t os) { NAME(PYL_R, 3, FLAGNAME, nb, W, A, o, os); } \
    static void NAME##_full4_##FLAGNAME(int nb, const pyl_wrow *W, const pyl_arow *A, float *o, int64_t os) { NAME(PYL_R, 4, FLAGNAME, nb, W, A, o, os); } \
    static void NAME##_part_##FLAGNAME(int nr, int nt, int nb, const pyl_wrow *W, const pyl_arow *A, float *o, int64_t os) { NAME(nr, nt, FLAGNAME, nb, W, A, o, os); }

#define pyl_tileF3(NR, NT, FLAG, K, W, A, O, OS) pyl_tileF(NR, NT, K, W, A, O, OS)
PYL_SPECIALISE(pyl_tileA, 0)
PYL_SPECIALISE(pyl_tileA, 1)
PYL_SPECIALISE(pyl_tileK, 0)
PYL_SPECIALISE(pyl_tileK, 1)
PYL_SPECIALISE(pyl_tileK, 2)
PYL_SPECIALISE(pyl_tileK, 3)
PYL_SPECIALISE(pyl_tileF3, 0)

typedef void (*pyl_full_fn)(int, const pyl_wrow *, const pyl_arow *, float *, int64_t);
typedef void (*pyl_part_fn)(int, int, int, const pyl_wrow *, const pyl_arow *, float *, int64_t);

static inline void pyl_tile_fns(int t, pyl_full_fn full[PYL_T], pyl_part_fn *part) {
#define PYL_SET(NAME, F) full[0] = NAME##_full1_##F; full[1] = NAME##_full2_##F; \
    full[2] = NAME##_full3_##F; full[3] = NAME##_full4_##F; *part = NAME##_part_##F;
    switch (pyl_family(t)) {
    case 0: if (pyl_has_m(t)) { PYL_SET(pyl_tileA, 1) } else { PYL_SET(pyl_tileA, 0) } break;
    case 1:
        switch (pyl_has_min(t)) {
        case 1: PYL_SET(pyl_tileK, 1) break;
        case 2: PYL_SET(pyl_tileK, 2) break;
        case 3: PYL_SET(pyl_tileK, 3) break;
        default: PYL_SET(pyl_tileK, 0) break;
        }
        break;
    default: PYL_SET(pyl_tileF3, 0) break;
    }
#undef PYL_SET
}

#if PYL_AVX2
#define pyl_tileA_4x2_fn pyl_tileA_4x2
#else
#define pyl_tileA_4x2_fn pyl_tileA_full2_0
#endif

#if PYL_AVX2
/* ---- numerics="llama.cpp", under 8 rows: llama.cpp's AVX2 vec_dot of the grid i-quants
 * (ggml_vec_dot_iq{2_xxs,2_xs,2_s,3_xxs,3_s,1_s,1_m}_q8_K): per super-block 8 int32 lanes (lane l
 * of each 32-block: elements 4l..4l+3 times the integer scale of their 16), acc8 = fma(f32(d*d8),
 * (float)lanes, acc8), the result mult * hsum8(acc8); IQ1: the grid values -1/0/1 so, and the
 * +-1 deltas: IQ1_M a second lane chain, IQ1_S one exact integer per super-block with
 * acc1 = fma(d, (float)sum, acc1); the result hsum8(acc) + 0.125 * (hsum8(acc2) or acc1). */
static float pyl_vecdot_iq(int t, const uint8_t *row, int nsb, const int8_t *q8all, const float *d8) {
    const int bb = pyl_block_bytes(t), iq1 = t == PYL_IQ1_S || t == PYL_IQ1_M;
    const float mult = t == PYL_IQ3_XXS ? 0.25f : t == PYL_IQ3_S ? 1.0f : 0.125f;
    uint8_t u[256] __attribute__((aligned(32)));
    int8_t g[256] __attribute__((aligned(32))), dl[256] __attribute__((aligned(32)));
    int16_t s16[16], mn[16];
    __m256 acc = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
    float acc1 = 0.0f;
    for (int b = 0; b < nsb; b++) {
        float d0, dm;
        pyl_dec_iq(t, row + (int64_t)bb * b, u, s16, mn, &d0, &dm);
        const float dd = (d0 / mult) * d8[b];
        const int8_t *q8 = q8all + 256 * (int64_t)b;
        if (iq1)
            for (int j = 0; j < 256; j++) {
                const int v = (int)u[j] - PYL_IQ_OFF, de = (v & 7) == 1 ? 1 : -1;
                dl[j] = (int8_t)de;
                g[j] = (int8_t)((v - de) / 8);
            }
        __m256i sumi = _mm256_setzero_si256(), sumd = _mm256_setzero_si256();
        for (int c = 0; c < 8; c++) {
            const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(s16[2 * c + 1]), _mm_set1_epi16(s16[2 * c]));
            const __m256i y = _mm256_loadu_si256((const __m256i *)(q8 + 32 * c));
            const __m256i v = iq1 ? _mm256_load_si256((const __m256i *)(g + 32 * c))
                                  : _mm256_sub_epi8(_mm256_load_si256((const __m256i *)(u + 32 * c)),
                                                    _mm256_set1_epi8(PYL_IQ_OFF));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(
                _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(y, v)), sc));
            if (iq1) {
                const __m256i e = _mm256_load_si256((const __m256i *)(dl + 32 * c));
                sumd = _mm256_add_epi32(sumd, _mm256_madd_epi16(
                    _mm256_maddubs_epi16(_mm256_set1_epi8(1), _mm256_sign_epi8(y, e)), sc));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumi), acc);
        if (t == PYL_IQ1_M) acc2 = _mm256_fmadd_ps(_mm256_set1_ps(dd), _mm256_cvtepi32_ps(sumd), acc2);
        if (t == PYL_IQ1_S) {
            const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(sumd), _mm256_extracti128_si256(sumd, 1));
            const __m128i h2 = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
            acc1 = fmaf(dd, (float)_mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 1))), acc1);
        }
    }
    if (!iq1) return mult * pyl_hsum8(acc);
    return pyl_hsum8(acc) + 0.125f * (t == PYL_IQ1_M ? pyl_hsum8(acc2) : acc1);
}
#endif

#if PYL_AVX2
#if (defined(__AVX512VNNI__) && defined(__AVX512VL__)) || defined(__AVXVNNI__)
#define PYL_VNNI 1
#else
#define PYL_VNNI 0
#endif
/* the 4 rows' block scales as one vector (lanes >= nr repeat the last row) */
static inline __attribute__((always_inline)) __m128
pyl_scale4(const int t, const uint8_t *x0, const uint8_t *x1, const uint8_t *x2, const uint8_t *x3) {
    return _mm_set_ps(*pyl_scaleA_ref(t, x3), *pyl_scaleA_ref(t, x2), *pyl_scaleA_ref(t, x1),
                      *pyl_scaleA_ref(t, x0));
}
#if PYL_VNNI
/* unsigned weight bytes u = w + off of one R8 block (Q4_0: the nibbles, off 8; IQ4_NL / MXFP4:
 * the table value + 128, from lut = the table ^ 0x80), and off as bytes */
static inline __m256i pyl_r8_lut(const int t) {
    return _mm256_xor_si256(_mm256_broadcastsi128_si256(_mm_loadu_si128(
        (const __m128i *)(t == PYL_MXFP4 ? pyl_kvalues_fp4 : pyl_kvalues_iq4nl))), _mm256_set1_epi8((char)0x80));
}
static inline __m256i pyl_r8_off(const int t) { return _mm256_set1_epi8(t == PYL_Q4_0 ? 8 : (char)0x80); }
static inline __attribute__((always_inline)) __m256i pyl_r8_u(const int t, const uint8_t *x, __m256i lut) {
    const __m256i nib = pyl_nib32(x + (t == PYL_MXFP4 ? 1 : 2));
    return t == PYL_Q4_0 ? nib : _mm256_shuffle_epi8(lut, nib);
}
#endif
/* F(type constant, args...) for the R8 weight type t */
#define PYL_R8_BY_TYPE(F, ...)                                                                    \
    switch (t) {                                                                                  \
    case PYL_Q4_0: F(PYL_Q4_0, __VA_ARGS__); break;                                               \
    case PYL_IQ4_NL: F(PYL_IQ4_NL, __VA_ARGS__); break;                                           \
    default: F(PYL_MXFP4, __VA_ARGS__); break;                                                    \
    }
/* R8 weights times n < 8 tokens, rows r0..r0+nr (nr <= 4) together: per block the exact integer
 * dot I of each row, then acc = fma((float)I, d_w * d_x, acc) (lane = row), blocks in order: the
 * operations of the 8x8 gemv. With VNNI the integers come from unsigned weight bytes u = w + off
 * (Q4_0: the nibble, off 8; IQ4_NL / MXFP4: the table value + 128): lanes = dpbusd(-off * sum4(y),
 * u, y) = sum4(w * y) exactly (no saturation: dpbusd sums in int32); without VNNI |w| . sign(y, w)
 * as the tiles. */
static inline __attribute__((always_inline)) void
pyl_r8_few_nt(const int t, const int NT, const uint8_t *x0, const uint8_t *x1, const uint8_t *x2,
              const uint8_t *x3, int nr, int nb, const pyl_arow *X, float *out, int64_t os) {
    const int bb = pyl_block_bytes(t);
#if PYL_VNNI
    const __m256i lut = pyl_r8_lut(t), offv = pyl_r8_off(t), z = _mm256_setzero_si256();
#else
    const __m256i ones = _mm256_set1_epi16(1);
#endif
    __m128 acc[2] = {_mm_setzero_ps(), _mm_setzero_ps()};
    for (int b = 0; b < nb; b++) {
        const int64_t o = (int64_t)bb * b;
#if PYL_VNNI   /* each row's block decoded once for the NT tokens */
        const __m256i u0 = pyl_r8_u(t, x0 + o, lut), u1 = pyl_r8_u(t, x1 + o, lut);
        const __m256i u2 = pyl_r8_u(t, x2 + o, lut), u3 = pyl_r8_u(t, x3 + o, lut);
#else
        const __m256i w0 = pyl_dec32_avx2(t, x0 + o), w1 = pyl_dec32_avx2(t, x1 + o);
        const __m256i w2 = pyl_dec32_avx2(t, x2 + o), w3 = pyl_dec32_avx2(t, x3 + o);
        const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1), a2 = _mm256_abs_epi8(w2), a3 = _mm256_abs_epi8(w3);
#endif
        const __m128 dw = pyl_scale4(t, x0 + o, x1 + o, x2 + o, x3 + o);
        for (int j = 0; j < NT; j++) {
            const __m256i y = _mm256_loadu_si256((const __m256i *)(X[j].q + 32 * b));
#if PYL_VNNI
            const __m256i corr = _mm256_sub_epi32(z, _mm256_dpbusd_epi32(z, offv, y));
            const __m256i p0 = _mm256_dpbusd_epi32(corr, u0, y), p1 = _mm256_dpbusd_epi32(corr, u1, y);
            const __m256i p2 = _mm256_dpbusd_epi32(corr, u2, y), p3 = _mm256_dpbusd_epi32(corr, u3, y);
#else
            const __m256i p0 = PYL_DOT4(a0, _mm256_sign_epi8(y, w0), ones), p1 = PYL_DOT4(a1, _mm256_sign_epi8(y, w1), ones);
            const __m256i p2 = PYL_DOT4(a2, _mm256_sign_epi8(y, w2), ones), p3 = PYL_DOT4(a3, _mm256_sign_epi8(y, w3), ones);
#endif
            const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
            const __m128i I = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
            acc[j] = _mm_fmadd_ps(_mm_cvtepi32_ps(I), _mm_mul_ps(dw, _mm_set1_ps(X[j].d[b])), acc[j]);
        }
    }
    for (int j = 0; j < NT; j++) {
        float r4[4];
        _mm_storeu_ps(r4, acc[j]);
        for (int r = 0; r < nr; r++) out[j * os + r] = r4[r];
    }
}
static inline __attribute__((always_inline)) void
pyl_r8_few(const int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nr, int nb,
           const pyl_acts *A, int64_t n, float *out, int64_t os) {
    const uint8_t *x0 = wsrc + r0 * wstride;
    const uint8_t *x1 = nr > 1 ? x0 + wstride : x0, *x2 = nr > 2 ? x1 + wstride : x1;
    const uint8_t *x3 = nr > 3 ? x2 + wstride : x2;
    int64_t i = 0;
    for (; i + 1 < n; i += 2) {   /* token pairs share the decoded blocks; each token's operations as alone */
        const pyl_arow X[2] = {pyl_act_row(A, i), pyl_act_row(A, i + 1)};
        pyl_r8_few_nt(t, 2, x0, x1, x2, x3, nr, nb, X, out + i * os + r0, os);
    }
    if (i < n) {
        const pyl_arow X[1] = {pyl_act_row(A, i)};
        pyl_r8_few_nt(t, 1, x0, x1, x2, x3, nr, nb, X, out + i * os + r0, os);
    }
}

#if !PYL_VNNI
/* R8 weights, 8 rows r0..r0+7 times every token (AVX2 without VNNI; from PYL_R8_GEMM_MIN
 * tokens): the tile's rows are laid out once in the scratch the way llama.cpp's block_*x8
 * interleaves them (per block and group g of 4 elements one 32-byte vector whose 32-bit lane l
 * holds row l's elements 4g..4g+3, as signed w and as |w|; then the 8 rows' d_w), so that per
 * token and block each group's 4 activation bytes are broadcast to every lane (a load) and no
 * horizontal sum is needed: lane l = the exact integer dot I of row l, from
 * maddubs(|w|, sign(y, w)) pair sums (Q4_0 / MXFP4, |w| <= 12: summed over the 8 groups in int16,
 * |sum| <= 8 * 2 * 12 * 127 < 2^15, then one madd; IQ4_NL: madd per group), then
 * acc = fma((float)I, d_w * d_x, acc) per block in order: the gemm/gemv operations. */
#ifndef PYL_R8_GEMM_MIN
#define PYL_R8_GEMM_MIN 4
#endif
enum { PYL_R8_BLK = 8 * 32 * 2 + 32 }; /* scratch bytes per block: w, |w|, 8 scales */
/* 32 values of each of 8 rows (v[l]: row l) -> s[32 g .. 32 g + 31] lane l = row l's values
 * 4g..4g+3 (an 8x8 transpose of 32-bit units), s[256 + ...] the same as |w| */
static inline __attribute__((always_inline)) void pyl_tr8x32_store(const __m256i *v, uint8_t *s) {
    __m256i a[8], c[8];
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm256_unpacklo_epi32(v[2 * i], v[2 * i + 1]);       /* units 0 1 | 4 5 of 2 rows */
        a[2 * i + 1] = _mm256_unpackhi_epi32(v[2 * i], v[2 * i + 1]);   /* units 2 3 | 6 7 */
    }
    for (int h = 0; h < 2; h++) {   /* rows 4h..4h+3 */
        const __m256i *q = a + 4 * h;
        c[4 * h + 0] = _mm256_unpacklo_epi64(q[0], q[2]);   /* unit 0 | 4 */
        c[4 * h + 1] = _mm256_unpackhi_epi64(q[0], q[2]);   /* unit 1 | 5 */
        c[4 * h + 2] = _mm256_unpacklo_epi64(q[1], q[3]);   /* unit 2 | 6 */
        c[4 * h + 3] = _mm256_unpackhi_epi64(q[1], q[3]);   /* unit 3 | 7 */
    }
    for (int g = 0; g < 4; g++) {
        const __m256i lo = _mm256_permute2x128_si256(c[g], c[4 + g], 0x20);
        const __m256i hi = _mm256_permute2x128_si256(c[g], c[4 + g], 0x31);
        _mm256_storeu_si256((__m256i *)(s + 32 * g), lo);
        _mm256_storeu_si256((__m256i *)(s + 32 * (g + 4)), hi);
        _mm256_storeu_si256((__m256i *)(s + 256 + 32 * g), _mm256_abs_epi8(lo));
        _mm256_storeu_si256((__m256i *)(s + 256 + 32 * (g + 4)), _mm256_abs_epi8(hi));
    }
}
static inline __attribute__((always_inline)) void
pyl_r8_pack8(const int t, const uint8_t *x0, int64_t wstride, int nb, uint8_t *sp) {
    const int bb = pyl_block_bytes(t);
    for (int b = 0; b < nb; b++) {
        __m256i v[8];
        float dw[8];
        for (int l = 0; l < 8; l++) {
            const uint8_t *x = x0 + l * wstride + (int64_t)bb * b;
            v[l] = pyl_dec32_avx2(t, x);
            dw[l] = *pyl_scaleA_ref(t, x);
        }
        uint8_t *s = sp + (int64_t)PYL_R8_BLK * b;
        pyl_tr8x32_store(v, s);
        memcpy(s + 512, dw, 32);
    }
}
static inline __attribute__((always_inline)) void
pyl_r8_gemm8_nt(const int t, const int NT, int nb, const uint8_t *sp, const pyl_arow *X, float *out,
                int64_t os) {
    const int I16 = t != PYL_IQ4_NL;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[4];
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *s = sp + (int64_t)PYL_R8_BLK * b;
        __m256i si[4];
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m256i w = _mm256_loadu_si256((const __m256i *)(s + 32 * g));
            const __m256i aw = _mm256_loadu_si256((const __m256i *)(s + 256 + 32 * g));
            for (int j = 0; j < NT; j++) {
                int32_t y4;
                memcpy(&y4, X[j].q + 32 * b + 4 * g, 4);
                const __m256i p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(y4), w));
                if (I16) si[j] = g == 0 ? p : _mm256_add_epi16(si[j], p);
                else {
                    const __m256i p32 = _mm256_madd_epi16(p, ones);
                    si[j] = g == 0 ? p32 : _mm256_add_epi32(si[j], p32);
                }
                __asm__("" : "+x"(si[j]));   /* keep gcc from computing all products first and spilling them */
            }
        }
        const __m256 dw = _mm256_loadu_ps((const float *)(s + 512));
        for (int j = 0; j < NT; j++) {
            const __m256i I = I16 ? _mm256_madd_epi16(si[j], ones) : si[j];
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(dw, _mm256_set1_ps(X[j].d[b])), acc[j]);
        }
    }
    for (int j = 0; j < NT; j++) _mm256_storeu_ps(out + j * os, acc[j]);
}
/* every token against the 8 rows unpacked in sp: groups of 4 tokens, then one at a time */
static inline __attribute__((always_inline)) void
pyl_r8_gemm8_tokens(const int t, int nb, const uint8_t *sp, const pyl_acts *A, int64_t n,
                    float *out, int64_t os) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const pyl_arow X[4] = {pyl_act_row(A, i), pyl_act_row(A, i + 1), pyl_act_row(A, i + 2), pyl_act_row(A, i + 3)};
        pyl_r8_gemm8_nt(t, 4, nb, sp, X, out + i * os, os);
    }
    for (; i < n; i++) {
        const pyl_arow X[1] = {pyl_act_row(A, i)};
        pyl_r8_gemm8_nt(t, 1, nb, sp, X, out + i * os, os);
    }
}
static inline __attribute__((always_inline)) void
pyl_r8_gemm8(const int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nb, const pyl_acts *A,
             int64_t n, uint8_t *sp, float *out, int64_t os) {
    pyl_r8_pack8(t, wsrc + r0 * wstride, wstride, nb, sp);
    pyl_r8_gemm8_tokens(t, nb, sp, A, n, out + r0, os);
}

/* ---- R8 weights repacked (kernel type | PYL_R8 | PYL_RP): per group of 8 rows and per block b,
 * 8 * block bytes: the 8 rows' scales (f16 d, or MXFP4's E8M0 byte), then 4 vectors of 32 bytes,
 * vector v lane l (4 bytes) = row l's qs[4v..4v+3] (low nibbles: elements 4v..4v+3, high: 16+4v..):
 * the groups of 4 elements come out of a load and a mask / shift with lane = row, so neither the
 * mat-vec nor the gemm needs horizontal sums or a transpose (the role of llama.cpp's repack). */
#define PYL_HAVE_RP 1
static void pyl_r8_repack(int t, const uint8_t *src, int64_t rows, int64_t rb, uint8_t *dst) {
    const int bb = pyl_block_bytes(t), hs = t == PYL_MXFP4 ? 1 : 2;
    const int nb = (int)(rb / bb);
    for (int64_t g0 = 0; g0 + 8 <= rows; g0 += 8) {
        const uint8_t *sg = src + g0 * rb;
        uint8_t *dg = dst + g0 * rb;
        for (int b = 0; b < nb; b++) {
            uint8_t *o = dg + (int64_t)8 * bb * b;
            for (int l = 0; l < 8; l++) {
                const uint8_t *x = sg + l * rb + (int64_t)bb * b;
                memcpy(o + hs * l, x, hs);
                for (int v = 0; v < 4; v++) memcpy(o + 8 * hs + 32 * v + 4 * l, x + hs + 4 * v, 4);
            }
        }
    }
}
/* the 8 rows' block scales of a repacked block */
static inline __attribute__((always_inline)) __m256 pyl_rp_scales(const int t, const uint8_t *o) {
    if (t == PYL_MXFP4)
        return _mm256_set_ps(pyl_e8m0h_table[o[7]], pyl_e8m0h_table[o[6]], pyl_e8m0h_table[o[5]], pyl_e8m0h_table[o[4]],
                             pyl_e8m0h_table[o[3]], pyl_e8m0h_table[o[2]], pyl_e8m0h_table[o[1]], pyl_e8m0h_table[o[0]]);
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)o));   /* exact, as the f16 table */
}
/* the 8 groups of a repacked block: nibbles (u[g], lane = row, elements 4g..4g+3) */
static inline __attribute__((always_inline)) void pyl_rp_nibs(const uint8_t *q, __m256i *u) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    for (int v = 0; v < 4; v++) {
        const __m256i x = _mm256_loadu_si256((const __m256i *)(q + 32 * v));
        u[v] = _mm256_and_si256(x, m4);
        u[v + 4] = _mm256_and_si256(_mm256_srli_epi16(x, 4), m4);
    }
}
/* 8 * sum(y) of a 32-block, in every lane (Q4_0's nibble offset: I = sum(nib * y) - 8 sum(y)) */
static inline __attribute__((always_inline)) __m256i pyl_bias8(const int8_t *y) {
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8),
                                        _mm256_loadu_si256((const __m256i *)y)), _mm256_set1_epi16(1));
    __m256i h = _mm256_hadd_epi32(s, s);
    h = _mm256_hadd_epi32(h, h);
    return _mm256_add_epi32(h, _mm256_permute2x128_si256(h, h, 0x01));
}
/* one group of 8 repacked rows times NT (1..3) tokens: per block and token lane l = the exact
 * integer dot I of row l (Q4_0: maddubs(nibble, y) summed over the 8 groups in int16, |sum| <=
 * 8 * 2 * 15 * 127 < 2^15, madd, minus 8 sum(y); MXFP4: maddubs(|w|, sign(y, w)) the same way;
 * IQ4_NL: madd per group), then acc = fma((float)I, d_w * d_x, acc): the gemv's operations. */
static inline __attribute__((always_inline)) void
pyl_rp_few_nt(const int t, const int NT, const uint8_t *grp, int nb, const pyl_arow *X, float *out, int64_t os) {
    const int bb = pyl_block_bytes(t), hs = t == PYL_MXFP4 ? 1 : 2;
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(
        (const __m128i *)(t == PYL_MXFP4 ? pyl_kvalues_fp4 : pyl_kvalues_iq4nl)));
    __m256 acc[3];
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int b = 0; b < nb; b++) {
        const uint8_t *o = grp + (int64_t)8 * bb * b;
        _mm_prefetch((const char *)o + PYL_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)o + PYL_PREFETCH + 64, _MM_HINT_T0);
        _mm_prefetch((const char *)o + PYL_PREFETCH + 128, _MM_HINT_T0);
        __m256i u[8];
        pyl_rp_nibs(o + 8 * hs, u);
        if (t != PYL_Q4_0)
            for (int g = 0; g < 8; g++) u[g] = _mm256_shuffle_epi8(lut, u[g]);
        const __m256 dw = pyl_rp_scales(t, o);
        for (int j = 0; j < NT; j++) {
            const int8_t *yb = X[j].q + 32 * b;
            __m256i si = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                int32_t y4;
                memcpy(&y4, yb + 4 * g, 4);
                const __m256i y = _mm256_set1_epi32(y4);
                if (t == PYL_Q4_0) si = _mm256_add_epi16(si, _mm256_maddubs_epi16(u[g], y));
                else if (t == PYL_MXFP4)
                    si = _mm256_add_epi16(si, _mm256_maddubs_epi16(_mm256_abs_epi8(u[g]), _mm256_sign_epi8(y, u[g])));
                else
                    si = _mm256_add_epi32(si, _mm256_madd_epi16(
                        _mm256_maddubs_epi16(_mm256_abs_epi8(u[g]), _mm256_sign_epi8(y, u[g])), ones));
                __asm__("" : "+x"(si));
            }
            __m256i I = t == PYL_IQ4_NL ? si : _mm256_madd_epi16(si, ones);
            if (t == PYL_Q4_0) I = _mm256_sub_epi32(I, pyl_bias8(yb));
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(dw, _mm256_set1_ps(X[j].d[b])), acc[j]);
        }
    }
    for (int j = 0; j < NT; j++) _mm256_storeu_ps(out + j * os, acc[j]);
}
/* a repacked group -> the gemm's scratch layout (pyl_r8_pack8's) */
static inline __attribute__((always_inline)) void
pyl_rp_pack8(const int t, const uint8_t *grp, int nb, uint8_t *sp) {
    const int bb = pyl_block_bytes(t), hs = t == PYL_MXFP4 ? 1 : 2;
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(
        (const __m128i *)(t == PYL_MXFP4 ? pyl_kvalues_fp4 : pyl_kvalues_iq4nl)));
    for (int b = 0; b < nb; b++) {
        const uint8_t *o = grp + (int64_t)8 * bb * b;
        uint8_t *s = sp + (int64_t)PYL_R8_BLK * b;
        __m256i u[8];
        pyl_rp_nibs(o + 8 * hs, u);
        for (int g = 0; g < 8; g++) {
            const __m256i w = t == PYL_Q4_0 ? _mm256_sub_epi8(u[g], _mm256_set1_epi8(8)) : _mm256_shuffle_epi8(lut, u[g]);
            _mm256_storeu_si256((__m256i *)(s + 32 * g), w);
            _mm256_storeu_si256((__m256i *)(s + 256 + 32 * g), _mm256_abs_epi8(w));
        }
        _mm256_storeu_ps((float *)(s + 512), pyl_rp_scales(t, o));
    }
}
static inline __attribute__((always_inline)) void
pyl_rp_tile(const int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nb, const pyl_acts *A,
            int64_t n, uint8_t *sp, float *out, int64_t os) {
    const uint8_t *grp = wsrc + r0 * wstride;
    int64_t i = 0;
    if (n >= PYL_R8_GEMM_MIN) {
        pyl_rp_pack8(t, grp, nb, sp);
        pyl_r8_gemm8_tokens(t, nb, sp, A, n, out + r0, os);
        return;
    }
    for (; i + 2 <= n; i += 2) {
        const pyl_arow X[2] = {pyl_act_row(A, i), pyl_act_row(A, i + 1)};
        pyl_rp_few_nt(t, 2, grp, nb, X, out + i * os + r0, os);
    }
    if (i < n) {
        const pyl_arow X[1] = {pyl_act_row(A, i)};
        pyl_rp_few_nt(t, 1, grp, nb, X, out + i * os + r0, os);
    }
}

/* Q8_0, 8 rows r0..r0+7 times every token (AVX2 without VNNI, beyond the direct path's token
 * counts): the rows interleaved in the scratch as pyl_r8_pack8 does; the 8-lane arithmetic of
 * the tiles (lane j = the exact sum of elements 4j..4j+3, acc_j = fma(d_w * d_x, (float)lane_j,
 * acc_j) per block, then pyl_hsum8's order ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))) held as
 * acc[j] with lane = row: the 8 groups are the 8 lanes, and the final sum is vertical adds. */
static void pyl_q8_gemm8(const uint8_t *wsrc, int64_t wstride, int64_t r0, int nb, const pyl_acts *A,
                         int64_t n, uint8_t *sp, float *out, int64_t os) {
    const uint8_t *x0 = wsrc + r0 * wstride;
    for (int b = 0; b < nb; b++) {
        __m256i v[8];
        float dw[8];
        for (int l = 0; l < 8; l++) {
            const uint8_t *x = x0 + l * wstride + (int64_t)34 * b;
            v[l] = _mm256_loadu_si256((const __m256i *)(x + 2));
            dw[l] = *pyl_scaleA_ref(PYL_Q8_0, x);
        }
        uint8_t *s = sp + (int64_t)PYL_R8_BLK * b;
        pyl_tr8x32_store(v, s);
        memcpy(s + 512, dw, 32);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t i = 0; i < n; i++) {
        const int8_t *yq = A->q + i * A->sq;
        const float *dy = A->d + i * A->sd;
        __m256 acc[8];
        for (int g = 0; g < 8; g++) acc[g] = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const uint8_t *s = sp + (int64_t)PYL_R8_BLK * b;
            const __m256 dd = _mm256_mul_ps(_mm256_loadu_ps((const float *)(s + 512)), _mm256_set1_ps(dy[b]));
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                int32_t y4;
                memcpy(&y4, yq + 32 * b + 4 * g, 4);
                const __m256i w = _mm256_loadu_si256((const __m256i *)(s + 32 * g));
                const __m256i aw = _mm256_loadu_si256((const __m256i *)(s + 256 + 32 * g));
                const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(y4), w)), ones);
                acc[g] = _mm256_fmadd_ps(dd, _mm256_cvtepi32_ps(p), acc[g]);
            }
        }
        const __m256 a = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
        const __m256 c = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
        _mm256_storeu_ps(out + i * os + r0, _mm256_add_ps(a, c));
    }
}

/* IQ4_XS, 8 rows r0..r0+7 times every token (AVX2 without VNNI, from PYL_R8_GEMM_MIN tokens):
 * the same interleaved layout per 32-element sub-block ib (values kvalues_iq4nl, as w and |w|),
 * plus per sub-block the 8 rows' integer scales ls - 32 (an int16 pair per lane) and per
 * super-block the 8 rows' d; per token and super-block lane l = S of row l = sum over ib of
 * madd(maddubs(|w|, sign(y, w)), scale) (exact: |S| < 2^28), then res = d * (float)S,
 * acc = fma(res, d_y, acc): the tiled kernel's operations (pyl_k_sb mode 2). */
enum { PYL_XS_SB = 8 * (8 * 32 * 2 + 32) + 32 }; /* per super-block: 8 x (w, |w|, scales), d */
static inline void pyl_xs_pack8(const uint8_t *x0, int64_t wstride, int nsb, uint8_t *sp) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)pyl_kvalues_iq4nl));
    for (int b = 0; b < nsb; b++) {
        uint8_t *s = sp + (int64_t)PYL_XS_SB * b;
        int32_t sc[8][8];
        float dw[8];
        for (int l = 0; l < 8; l++) {
            const uint8_t *x = x0 + l * wstride + (int64_t)136 * b;
            uint16_t sh;
            memcpy(&sh, x + 2, 2);
            dw[l] = pyl_rd_f16(x);
            for (int ib = 0; ib < 8; ib++) {
                const int ls = ((x[4 + ib / 2] >> (4 * (ib % 2))) & 0xF) | (((sh >> (2 * ib)) & 3) << 4);
                const uint32_t v = (uint16_t)(int16_t)(ls - 32);
                sc[ib][l] = (int32_t)(v | v << 16);
            }
        }
        for (int ib = 0; ib < 8; ib++) {
            __m256i v[8];
            for (int l = 0; l < 8; l++)
                v[l] = _mm256_shuffle_epi8(lut, pyl_nib32(x0 + l * wstride + (int64_t)136 * b + 8 + 16 * ib));
            uint8_t *si = s + (int64_t)PYL_R8_BLK * ib;
            pyl_tr8x32_store(v, si);
            memcpy(si + 512, sc[ib], 32);
        }
        memcpy(s + 8 * PYL_R8_BLK, dw, 32);
    }
}
static inline __attribute__((always_inline)) void
pyl_xs_gemm8_nt(const int NT, int nsb, const uint8_t *sp, const pyl_arow *X, float *out, int64_t os) {
    __m256 acc[4];
    for (int j = 0; j < NT; j++) acc[j] = _mm256_setzero_ps();
    for (int b = 0; b < nsb; b++) {
        const uint8_t *s = sp + (int64_t)PYL_XS_SB * b;
        __m256i S[4];
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *si = s + (int64_t)PYL_R8_BLK * ib;
            const __m256i sc = _mm256_loadu_si256((const __m256i *)(si + 512));
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m256i w = _mm256_loadu_si256((const __m256i *)(si + 32 * g));
                const __m256i aw = _mm256_loadu_si256((const __m256i *)(si + 256 + 32 * g));
                for (int j = 0; j < NT; j++) {
                    int32_t y4;
                    memcpy(&y4, X[j].q + 256 * b + 32 * ib + 4 * g, 4);
                    const __m256i p = _mm256_madd_epi16(
                        _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(y4), w)), sc);
                    S[j] = ib == 0 && g == 0 ? p : _mm256_add_epi32(S[j], p);
                    __asm__("" : "+x"(S[j]));
                }
            }
        }
        const __m256 dw = _mm256_loadu_ps((const float *)(s + 8 * PYL_R8_BLK));
        for (int j = 0; j < NT; j++)
            acc[j] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_cvtepi32_ps(S[j])), _mm256_set1_ps(X[j].d[b]), acc[j]);
    }
    for (int j = 0; j < NT; j++) _mm256_storeu_ps(out + j * os, acc[j]);
}
static void pyl_xs_gemm8(const uint8_t *wsrc, int64_t wstride, int64_t r0, int nsb, const pyl_acts *A,
                         int64_t n, uint8_t *sp, float *out, int64_t os) {
    pyl_xs_pack8(wsrc + r0 * wstride, wstride, nsb, sp);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const pyl_arow X[4] = {pyl_act_row(A, i), pyl_act_row(A, i + 1), pyl_act_row(A, i + 2), pyl_act_row(A, i + 3)};
        pyl_xs_gemm8_nt(4, nsb, sp, X, out + i * os + r0, os);
    }
    for (; i < n; i++) {
        const pyl_arow X[1] = {pyl_act_row(A, i)};
        pyl_xs_gemm8_nt(1, nsb, sp, X, out + i * os + r0, os);
    }
}
#endif

#if PYL_VNNI
/* [sum a_i lanes] of 8 int32x8 vectors: lane i = the sum of vector i */
static inline __m256i pyl_hsum8x8_i32(const __m256i *p) {
    const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20), _mm256_permute2x128_si256(h0, h1, 0x31));
}
/* R8 weights times the first n8 (a multiple of 8) tokens, 8 tokens per group (lane = token):
 * per row and block I = sum(u * y) - off * sum(y) (exact integers, u = w + off as pyl_r8_few),
 * acc = fma((float)I, d_w * d_y, acc), blocks in order: the 8-token gemm operations. The tokens'
 * off * sum(y) and scales are laid out once per group and chunk of blocks, for all rows. */
enum { PYL_R8_CH = 64 };
static inline __attribute__((always_inline)) void
pyl_r8_g8(const int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nr, int nb,
          const pyl_acts *A, int64_t n8, float *out, int64_t os) {
    const int bb = pyl_block_bytes(t);
    const __m256i lut = pyl_r8_lut(t), offv = pyl_r8_off(t), z = _mm256_setzero_si256();
    __m256 dyT[PYL_R8_CH];
    __m256i biasT[PYL_R8_CH];
    for (int64_t t0 = 0; t0 < n8; t0 += 8) {
        const int8_t *q0 = A->q + t0 * A->sq;
        const int64_t sq = A->sq;
        const float *d0 = A->d + t0 * A->sd;
        const int64_t sd = A->sd;
        __m256 acc[PYL_R];
        for (int r = 0; r < PYL_R; r++) acc[r] = _mm256_setzero_ps();
        for (int c0 = 0; c0 < nb; c0 += PYL_R8_CH) {
            const int cn = nb - c0 < PYL_R8_CH ? nb - c0 : PYL_R8_CH;
            for (int j = 0; j < cn; j++) {
                const int8_t *yb = q0 + 32 * (c0 + j);
                const float *db = d0 + c0 + j;
                __m256i s[8];
                for (int i = 0; i < 8; i++)
                    s[i] = _mm256_dpbusd_epi32(z, offv, _mm256_loadu_si256((const __m256i *)(yb + i * sq)));
                biasT[j] = pyl_hsum8x8_i32(s);
                dyT[j] = _mm256_set_ps(db[7 * sd], db[6 * sd], db[5 * sd], db[4 * sd],
                                       db[3 * sd], db[2 * sd], db[sd], db[0]);
            }
            for (int r = 0; r < nr; r++) {
                const uint8_t *x = wsrc + (r0 + r) * wstride + (int64_t)bb * c0;
                const int8_t *yb = q0 + 32 * c0;
                __m256 a = acc[r];
                for (int j = 0; j < cn; j++, x += bb, yb += 32) {
                    const __m256i u = pyl_r8_u(t, x, lut);
                    __m256i p[8];
                    for (int i = 0; i < 8; i++)
                        p[i] = _mm256_dpbusd_epi32(z, u, _mm256_loadu_si256((const __m256i *)(yb + i * sq)));
                    const __m256i I = _mm256_sub_epi32(pyl_hsum8x8_i32(p), biasT[j]);
                    a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(_mm256_set1_ps(*pyl_scaleA_ref(t, x)), dyT[j]), a);
                }
                acc[r] = a;
            }
        }
        for (int r = 0; r < nr; r++) {
            float o8[8];
            _mm256_storeu_ps(o8, acc[r]);
            for (int i = 0; i < 8; i++) out[(t0 + i) * os + r0 + r] = o8[i];
        }
    }
}
#endif
#endif

/* ---- repacked 32-block types (weight type | PYL_R8): llama.cpp's ggml_gemm/gemv_*_8x8_q8_0
 * arithmetic (the same for every row count): per block the exact integer dot I of the 32
 * values, acc = fma((float)I, d_w * d_x, acc) in block order.  Each block is decoded once per
 * weight row and dotted with every token. */
static void pyl_rowtile_r8(int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nr, int k,
                           const pyl_acts *A, int64_t n, uint8_t *scratch, float *out, int64_t os) {
    const int bb = pyl_block_bytes(t), nb = k / 32;
    enum { G = 8 };
#if PYL_AVX2 && !PYL_VNNI
    if (nr == 8 && n >= PYL_R8_GEMM_MIN) {   /* an 8-row tile (pyl_tile_rows) */
        PYL_R8_BY_TYPE(pyl_r8_gemm8, wsrc, wstride, r0, nb, A, n, scratch, out, os)
        return;
    }
#endif
    if (nr > PYL_R) {   /* 4 rows at a time below */
        pyl_rowtile_r8(t, wsrc, wstride, r0, PYL_R, k, A, n, scratch, out, os);
        pyl_rowtile_r8(t, wsrc, wstride, r0 + PYL_R, nr - PYL_R, k, A, n, scratch, out, os);
        return;
    }
#if PYL_AVX2
    /* tokens from tstart: VNNI: n % 8 after the 8-token groups; AVX2: under 8 tokens, all of them */
    const int64_t tstart = PYL_VNNI ? n & ~(int64_t)(G - 1) : n < G ? 0 : n;
#if PYL_VNNI
    PYL_R8_BY_TYPE(pyl_r8_g8, wsrc, wstride, r0, nr, nb, A, tstart, out, os)
#endif
    if (tstart < n) {   /* each token's operations as alone (4 rows per block, one fma) */
        pyl_acts R = *A;
        R.q += tstart * A->sq;
        R.d += tstart * A->sd;
        PYL_R8_BY_TYPE(pyl_r8_few, wsrc, wstride, r0, nr, nb, &R, n - tstart, out + tstart * os, os)
    }
    if (PYL_VNNI || n < G) return;
#endif
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = wsrc + (r0 + r) * wstride;
        for (int64_t t0 = 0; t0 < n; t0 += G) {
            const int nt = n - t0 < G ? (int)(n - t0) : G;
            pyl_arow X[G];
            float acc[G];
#if PYL_AVX2
            __m256 acc8 = _mm256_setzero_ps();
#endif
            for (int i = 0; i < nt; i++) { X[i] = pyl_act_row(A, t0 + i); acc[i] = 0.0f; }
            for (int b = 0; b < nb; b++) {
                const uint8_t *x = row + (int64_t)bb * b;
                const float dw = *pyl_scaleA_ref(t, x);
#if PYL_AVX2
                const __m256i w = pyl_dec32_avx2(t, x), aw = _mm256_abs_epi8(w);
                const __m256i ones = _mm256_set1_epi16(1);
                if (nt == G) {   /* 8 tokens: the 8 block integers reduced together, one fma */
                    __m256i p[G];
                    for (int i = 0; i < G; i++)
                        p[i] = PYL_DOT4(aw, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(X[i].q + 32 * b)), w), ones);
                    const __m256i h0 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
                    const __m256i h1 = _mm256_hadd_epi32(_mm256_hadd_epi32(p[4], p[5]), _mm256_hadd_epi32(p[6], p[7]));
                    const __m256i I = _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20),
                                                       _mm256_permute2x128_si256(h0, h1, 0x31));
                    const __m256 dy = _mm256_set_ps(X[7].d[b], X[6].d[b], X[5].d[b], X[4].d[b],
                                                    X[3].d[b], X[2].d[b], X[1].d[b], X[0].d[b]);
                    acc8 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(_mm256_set1_ps(dw), dy), acc8);
                    continue;
                }
                for (int i = 0; i < nt; i++) {
                    const __m256i y = _mm256_loadu_si256((const __m256i *)(X[i].q + 32 * b));
                    const __m256i p = PYL_DOT4(aw, _mm256_sign_epi8(y, w), ones);
                    const __m128i h = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
                    const __m128i h2 = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
                    const int I = _mm_cvtsi128_si32(_mm_add_epi32(h2, _mm_shuffle_epi32(h2, 1)));
                    acc[i] = fmaf((float)I, dw * X[i].d[b], acc[i]);
                }
#else
                int8_t w[32];
                float dd, mm;
                switch (t) {
                case PYL_Q4_0: pyl_dec_q4_0(x, w, &dd, &mm); break;
                case PYL_IQ4_NL: pyl_dec_lut4(x + 2, pyl_kvalues_iq4nl, w); break;
                default: pyl_dec_lut4(x + 1, pyl_kvalues_fp4, w); break;
                }
                for (int i = 0; i < nt; i++) {
                    int I = 0;
                    for (int j = 0; j < 32; j++) I += w[j] * X[i].q[32 * b + j];
                    acc[i] = fmaf((float)I, dw * X[i].d[b], acc[i]);
                }
#endif
            }
#if PYL_AVX2
            if (nt == G) _mm256_storeu_ps(acc, acc8);
#endif
            for (int i = 0; i < nt; i++) out[(t0 + i) * os + r0 + r] = acc[i];
        }
    }
}

/* ---- TQ1_0 / TQ2_0: ggml_vec_dot_tq*_q8_K (AVX2), llama.cpp's only TQ kernel: per super-block
 * lane l = sum over the 32-element chunks of trit * q8 on elements 4l..4l+3, minus bsums[2l] +
 * bsums[2l+1]; acc8 = fma((float)lane, d8 * d, acc8); hsum8 */
static void pyl_rowtile_tq(int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nr, int k,
                           const pyl_acts *A, int64_t n, float *out, int64_t os) {
    const int bb = pyl_block_bytes(t), nsb = k / 256;
    uint8_t u[256] __attribute__((aligned(32)));
    int16_t s16[16], mn[16];
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = wsrc + (r0 + r) * wstride;
        enum { G = 8 };
        for (int64_t t0 = 0; t0 < n; t0 += G) {
            const int nt = n - t0 < G ? (int)(n - t0) : G;
            pyl_arow X[G];
#if PYL_AVX2
            __m256 acc[G];
            for (int i = 0; i < nt; i++) { X[i] = pyl_act_row(A, t0 + i); acc[i] = _mm256_setzero_ps(); }
#else
            float acc[G][8];
            for (int i = 0; i < nt; i++) { X[i] = pyl_act_row(A, t0 + i); for (int l = 0; l < 8; l++) acc[i][l] = 0.0f; }
#endif
            for (int b = 0; b < nsb; b++) {
                float d, dm;
                pyl_dec_iq(t, row + (int64_t)bb * b, u, s16, mn, &d, &dm);
                for (int i = 0; i < nt; i++) {
                    const int8_t *y = X[i].q + 256 * b;
                    const int16_t *bs = X[i].bs + 16 * b;
                    const float dd = X[i].d[b] * d;
#if PYL_AVX2
                    const __m256i ones = _mm256_set1_epi16(1);
                    __m256i lanes = _mm256_sub_epi32(_mm256_setzero_si256(),
                        _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)bs), ones));
                    for (int c = 0; c < 8; c++)
                        lanes = _mm256_add_epi32(lanes, _mm256_madd_epi16(_mm256_maddubs_epi16(
                            _mm256_load_si256((const __m256i *)(u + 32 * c)),
                            _mm256_loadu_si256((const __m256i *)(y + 32 * c))), ones));
                    acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lanes), _mm256_set1_ps(dd), acc[i]);
#else
                    for (int l = 0; l < 8; l++) {
                        int L = -(bs[2 * l] + bs[2 * l + 1]);
                        for (int c = 0; c < 8; c++)
                            for (int e = 4 * l; e < 4 * l + 4; e++) L += u[32 * c + e] * y[32 * c + e];
                        acc[i][l] = fmaf((float)L, dd, acc[i][l]);
                    }
#endif
                }
            }
            for (int i = 0; i < nt; i++) {
#if PYL_AVX2
                out[(t0 + i) * os + r0 + r] = pyl_hsum8(acc[i]);
#else
                const float *a = acc[i];
                out[(t0 + i) * os + r0 + r] = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
#endif
            }
        }
    }
}

/* ---- weight type | PYL_V2: see PYL_V2 */
static void pyl_rowtile_v2(int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nr, int k,
                           const pyl_acts *A, int64_t n, float *out, int64_t os) {
    const int bb = pyl_block_bytes(t), nb = k / 32;
    for (int r = 0; r < nr; r++) {
        const uint8_t *row = wsrc + (r0 + r) * wstride;
        for (int64_t i = 0; i < n; i++) {
            const pyl_arow X = pyl_act_row(A, i);
            float sum;
            int b = 0;
#if PYL_AVX2
            const __m256i ones = _mm256_set1_epi16(1);
            __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
            for (; b + 1 < nb; b += 2)
                for (int h = 0; h < 2; h++) {
                    const uint8_t *x = row + (int64_t)bb * (b + h);
                    const __m256i w = pyl_dec32_avx2(t, x);
                    const __m256i y = _mm256_loadu_si256((const __m256i *)(X.q + 32 * (b + h)));
                    const __m256i p = PYL_DOT4(_mm256_abs_epi8(w), _mm256_sign_epi8(y, w), ones);
                    acc[h] = _mm256_fmadd_ps(_mm256_set1_ps(X.d[b + h] * *pyl_scaleA_ref(t, x)),
                                             _mm256_cvtepi32_ps(p), acc[h]);
                }
            sum = pyl_hsum8(_mm256_add_ps(acc[0], acc[1]));
#else
            sum = 0.0f;
            b = nb & ~1;
            {
                float l[2][8] = {{0}};
                for (int bp = 0; bp < b; bp++) {
                    const uint8_t *x = row + (int64_t)bb * bp;
                    int8_t w[32];
                    pyl_dec_lut4(x + (t == PYL_MXFP4 ? 1 : 2), t == PYL_MXFP4 ? pyl_kvalues_fp4 : pyl_kvalues_iq4nl, w);
                    const float dd = X.d[bp] * *pyl_scaleA_ref(t, x);
                    for (int j = 0; j < 8; j++) {
                        int I = 0;
                        for (int e = 4 * j; e < 4 * j + 4; e++) I += w[e] * X.q[32 * bp + e];
                        l[bp & 1][j] = fmaf(dd, (float)I, l[bp & 1][j]);
                    }
                }
                float a[8];
                for (int j = 0; j < 8; j++) a[j] = l[0][j] + l[1][j];
                sum = ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
            }
#endif
            for (; b < nb; b++) {
                const uint8_t *x = row + (int64_t)bb * b;
                int8_t w[32];
                pyl_dec_lut4(x + (t == PYL_MXFP4 ? 1 : 2), t == PYL_MXFP4 ? pyl_kvalues_fp4 : pyl_kvalues_iq4nl, w);
                int I = 0;
                for (int e = 0; e < 32; e++) I += w[e] * X.q[32 * b + e];
                sum = fmaf(X.d[b] * *pyl_scaleA_ref(t, x), (float)I, sum);
            }
            out[i * os + r0 + r] = sum;
        }
    }
}

#ifndef PYL_HAVE_RP   /* no repacked kernels in this build: matmul.py never asks for them */
#define PYL_HAVE_RP 0
static void pyl_r8_repack(int t, const uint8_t *src, int64_t rows, int64_t rb, uint8_t *dst) {
    (void)t; memcpy(dst, src, (size_t)(rows * rb));
}
#endif

/* ---------------------------------------------------------------- one row tile ----------- */
/* weight rows per tile for kernel type t and n activation rows: 8 for the repacked types'
 * 8-row gemm (AVX2 without VNNI, from PYL_R8_GEMM_MIN tokens), else PYL_R.  Which rows share a
 * tile never changes a result. */
static inline int pyl_tile_rows(int t, int64_t n) {
#if PYL_AVX2 && !PYL_VNNI
    if (t & PYL_RP) return 8;
    if (((t & PYL_R8) || t == PYL_IQ4_XS) && n >= PYL_R8_GEMM_MIN) return 8;
    if (t == PYL_Q8_0 && n > PYL_DIRECT_MAX_A) return 8;
#endif
    (void)t; (void)n;
    return PYL_R;
}
/* per-thread scratch bytes for rows of length k */
static inline int64_t pyl_scratch_bytes(int k) {
    const int64_t a = PYL_R * PYL_ROWB(k), b = (int64_t)(k / 32) * 544 + (int64_t)(k / 256) * 32 + 64;
    return a > b ? a : b;
}
/* rows r0..r0+nr of W (row stride wstride bytes) times all n activation rows; out[t, r] with
 * row stride os; nr <= pyl_tile_rows(t, n).  scratch: pyl_scratch_bytes(k) bytes, private to
 * the calling thread. */
static inline void pyl_rowtile(int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nr,
                               int k, const pyl_acts *A, int64_t n, uint8_t *scratch,
                               float *out, int64_t os) {
    pyl_wrow W[PYL_R];
    pyl_arow X[PYL_T > PYL_DIRECT_MAX_A ? PYL_T : PYL_DIRECT_MAX_A];
    pyl_full_fn full[PYL_T];
    pyl_part_fn part;
#if PYL_AVX2 && !PYL_VNNI
    if (t & PYL_RP) {   /* nr == 8: rows % 8 == 0 and pyl_tile_rows */
        switch (t & 255) {
        case PYL_Q4_0: pyl_rp_tile(PYL_Q4_0, wsrc, wstride, r0, k / 32, A, n, scratch, out, os); break;
        case PYL_IQ4_NL: pyl_rp_tile(PYL_IQ4_NL, wsrc, wstride, r0, k / 32, A, n, scratch, out, os); break;
        default: pyl_rp_tile(PYL_MXFP4, wsrc, wstride, r0, k / 32, A, n, scratch, out, os); break;
        }
        return;
    }
#endif
    if (t & PYL_R8) { pyl_rowtile_r8(t & 255, wsrc, wstride, r0, nr, k, A, n, scratch, out, os); return; }
    if (t & PYL_V2) { pyl_rowtile_v2(t & 255, wsrc, wstride, r0, nr, k, A, n, out, os); return; }
    if (t == PYL_TQ1_0 || t == PYL_TQ2_0) { pyl_rowtile_tq(t, wsrc, wstride, r0, nr, k, A, n, out, os); return; }
#if PYL_AVX2 && !PYL_VNNI
    if (t == PYL_IQ4_XS && nr == 8 && n >= PYL_R8_GEMM_MIN) {   /* an 8-row tile (pyl_tile_rows) */
        pyl_xs_gemm8(wsrc, wstride, r0, k / 256, A, n, scratch, out, os);
        return;
    }
    if (t == PYL_Q8_0 && nr == 8 && n > PYL_DIRECT_MAX_A) {
        pyl_q8_gemm8(wsrc, wstride, r0, k / 32, A, n, scratch, out, os);
        return;
    }
#endif
    if (nr > PYL_R) {   /* the last tile of an 8-row tiling: 4 rows at a time */
        pyl_rowtile(t, wsrc, wstride, r0, PYL_R, k, A, n, scratch, out, os);
        pyl_rowtile(t, wsrc, wstride, r0 + PYL_R, nr - PYL_R, k, A, n, scratch, out, os);
        return;
    }
    const int fam = pyl_family(t);
#if PYL_AVX2
    if (fam != 2 && n <= (fam == 0 ? PYL_DIRECT_MAX_A : PYL_DIRECT_MAX_K)) {
        for (int i = 0; i < n; i++) X[i] = pyl_act_row(A, i);
        pyl_direct_for(t)(wsrc + r0 * wstride, wstride, nr, fam == 0 ? k / 32 : k / 256, X, (int)n,
                          out + r0, os);
        return;
    }
#endif
    pyl_tile_fns(t, full, &part);
    for (int r = 0; r < nr; r++) {
        pyl_wrow_init(&W[r], scratch + (int64_t)r * PYL_ROWB(k), k);
        pyl_decode(t, wsrc + (r0 + r) * wstride, k, &W[r]);
    }
    const int nb = fam == 0 ? k / 32 : fam == 1 ? k / 256 : k;
    const int wide = PYL_AVX512 && fam == 0 && !pyl_has_m(t) && nr == PYL_R;
    const int T = fam == 0 ? (wide ? 4 : PYL_TA) : PYL_T;
    for (int64_t t0 = 0; t0 < n; t0 += T) {
        const int nt = n - t0 < T ? (int)(n - t0) : T;
        for (int i = 0; i < nt; i++) X[i] = pyl_act_row(A, t0 + i);
        float *o = out + t0 * os + r0;
#if PYL_AVX512
        if (wide && nt == 4) { pyl_tileA_4x4_512(nb, W, X, o, os); continue; }
#endif
        if (nr == PYL_R && nt == 2 && fam == 0 && !pyl_has_m(t)) pyl_tileA_4x2_fn(nb, W, X, o, os);
        else if (nr == PYL_R) full[nt - 1](nb, W, X, o, os);
        else part(nr, nt, nb, W, X, o, os);
    }
}

#endif
