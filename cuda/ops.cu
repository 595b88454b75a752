// Normalisation, RoPE, elementwise ops, KV row writes, row copies and argmax.
//
// Numerics mirror pyllama.backend.ref (ggml's CPU formulas): every f32 product/sum is rounded
// on its own (__fmul_rn etc., no contraction), and the transcendental parts are evaluated in
// double and rounded once, so results agree with the numpy oracle to the last bit or one ulp.
// Reductions (rms_norm, argmax) use one block per row and a fixed tree. The per-item formulas
// (pyl_rope_one, pyl_gelu, pyl_silu, pyl_softcap, pyl_q8_0_block) are __host__ __device__ and
// checked against the numpy reference on the host by tests/cuda/test_ops_host.py.
#include "common.cuh"

#define OPS_THREADS 256

// ---- rms_norm: y = x * (1 / sqrt(mean(x^2) + eps)) [* w] ------------------------------------
extern "C" __global__ void __launch_bounds__(OPS_THREADS)
    rms_norm_f32(const float *__restrict__ x, const float *__restrict__ w, float eps, int d,
                 float *__restrict__ y) {
    __shared__ double part[OPS_THREADS];
    const float *xr = x + (size_t)blockIdx.x * d;
    float *yr = y + (size_t)blockIdx.x * d;
    double s = 0.0;
    for (int i = threadIdx.x; i < d; i += OPS_THREADS) {
        s += (double)__fmul_rn(xr[i], xr[i]);
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int h = OPS_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) {
            part[threadIdx.x] += part[threadIdx.x + h];
        }
        __syncthreads();
    }
    const float mean = (float)(part[0] / (double)d);
    const float scale = 1.0f / sqrtf(__fadd_rn(mean, eps));
    for (int i = threadIdx.x; i < d; i += OPS_THREADS) {
        const float v = __fmul_rn(xr[i], scale);
        yr[i] = w ? __fmul_rn(v, w[i]) : v;
    }
}

// ---- rope ------------------------------------------------------------------------------------
// x, y [n, n_head, hd]; pos [n]; one thread per (token, head, dim pair or pass-through dim).
// theta follows ggml_rope_cache_init: (float)pos multiplied by theta_scale once per pair, in f32.
// pyl_rope_one does work item idx (also built for the host: tests/cuda/test_ops_host.py).
PYL_HD void pyl_rope_one(const float *x, const int *pos, int n_head, int hd, int n_rot,
                         float theta_scale, float freq_scale, int neox, long long idx, float *y) {
    const int half_rot = n_rot / 2;
    const int per_head = half_rot + (hd - n_rot);
    const int j = (int)(idx % per_head);
    const long long row = idx / per_head;           // token * n_head + head
    const float *xr = x + (size_t)row * hd;
    float *yr = y + (size_t)row * hd;
    if (j >= half_rot) {                            // dims past n_rot pass through
        const int k = n_rot + (j - half_rot);
        yr[k] = xr[k];
        return;
    }
    float theta = (float)pos[row / n_head];
    for (int i = 0; i < j; ++i) {
        theta = PYL_MUL(theta, theta_scale);
    }
    const double t = (double)PYL_MUL(freq_scale, theta);
    const float c = (float)cos(t), s = (float)sin(t);
    const int i0 = neox ? j : 2 * j;
    const int i1 = neox ? j + half_rot : 2 * j + 1;
    const float x0 = xr[i0], x1 = xr[i1];
    yr[i0] = PYL_SUB(PYL_MUL(x0, c), PYL_MUL(x1, s));
    yr[i1] = PYL_ADD(PYL_MUL(x0, s), PYL_MUL(x1, c));
}

extern "C" __global__ void rope_f32(const float *__restrict__ x, const int *__restrict__ pos,
                                    int n, int n_head, int hd, int n_rot, float theta_scale,
                                    float freq_scale, int neox, float *__restrict__ y) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < (long long)n * n_head * (n_rot / 2 + hd - n_rot)) {
        pyl_rope_one(x, pos, n_head, hd, n_rot, theta_scale, freq_scale, neox, idx, y);
    }
}

// ---- elementwise -----------------------------------------------------------------------------
// b is broadcast along the leading axes: b index = i % nb (nb == n when shapes match)
#define PYL_GRID_LOOP(i, n) \
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (long long)gridDim.x * blockDim.x)

extern "C" __global__ void add_f32(const float *a, const float *b, long long n, long long nb,
                                   float *y) {
    PYL_GRID_LOOP(i, n) { y[i] = __fadd_rn(a[i], b[i % nb]); }
}

extern "C" __global__ void mul_f32(const float *a, const float *b, long long n, long long nb,
                                   float *y) {
    PYL_GRID_LOOP(i, n) { y[i] = __fmul_rn(a[i], b[i % nb]); }
}

extern "C" __global__ void scale_f32(const float *a, float s, long long n, float *y) {
    PYL_GRID_LOOP(i, n) { y[i] = __fmul_rn(a[i], s); }
}

// tanh-GELU as llama.cpp's CPU path computes it (ggml's f16 GELU table): x rounded to f16,
// h / (1 + exp(-2u)) with u = sqrt(2/pi) h (1 + 0.044715 h^2) in double, the result rounded to
// f16; x >= 10 passes through, x <= -10 gives 0 (pyllama.backend.ref.RefBackend.gelu).
PYL_HD float pyl_gelu(float xf) {
    if (xf >= 10.0f) {
        return xf;
    }
    if (xf <= -10.0f) {
        return 0.0f;
    }
    const double h = (double)__half2float(__float2half_rn(xf));
    const double inner = (double)0.79788456080286535587989211986876f * h *
                         (1.0 + (double)0.044715f * h * h);
    const float t = (float)(h / (1.0 + exp(-2.0 * inner)));
    return __half2float(__float2half_rn(t));
}

