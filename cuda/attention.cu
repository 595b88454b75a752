// Attention over position-ordered K/V cache rows (pyllama.backend.base.Backend.attention).
//
// q [n_q, n_head, d] f32; K/V caches [n_cells, n_kv * d] (f16 or f32); kv_cells int32 [L];
// query i reads exactly the cells kv_cells[q_start[i] : q_end[i]] and nothing else.
// s = scale * q.k, optionally softcap * tanh(s / softcap); softmax over the listed cells.
//
// One block per (query, head) pair, ATT_WARPS warps. Warp w takes list entries w, w + ATT_WARPS,
// ... in list (position) order and keeps an online softmax state (max m, sum l, acc[d]); lanes
// split the head dimension (dims lane + 32 j, j < PER, so any d <= 32 PER: instances for
// PER = 1, 2, 4, 8 cover head sizes up to 256, e.g. 64, 128, 256), q.k is summed by a fixed
// butterfly. The warp
// states are merged in warp order. The arithmetic for a query depends only on its own list, so
// results do not depend on how many queries the launch holds (decode and prefill are the same
// kernel: a decode step is a launch with n_q = 1).
#include "common.cuh"

#define ATT_WARPS 4

template <typename KT>
__device__ __forceinline__ float pyl_ld(const KT *p);
template <>
__device__ __forceinline__ float pyl_ld<float>(const float *p) {
    return *p;
}
template <>
__device__ __forceinline__ float pyl_ld<__half>(const __half *p) {
    return __half2float(*p);
}

template <int PER, typename KT>
__device__ __forceinline__ void attn_impl(const float *__restrict__ q, const KT *__restrict__ kc,
                                          const KT *__restrict__ vc, int d, int n_head, int n_kv,
                                          const int *__restrict__ cells,
                                          const long long *__restrict__ q_start,
                                          const long long *__restrict__ q_end, float scale,
                                          float softcap, float *__restrict__ out) {
    __shared__ float sm_m[ATT_WARPS], sm_l[ATT_WARPS];
    __shared__ float sm_acc[ATT_WARPS][PER * PYL_WARP];
    const int h = blockIdx.x, i = blockIdx.y;
    const int warp = threadIdx.x / PYL_WARP, lane = threadIdx.x % PYL_WARP;
    const int kh = h / (n_head / n_kv);
    const size_t row = (size_t)n_kv * d;
    const float *qr = q + ((size_t)i * n_head + h) * d;
    float qv[PER], acc[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int dim = lane + PYL_WARP * j;
        qv[j] = dim < d ? qr[dim] : 0.0f;
        acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    const long long e = q_end[i];
    for (long long p = q_start[i] + warp; p < e; p += ATT_WARPS) {
        const size_t base = (size_t)cells[p] * row + (size_t)kh * d;
        float dot = 0.0f;
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int dim = lane + PYL_WARP * j;
            if (dim < d) {
                dot = fmaf(qv[j], pyl_ld<KT>(kc + base + dim), dot);
            }
        }
        float s = __fmul_rn(scale, pyl_warp_sum(dot));
        if (softcap > 0.0f) {
            s = __fmul_rn(softcap, tanhf(__fdiv_rn(s, softcap)));
        }
        const float m_new = fmaxf(m, s);
        const float corr = expf(m - m_new);
        const float pr = expf(s - m_new);
        l = fmaf(l, corr, pr);
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int dim = lane + PYL_WARP * j;
            if (dim < d) {
                acc[j] = fmaf(acc[j], corr, __fmul_rn(pr, pyl_ld<KT>(vc + base + dim)));
            }
        }
        m = m_new;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        sm_acc[warp][lane + PYL_WARP * j] = acc[j];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < ATT_WARPS; ++w) {
        M = fmaxf(M, sm_m[w]);
    }
    float L = 0.0f;
    float f[ATT_WARPS];
    for (int w = 0; w < ATT_WARPS; ++w) {
        f[w] = sm_l[w] > 0.0f ? expf(sm_m[w] - M) : 0.0f;
        L = fmaf(sm_l[w], f[w], L);
    }
    float *o = out + ((size_t)i * n_head + h) * d;
    for (int dim = threadIdx.x; dim < d; dim += ATT_WARPS * PYL_WARP) {
        float a = 0.0f;
        for (int w = 0; w < ATT_WARPS; ++w) {
            a = fmaf(sm_acc[w][dim], f[w], a);
        }
        o[dim] = L > 0.0f ? a / L : 0.0f;
    }
}

#define PYL_ATT_ENTRY(NAME, PER, KT)                                                          \
    extern "C" __global__ void __launch_bounds__(ATT_WARPS * PYL_WARP)                        \
        attn_##NAME(const float *q, const KT *kc, const KT *vc, int d, int n_head, int n_kv,  \
                    const int *cells, const long long *q_start, const long long *q_end,       \
                    float scale, float softcap, float *out) {                                 \
        attn_impl<PER, KT>(q, kc, vc, d, n_head, n_kv, cells, q_start, q_end, scale, softcap, \
                           out);                                                              \
    }

PYL_ATT_ENTRY(p1_f16, 1, __half)
PYL_ATT_ENTRY(p2_f16, 2, __half)
PYL_ATT_ENTRY(p4_f16, 4, __half)
PYL_ATT_ENTRY(p8_f16, 8, __half)
PYL_ATT_ENTRY(p1_f32, 1, float)
PYL_ATT_ENTRY(p2_f32, 2, float)
PYL_ATT_ENTRY(p4_f32, 4, float)
PYL_ATT_ENTRY(p8_f32, 8, float)
