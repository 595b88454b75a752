// Host run of cuda/matmul.cu's arithmetic for tests/cuda/test_matmul_host.py (no GPU): each
// lane's partial sums come from the kernel's own pyl_mm_lane, and the warp's butterfly
// (v += shfl_xor(v, off), off = 16 .. 1) is replayed lane by lane, so y is what mm_<type> writes.
//   nvcc -shared -Xcompiler -fPIC,-ffp-contract=off -I cuda -o libmm.so matmul_host.cu
#include "matmul.cu"

template <int TYPE>
static void host_mm(const uint8_t *W, long long row_bytes, int rows, int cols, const float *x,
                    int n, float *y) {
    for (int r = 0; r < rows; ++r) {
        for (int t0 = 0; t0 < n; t0 += MM_TILE) {
            float v[PYL_WARP][MM_TILE], nv[PYL_WARP][MM_TILE];
            for (int lane = 0; lane < PYL_WARP; ++lane) {
                pyl_mm_lane<TYPE>(W + (size_t)r * row_bytes, cols, x, n, t0, lane, v[lane]);
            }
            for (int off = PYL_WARP / 2; off > 0; off >>= 1) {
                for (int lane = 0; lane < PYL_WARP; ++lane) {
                    for (int t = 0; t < MM_TILE; ++t) {
                        nv[lane][t] = v[lane][t] + v[lane ^ off][t];
                    }
                }
                for (int lane = 0; lane < PYL_WARP; ++lane) {
                    for (int t = 0; t < MM_TILE; ++t) {
                        v[lane][t] = nv[lane][t];
                    }
                }
            }
            for (int t = 0; t < MM_TILE && t0 + t < n; ++t) {
                y[(size_t)(t0 + t) * rows + r] = v[0][t];
            }
        }
    }
}

extern "C" int pyl_host_mm(int type, const uint8_t *W, long long row_bytes, int rows, int cols,
                           const float *x, int n, float *y) {
    switch (type) {
    case PYL_F32: host_mm<PYL_F32>(W, row_bytes, rows, cols, x, n, y); return 0;
    case PYL_F16: host_mm<PYL_F16>(W, row_bytes, rows, cols, x, n, y); return 0;
    case PYL_Q8_0: host_mm<PYL_Q8_0>(W, row_bytes, rows, cols, x, n, y); return 0;
    case PYL_Q5_0: host_mm<PYL_Q5_0>(W, row_bytes, rows, cols, x, n, y); return 0;
    case PYL_Q4_K: host_mm<PYL_Q4_K>(W, row_bytes, rows, cols, x, n, y); return 0;
    case PYL_Q6_K: host_mm<PYL_Q6_K>(W, row_bytes, rows, cols, x, n, y); return 0;
    default: return -1;
    }
}