PYL_HD float pyl_silu(float xf) {
    const double x = (double)xf;
    return (float)(x / (1.0 + exp(-x)));
}

extern "C" __global__ void gelu_f32(const float *a, long long n, float *y) {
    PYL_GRID_LOOP(i, n) { y[i] = pyl_gelu(a[i]); }
}

extern "C" __global__ void silu_f32(const float *a, long long n, float *y) {
    PYL_GRID_LOOP(i, n) { y[i] = pyl_silu(a[i]); }
}

extern "C" __global__ void geglu_f32(const float *g, const float *u, long long n, float *y) {
    PYL_GRID_LOOP(i, n) { y[i] = __fmul_rn(pyl_gelu(g[i]), u[i]); }
}

extern "C" __global__ void swiglu_f32(const float *g, const float *u, long long n, float *y) {
    PYL_GRID_LOOP(i, n) { y[i] = __fmul_rn(pyl_silu(g[i]), u[i]); }
}

// y = tanh(x * (1/cap)) * cap; inv_cap is the f32 reciprocal computed on the host
PYL_HD float pyl_softcap(float x, float inv_cap, float cap) {
    const float t = (float)tanh((double)PYL_MUL(x, inv_cap));
    return PYL_MUL(t, cap);
}

extern "C" __global__ void softcap_f32(const float *a, float inv_cap, float cap, long long n,
                                       float *y) {
    PYL_GRID_LOOP(i, n) { y[i] = pyl_softcap(a[i], inv_cap, cap); }
}

// ---- KV writes: cache[cells[i]] = rows[i] in the cache type ----------------------------------
extern "C" __global__ void set_rows_f16(__half *cache, int row, const int *cells,
                                        const float *rows, long long n) {
    PYL_GRID_LOOP(i, n) {
        const long long r = i / row, k = i % row;
        cache[(size_t)cells[r] * row + k] = __float2half_rn(rows[i]);
    }
}

extern "C" __global__ void set_rows_f32(float *cache, int row, const int *cells,
                                        const float *rows, long long n) {
    PYL_GRID_LOOP(i, n) {
        const long long r = i / row, k = i % row;
        cache[(size_t)cells[r] * row + k] = rows[i];
    }
}

// q8_0 as quantize_row_q8_0_ref: d = amax / 127, q = roundf(x / d); one thread per block of 32
PYL_HD void pyl_q8_0_block(const float *x, uint8_t *b) {
    float amax = 0.0f;
    for (int k = 0; k < 32; ++k) {
        amax = fmaxf(amax, fabsf(x[k]));
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const uint16_t dh = __half_as_ushort(__float2half_rn(d));
    b[0] = (uint8_t)(dh & 0xFF);
    b[1] = (uint8_t)(dh >> 8);
    for (int k = 0; k < 32; ++k) {
        b[2 + k] = (uint8_t)(int8_t)roundf(PYL_MUL(x[k], id));
    }
}

extern "C" __global__ void set_rows_q8_0(uint8_t *cache, int row, const int *cells,
                                         const float *rows, long long n_blocks) {
    const int bpr = row / 32;                      // blocks per row
    PYL_GRID_LOOP(i, n_blocks) {
        const long long r = i / bpr, blk = i % bpr;
        pyl_q8_0_block(rows + (size_t)r * row + (size_t)blk * 32,
                       cache + (size_t)cells[r] * (size_t)bpr * 34 + (size_t)blk * 34);
    }
}

// ---- row copies: dst[i] = src[idx[i]], rows of row_bytes bytes -------------------------------
extern "C" __global__ void copy_rows(const uint8_t *src, const int *idx, long long row_bytes,
                                     long long n_rows, uint8_t *dst) {
    PYL_GRID_LOOP(i, n_rows * row_bytes) {
        const long long r = i / row_bytes, k = i % row_bytes;
        dst[i] = src[(size_t)idx[r] * row_bytes + k];
    }
}

// ---- argmax per row (first index of the maximum; NaN never wins) ----------------------------
extern "C" __global__ void __launch_bounds__(OPS_THREADS)
    argmax_f32(const float *__restrict__ x, int m, int *__restrict__ out) {
    __shared__ float bv[OPS_THREADS];
    __shared__ int bi[OPS_THREADS];
    const float *xr = x + (size_t)blockIdx.x * m;
    float best = -INFINITY;
    int besti = -1;
    for (int i = threadIdx.x; i < m; i += OPS_THREADS) {
        if (xr[i] > best || besti < 0) {
            if (!(xr[i] != xr[i])) {
                best = xr[i];
                besti = i;
            }
        }
    }
    bv[threadIdx.x] = best;
    bi[threadIdx.x] = besti;
    __syncthreads();
    for (int h = OPS_THREADS / 2; h > 0; h >>= 1) {
        if ((int)threadIdx.x < h) {
            const float v = bv[threadIdx.x + h];
            const int j = bi[threadIdx.x + h];
            const int ci = bi[threadIdx.x];
            if (j >= 0 && (ci < 0 || v > bv[threadIdx.x] || (v == bv[threadIdx.x] && j < ci))) {
                bv[threadIdx.x] = v;
                bi[threadIdx.x] = j;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[blockIdx.x] = bi[0];
    }
}
