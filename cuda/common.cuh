// Shared device helpers: ggml block layouts and their dequantization to f32, warp reductions.
//
// Dequantization follows ggml's dequantize_row_* (ggml-quants.c) value for value: every product
// and difference is rounded separately (__fmul_rn / __fsub_rn on the device), so no fused
// multiply-add changes a weight, and the result equals the numpy reference bit for bit.
//
// A weight row is read in "chunks" of 32 consecutive elements: one q8_0/q5_0/q4_0 block, one
// 32-element sub-block of a Q4_K / Q6_K super-block, or 32 F32/F16 values. pyl_dequant_chunk<TYPE>
// writes chunk c of a row into w[32] (elements past `cols` as 0 for F32/F16 rows).
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

// ggml type ids (ggml.h enum ggml_type)
#define PYL_F32 0
#define PYL_F16 1
#define PYL_Q5_0 6
#define PYL_Q8_0 8
#define PYL_Q4_K 12
#define PYL_Q6_K 14

#define PYL_WARP 32

// The dequantizers are __host__ __device__ so tests can check them bit for bit on a machine
// without a GPU (tests/cuda/test_dequant_host.py). On the device the roundings are explicit
// intrinsics; the host build must use -ffp-contract=off for the same arithmetic.
#define PYL_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define PYL_MUL(a, b) __fmul_rn((a), (b))
#define PYL_SUB(a, b) __fsub_rn((a), (b))
#define PYL_ADD(a, b) __fadd_rn((a), (b))
#else
#define PYL_MUL(a, b) ((a) * (b))
#define PYL_SUB(a, b) ((a) - (b))
#define PYL_ADD(a, b) ((a) + (b))
#endif

PYL_HD float pyl_half(const uint8_t *p) {
    // an f16 at any 2-byte-aligned or unaligned address (q8_0 blocks are 34 bytes)
    const uint16_t bits = (uint16_t)p[0] | ((uint16_t)p[1] << 8);
    return __half2float(__ushort_as_half(bits));
}

__device__ __forceinline__ float pyl_warp_sum(float v) {
    // butterfly: every lane ends with the same, fixed-order sum
    for (int off = PYL_WARP / 2; off > 0; off >>= 1) {
        v += __shfl_xor_sync(0xffffffffu, v, off);
    }
    return v;
}

__device__ __forceinline__ float pyl_warp_max(float v) {
    for (int off = PYL_WARP / 2; off > 0; off >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    }
    return v;
}

// ---- per-type chunk dequantization --------------------------------------------------------

PYL_HD void pyl_dq_f32(const uint8_t *row, int c, int cols, float *w) {
    const float *r = (const float *)row;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const int i = c * 32 + k;
        w[k] = i < cols ? r[i] : 0.0f;
    }
}

PYL_HD void pyl_dq_f16(const uint8_t *row, int c, int cols, float *w) {
    const __half *r = (const __half *)row;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        const int i = c * 32 + k;
        w[k] = i < cols ? __half2float(r[i]) : 0.0f;
    }
}

// block_q8_0 {f16 d; int8 qs[32]} = 34 bytes; y = qs * d
PYL_HD void pyl_dq_q8_0(const uint8_t *row, int c, float *w) {
    const uint8_t *b = row + (size_t)c * 34;
    const float d = pyl_half(b);
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        w[k] = PYL_MUL((float)(int8_t)b[2 + k], d);
    }
}

// block_q5_0 {f16 d; uint8 qh[4]; uint8 qs[16]} = 22 bytes; y = (q - 16) * d
PYL_HD void pyl_dq_q5_0(const uint8_t *row, int c, float *w) {
    const uint8_t *b = row + (size_t)c * 22;
    const float d = pyl_half(b);
    const uint32_t qh = (uint32_t)b[2] | ((uint32_t)b[3] << 8) | ((uint32_t)b[4] << 16) |
                        ((uint32_t)b[5] << 24);
    const uint8_t *qs = b + 6;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
        const int x0 = (qs[j] & 0x0F) | (((qh >> j) & 1u) << 4);
        const int x1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4);
        w[j] = PYL_MUL((float)(x0 - 16), d);
        w[j + 16] = PYL_MUL((float)(x1 - 16), d);
    }
}

// block_q4_K {f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128]} = 144 bytes, 8 sub-blocks of 32
PYL_HD void pyl_scale_min_k4(int j, const uint8_t *q, int *sc, int *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

PYL_HD void pyl_dq_q4_K(const uint8_t *row, int c, float *w) {
    const uint8_t *b = row + (size_t)(c >> 3) * 144;
    const int j = c & 7;
    int sc, m;
    pyl_scale_min_k4(j, b + 4, &sc, &m);
    const float d1 = PYL_MUL(pyl_half(b), (float)sc);
    const float m1 = PYL_MUL(pyl_half(b + 2), (float)m);
    const uint8_t *q = b + 16 + (j >> 1) * 32;
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        w[l] = PYL_SUB(PYL_MUL(d1, (float)((q[l] >> shift) & 0xF)), m1);
    }
}

// block_q6_K {uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d} = 210 bytes
PYL_HD void pyl_dq_q6_K(const uint8_t *row, int c, float *w) {
    const uint8_t *b = row + (size_t)(c >> 3) * 210;
    const int sub = c & 7, n = sub >> 2, qq = sub & 3;
    const float d = pyl_half(b + 208);
    const uint8_t *ql = b + n * 64 + (qq & 1) * 32;
    const uint8_t *qh = b + 128 + n * 32;
    const int8_t *sc = (const int8_t *)(b + 192) + n * 8 + qq * 2;
    const int lshift = (qq >> 1) * 4, hshift = qq * 2;
#pragma unroll
    for (int l = 0; l < 32; ++l) {
        const int q = (((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4)) - 32;
        w[l] = PYL_MUL(PYL_MUL(d, (float)sc[l >> 4]), (float)q);
    }
}

template <int TYPE>
PYL_HD void pyl_dequant_chunk(const uint8_t *row, int c, int cols, float *w) {
    if (TYPE == PYL_F32) {
        pyl_dq_f32(row, c, cols, w);
    } else if (TYPE == PYL_F16) {
        pyl_dq_f16(row, c, cols, w);
    } else if (TYPE == PYL_Q8_0) {
        pyl_dq_q8_0(row, c, w);
    } else if (TYPE == PYL_Q5_0) {
        pyl_dq_q5_0(row, c, w);
    } else if (TYPE == PYL_Q4_K) {
        pyl_dq_q4_K(row, c, w);
    } else {
        pyl_dq_q6_K(row, c, w);
    }
}
