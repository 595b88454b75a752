// Host build of cuda/common.cuh's dequantizers for tests/cuda/test_dequant_host.py (no GPU):
//   nvcc -shared -Xcompiler -fPIC,-ffp-contract=off -I cuda -o libdq.so dequant_host.cu
#include "common.cuh"

template <int TYPE>
static void row(const uint8_t *w, long long row_bytes, int rows, int cols, float *out) {
    for (int r = 0; r < rows; ++r) {
        for (int c = 0; c * 32 < cols; ++c) {
            float v[32];
            pyl_dequant_chunk<TYPE>(w + (size_t)r * row_bytes, c, cols, v);
            for (int k = 0; k < 32 && c * 32 + k < cols; ++k) {
                out[(size_t)r * cols + c * 32 + k] = v[k];
            }
        }
    }
}

// returns 0, or -1 for a type without a dequantizer
extern "C" int pyl_dequant_rows(int type, const uint8_t *w, long long row_bytes, int rows,
                                int cols, float *out) {
    switch (type) {
    case PYL_F32: row<PYL_F32>(w, row_bytes, rows, cols, out); return 0;
    case PYL_F16: row<PYL_F16>(w, row_bytes, rows, cols, out); return 0;
    case PYL_Q8_0: row<PYL_Q8_0>(w, row_bytes, rows, cols, out); return 0;
    case PYL_Q5_0: row<PYL_Q5_0>(w, row_bytes, rows, cols, out); return 0;
    case PYL_Q4_K: row<PYL_Q4_K>(w, row_bytes, rows, cols, out); return 0;
    case PYL_Q6_K: row<PYL_Q6_K>(w, row_bytes, rows, cols, out); return 0;
    default: return -1;
    }
}
