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
// results do not depend on how many queries the launch holds.
//
// Two kernels, the same arithmetic. attn_*: one block per (query, head), four warps each holding
// one of the four softmax states (decode: many blocks even for one query). attn_tiled_*
// (prefill): one block per (KV head, tile of queries); the tile's K/V rows are staged once in
// shared memory and read by all the group's heads and the tile's queries; each warp owns one
// (query, head) pair and holds the same four states itself (entry p of the query's list goes to
// state (p - q_start) % 4, exactly the warp that takes it in attn_*), updated in the same order
// with the same operations, and merged by the same formula. A query's output is bit-identical
// whichever kernel ran it (tests/cuda/test_cuda_ops.py checks it on a GPU).
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

// The online-softmax step both kernels use for one listed cell (state m, l, acc).
template <int PER>
__device__ __forceinline__ void pyl_att_step(float s, const float *vrow, int d, int lane,
                                             float &m, float &l, float *acc) {
    const float m_new = fmaxf(m, s);
    const float corr = expf(m - m_new);
    const float pr = expf(s - m_new);
    l = fmaf(l, corr, pr);
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int dim = lane + PYL_WARP * j;
        if (dim < d) {
            acc[j] = fmaf(acc[j], corr, __fmul_rn(pr, vrow[j]));
        }
    }
    m = m_new;
}

#define ATT_TILED_WARPS 8
#define ATT_SMEM_ROW_BYTES 16384       // per K (and per V) staging buffer

template <int PER, typename KT>
__device__ __forceinline__ void attn_tiled_impl(
    const float *__restrict__ q, const KT *__restrict__ kc, const KT *__restrict__ vc, int d,
    int n_head, int n_kv, int n_q, int tile_q, const int *__restrict__ cells,
    const long long *__restrict__ q_start, const long long *__restrict__ q_end, float scale,
    float softcap, float *__restrict__ out) {
    constexpr int W = PER * PYL_WARP;
    constexpr int CH = ATT_SMEM_ROW_BYTES / (W * (int)sizeof(KT));   // rows per stage
    __shared__ KT sk[CH][W];
    __shared__ KT sv[CH][W];
    __shared__ long long lo_hi[2];
    const int kh = blockIdx.x, i0 = blockIdx.y * tile_q;
    const int group = n_head / n_kv;
    const int warp = threadIdx.x / PYL_WARP, lane = threadIdx.x % PYL_WARP;
    const int qi = i0 + warp / group, h = kh * group + warp % group;
    const bool active = warp < tile_q * group && qi < n_q;
    const size_t row = (size_t)n_kv * d;
    if (threadIdx.x == 0) {
        long long lo = 0x7fffffffffffffffLL, hi = 0;
        for (int t = i0; t < min(n_q, i0 + tile_q); ++t) {
            if (q_end[t] > q_start[t]) {
                lo = min(lo, q_start[t]);
                hi = max(hi, q_end[t]);
            }
        }
        lo_hi[0] = lo;
        lo_hi[1] = hi;
    }
    float qv[PER], acc[4][PER], m[4], l[4];
    long long qs = 0, qe = 0;
    if (active) {
        qs = q_start[qi];
        qe = q_end[qi];
    }
    const float *qr = q + ((size_t)qi * n_head + h) * d;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int dim = lane + PYL_WARP * j;
        qv[j] = active && dim < d ? qr[dim] : 0.0f;
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            acc[w][j] = 0.0f;
        }
    }
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        m[w] = -INFINITY;
        l[w] = 0.0f;
    }
    __syncthreads();
    const long long lo = lo_hi[0], hi = lo_hi[1];
    for (long long base = lo; base < hi; base += CH) {
        const int rows = (int)min((long long)CH, hi - base);
        __syncthreads();                                  // previous stage consumed
        for (int e = threadIdx.x; e < rows * d; e += ATT_TILED_WARPS * PYL_WARP) {
            const int r = e / d, dim = e % d;
            const size_t src = (size_t)cells[base + r] * row + (size_t)kh * d + dim;
            sk[r][dim] = kc[src];
            sv[r][dim] = vc[src];
        }
        __syncthreads();
        if (!active) {
            continue;
        }
        const long long p0 = max(base, qs), p1 = min(base + rows, qe);
        for (long long p = p0; p < p1; ++p) {
            const int r = (int)(p - base);
            float dot = 0.0f, vrow[PER];
#pragma unroll
            for (int j = 0; j < PER; ++j) {
                const int dim = lane + PYL_WARP * j;
                if (dim < d) {
                    dot = fmaf(qv[j], pyl_ld<KT>(&sk[r][dim]), dot);
                }
                vrow[j] = dim < d ? pyl_ld<KT>(&sv[r][dim]) : 0.0f;
            }
            float s = __fmul_rn(scale, pyl_warp_sum(dot));
            if (softcap > 0.0f) {
                s = __fmul_rn(softcap, tanhf(__fdiv_rn(s, softcap)));
            }
            const int st = (int)((p - qs) & 3);
            // constant register indices: branch on the state instead of indexing arrays by it
            if (st == 0) {
                pyl_att_step<PER>(s, vrow, d, lane, m[0], l[0], acc[0]);
            } else if (st == 1) {
                pyl_att_step<PER>(s, vrow, d, lane, m[1], l[1], acc[1]);
            } else if (st == 2) {
                pyl_att_step<PER>(s, vrow, d, lane, m[2], l[2], acc[2]);
            } else {
                pyl_att_step<PER>(s, vrow, d, lane, m[3], l[3], acc[3]);
            }
        }
    }
    if (!active) {
        return;
    }
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        M = fmaxf(M, m[w]);
    }
    float L = 0.0f, f[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
        f[w] = l[w] > 0.0f ? expf(m[w] - M) : 0.0f;
        L = fmaf(l[w], f[w], L);
    }
    float *o = out + ((size_t)qi * n_head + h) * d;
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const int dim = lane + PYL_WARP * j;
        if (dim < d) {
            float a = 0.0f;
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                a = fmaf(acc[w][j], f[w], a);
            }
            o[dim] = L > 0.0f ? a / L : 0.0f;
        }
    }
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
        float vrow[PER];
