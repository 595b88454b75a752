// Host build of cuda/ops.cu's per-item formulas for tests/cuda/test_ops_host.py (no GPU):
//   nvcc -shared -Xcompiler -fPIC,-ffp-contract=off -I cuda -o libops.so ops_host.cu
#include "ops.cu"

extern "C" void pyl_host_rope(const float *x, const int *pos, int n, int n_head, int hd,
                              int n_rot, float theta_scale, float freq_scale, int neox,
                              float *y) {
    const long long items = (long long)n * n_head * (n_rot / 2 + hd - n_rot);
    for (long long idx = 0; idx < items; ++idx) {
        pyl_rope_one(x, pos, n_head, hd, n_rot, theta_scale, freq_scale, neox, idx, y);
    }
}

// kind: 0 gelu, 1 silu, 2 softcap (a = 1/cap, b = cap), 3 geglu(x, g), 4 swiglu(x, g)
extern "C" void pyl_host_unary(int kind, const float *x, const float *g, long long n, float a,
                               float b, float *y) {
    for (long long i = 0; i < n; ++i) {
        switch (kind) {
        case 0: y[i] = pyl_gelu(x[i]); break;
        case 1: y[i] = pyl_silu(x[i]); break;
        case 2: y[i] = pyl_softcap(x[i], a, b); break;
        case 3: y[i] = PYL_MUL(pyl_gelu(x[i]), g[i]); break;
        default: y[i] = PYL_MUL(pyl_silu(x[i]), g[i]); break;
        }
    }
}

extern "C" void pyl_host_q8_0(const float *x, long long n_blocks, uint8_t *out) {
    for (long long i = 0; i < n_blocks; ++i) {
        pyl_q8_0_block(x + i * 32, out + i * 34);
    }
}
