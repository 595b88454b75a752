// Weight x activation products and row gathers for F32, F16, Q8_0, Q5_0, Q4_K, Q6_K weights.
//
// y[n, rows] = x[n, cols] @ W[rows, cols]^T with W in its GGUF block layout (row_bytes per row).
// Method: dequantize-on-the-fly f32 dot (activations stay f32; no q8_1 activation quantization).
// One warp per weight row; lane l dequantizes chunks l, l+32, l+64, ... (32 elements each) and
// accumulates, for each token of its tile, w[k] * x[k] with fmaf in element order; the 32 lane
// sums are combined by a fixed butterfly. A token's result is therefore the same arithmetic
// whatever the number of tokens in the launch (no split-K, one kernel for decode and prefill):
// the tile only decides how many tokens share one dequantization of the weights.
#include "common.cuh"

#define MM_WARPS 4      // rows per block
#define MM_TILE 8       // tokens per block (weights dequantized once per tile)

// Lane `lane`'s partial sums for tokens t0 .. t0 + MM_TILE - 1 of one weight row wr: chunks
// lane, lane + 32, ... in order, w[k] * x[k] by fmaf in element order. __host__ __device__ so
// tests/cuda/test_matmul_host.py can run the exact arithmetic on the host.
template <int TYPE>
PYL_HD void pyl_mm_lane(const uint8_t *wr, int cols, const float *x, int n, int t0, int lane,
                        float *acc) {
    const int n_chunks = (cols + 31) / 32;
#pragma unroll
    for (int t = 0; t < MM_TILE; ++t) {
        acc[t] = 0.0f;
    }
    for (int c = lane; c < n_chunks; c += PYL_WARP) {
        float w[32];
        pyl_dequant_chunk<TYPE>(wr, c, cols, w);
        const int kmax = cols - c * 32 < 32 ? cols - c * 32 : 32;
#pragma unroll
        for (int t = 0; t < MM_TILE; ++t) {
            if (t0 + t < n) {
                const float *xr = x + (size_t)(t0 + t) * cols + (size_t)c * 32;
#pragma unroll
                for (int k = 0; k < 32; ++k) {
                    if (k < kmax) {
                        acc[t] = fmaf(w[k], xr[k], acc[t]);
                    }
                }
            }
        }
    }
}

template <int TYPE>
__device__ __forceinline__ void mm_impl(const uint8_t *__restrict__ W, long long row_bytes,
                                        int rows, int cols, const float *__restrict__ x, int n,
                                        float *__restrict__ y) {
    const int lane = threadIdx.x % PYL_WARP;
    const int r = blockIdx.x * MM_WARPS + threadIdx.x / PYL_WARP;
    if (r >= rows) {
        return;
    }
    const int t0 = blockIdx.y * MM_TILE;
    float acc[MM_TILE];
    pyl_mm_lane<TYPE>(W + (size_t)r * (size_t)row_bytes, cols, x, n, t0, lane, acc);
#pragma unroll
    for (int t = 0; t < MM_TILE; ++t) {
        const float v = pyl_warp_sum(acc[t]);
        if (lane == 0 && t0 + t < n) {
            y[(size_t)(t0 + t) * rows + r] = v;
        }
    }
}

// out[i, :] = dequantized W[ids[i], :]; one thread per 32-element chunk
template <int TYPE>
__device__ __forceinline__ void get_rows_impl(const uint8_t *__restrict__ W, long long row_bytes,
                                              int cols, const int *__restrict__ ids, int n,
                                              float *__restrict__ out) {
    const int i = blockIdx.y;
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || c * 32 >= cols) {
        return;
    }
    float w[32];
    pyl_dequant_chunk<TYPE>(W + (size_t)ids[i] * (size_t)row_bytes, c, cols, w);
    float *o = out + (size_t)i * cols + (size_t)c * 32;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        if (c * 32 + k < cols) {
            o[k] = w[k];
        }
    }
}

#define PYL_MM_ENTRY(NAME, TYPE)                                                             \
    extern "C" __global__ void __launch_bounds__(MM_WARPS * PYL_WARP)                       \
        mm_##NAME(const uint8_t *W, long long row_bytes, int rows, int cols, const float *x, \
                  int n, float *y) {                                                         \
        mm_impl<TYPE>(W, row_bytes, rows, cols, x, n, y);                                    \
    }                                                                                        \
    extern "C" __global__ void get_rows_##NAME(const uint8_t *W, long long row_bytes,        \
                                               int cols, const int *ids, int n, float *out) { \
        get_rows_impl<TYPE>(W, row_bytes, cols, ids, n, out);                                \
    }

PYL_MM_ENTRY(f32, PYL_F32)
PYL_MM_ENTRY(f16, PYL_F16)
PYL_MM_ENTRY(q8_0, PYL_Q8_0)
PYL_MM_ENTRY(q5_0, PYL_Q5_0)
PYL_MM_ENTRY(q4_K, PYL_Q4_K)
PYL_MM_ENTRY(q6_K, PYL_Q6_K)