#pragma unroll
        for (int j = 0; j < PER; ++j) {
            const int dim = lane + PYL_WARP * j;
            vrow[j] = dim < d ? pyl_ld<KT>(vc + base + dim) : 0.0f;
        }
        pyl_att_step<PER>(s, vrow, d, lane, m, l, acc);
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

#define PYL_ATT_TILED_ENTRY(NAME, PER, KT)                                                    \
    extern "C" __global__ void __launch_bounds__(ATT_TILED_WARPS * PYL_WARP)                    \
        attn_tiled_##NAME(const float *q, const KT *kc, const KT *vc, int d, int n_head,        \
                          int n_kv, int n_q, int tile_q, const int *cells,                      \
                          const long long *q_start, const long long *q_end, float scale,        \
                          float softcap, float *out) {                                          \
        attn_tiled_impl<PER, KT>(q, kc, vc, d, n_head, n_kv, n_q, tile_q, cells, q_start,       \
                                 q_end, scale, softcap, out);                                   \
    }

PYL_ATT_ENTRY(p1_f16, 1, __half)
PYL_ATT_ENTRY(p2_f16, 2, __half)
PYL_ATT_ENTRY(p4_f16, 4, __half)
PYL_ATT_ENTRY(p8_f16, 8, __half)
PYL_ATT_ENTRY(p1_f32, 1, float)
PYL_ATT_ENTRY(p2_f32, 2, float)
PYL_ATT_ENTRY(p4_f32, 4, float)
PYL_ATT_ENTRY(p8_f32, 8, float)

PYL_ATT_TILED_ENTRY(p1_f16, 1, __half)
PYL_ATT_TILED_ENTRY(p2_f16, 2, __half)
PYL_ATT_TILED_ENTRY(p4_f16, 4, __half)
PYL_ATT_TILED_ENTRY(p8_f16, 8, __half)
PYL_ATT_TILED_ENTRY(p1_f32, 1, float)
PYL_ATT_TILED_ENTRY(p2_f32, 2, float)
PYL_ATT_TILED_ENTRY(p4_f32, 4, float)
PYL_ATT_TILED_ENTRY(p8_f32, 8, float)
