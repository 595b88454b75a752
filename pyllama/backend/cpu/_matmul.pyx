# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Quantized mat-vec / mat-mat kernels (private: use pyllama.backend.cpu.matmul).

The SIMD tile kernels and block decoders live in pyl_matmul.h; this module quantizes the
activations (parallel over tokens) and runs row tiles in an OpenMP prange (threads split weight
rows, never a reduction).
"""
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int8_t, int16_t, int64_t, uint8_t

cdef extern from "omp_shim.h" nogil:
    int pyl_omp_max_threads()
    void pyl_omp_set_threads(int n)

cdef extern from "pyl_matmul.h" nogil:
    ctypedef struct pyl_acts:
        const int8_t *q
        const float *d
        const float *s
        const int16_t *bs
        const float *f
        int64_t sq, sd, sbs, sf
    int PYL_R
    int PYL_T
    int PYL_AVX2
    int PYL_ACT_Q8_0
    int PYL_ACT_Q8_K
    int PYL_ACT_F16
    int PYL_ACT_BF16
    int PYL_ACT_F32
    int pyl_family(int t)
    int pyl_act_kind(int t)
    int64_t PYL_ROWB(int k)
    void pyl_quant_q8_0(const float *x, int k, int8_t *q, float *d, float *s)
    void pyl_quant_q8_K(const float *x, int k, int8_t *q, float *d, int16_t *bs)
    float pyl_round_f16(float f)
    float pyl_round_bf16(float f)
    void pyl_rowtile(int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nr, int k,
                     const pyl_acts *A, int64_t n, uint8_t *scratch, float *out, int64_t os)
    void pyl_dequant_row(int t, const uint8_t *src, int k, uint8_t *scratch, float *y)

TILE_ROWS = PYL_R
TILE_TOKENS = PYL_T
HAVE_AVX2 = bool(PYL_AVX2)
ACT_Q8_0 = PYL_ACT_Q8_0
ACT_Q8_K = PYL_ACT_Q8_K
ACT_F16 = PYL_ACT_F16
ACT_BF16 = PYL_ACT_BF16
ACT_F32 = PYL_ACT_F32


def max_threads():
    return pyl_omp_max_threads()


def family(int wtype):
    """0: 32-blocks with q8_0/q8_1 activations, 1: K-quants (q8_K), 2: float, -1: unsupported."""
    return pyl_family(wtype)


def act_kind(int wtype):
    return pyl_act_kind(wtype)


def row_scratch_bytes(int k):
    """Bytes of decoded-row scratch one thread needs for a tile of rows of length k."""
    return PYL_R * PYL_ROWB(k)


cdef inline void _round_row(int kind, const float *x, float *f, int k) noexcept nogil:
    cdef int j
    if kind == PYL_ACT_F16:
        for j in range(k):
            f[j] = pyl_round_f16(x[j])
    elif kind == PYL_ACT_BF16:
        for j in range(k):
            f[j] = pyl_round_bf16(x[j])
    else:
        for j in range(k):
            f[j] = x[j]


cdef inline void _quant_row(int kind, const float *x, int k, int8_t *q, float *d, float *s,
                            int16_t *bs, float *f) noexcept nogil:
    if kind == PYL_ACT_Q8_0:
        pyl_quant_q8_0(x, k, q, d, s)
    elif kind == PYL_ACT_Q8_K:
        pyl_quant_q8_K(x, k, q, d, bs)
    else:
        _round_row(kind, x, f, k)


def quantize_acts(int kind, const float[:, ::1] x, int8_t[:, ::1] q, float[:, ::1] d,
                  float[:, ::1] s, int16_t[:, ::1] bs, float[:, ::1] f, int nth):
    """Quantize/round every row of x [n, k] into the activation kind's arrays (unused arrays
    may be 1x1 dummies): q8_0 -> q, d, s (q8_1 sums); q8_K -> q, d, bs; f16/bf16/f32 -> f."""
    cdef Py_ssize_t n = x.shape[0], i
    cdef int k = <int>x.shape[1]
    cdef int8_t *qp = &q[0, 0]
    cdef float *dp = &d[0, 0]
    cdef float *sp = &s[0, 0]
    cdef int16_t *bp = &bs[0, 0]
    cdef float *fp = &f[0, 0]
    cdef Py_ssize_t sq = q.shape[1], sd = d.shape[1], sb = bs.shape[1], sf = f.shape[1]
    if n * k < 16384:
        nth = 1
    with nogil:
        if nth == 1:
            for i in range(n):
                _quant_row(kind, &x[i, 0], k, qp + i * sq, dp + i * sd, sp + i * sd,
                           bp + i * sb, fp + i * sf)
        else:
            for i in prange(n, num_threads=nth, schedule='static'):
                _quant_row(kind, &x[i, 0], k, qp + i * sq, dp + i * sd, sp + i * sd,
                           bp + i * sb, fp + i * sf)


def matmul_rows(int wtype, const uint8_t[:, ::1] w, int k, int8_t[:, ::1] q, float[:, ::1] d,
                float[:, ::1] s, int16_t[:, ::1] bs, float[:, ::1] f, float[:, :] out,
                uint8_t[:, ::1] scratch, int nth):
    """out[t, r] = dot(W[r], x[t]) for the quantized activations from quantize_acts.
    w: [rows, row_bytes] raw rows; out: [n, >= rows] (row stride free); scratch:
    [>= nth, row_scratch_bytes(k)]."""
    cdef Py_ssize_t rows = w.shape[0], n = out.shape[0]
    if out.strides[1] != 4 or out.shape[1] < rows:
        raise ValueError("out must be [n, >= rows] float32 with contiguous rows")
    cdef Py_ssize_t ntiles = (rows + PYL_R - 1) // PYL_R, it
    cdef int tid = 0, nr
    cdef int64_t r0
    cdef pyl_acts A
    A.q = &q[0, 0]
    A.d = &d[0, 0]
    A.s = &s[0, 0]
    A.bs = &bs[0, 0]
    A.f = &f[0, 0]
    A.sq = q.shape[1]
    A.sd = d.shape[1]
    A.sbs = bs.shape[1]
    A.sf = f.shape[1]
    cdef const uint8_t *wp = &w[0, 0]
    cdef int64_t wstride = w.strides[0]
    cdef float *op = &out[0, 0]
    cdef int64_t os = out.strides[0] // 4
    cdef uint8_t *sp = &scratch[0, 0]
    cdef int64_t ss = scratch.strides[0]
    if ntiles < nth:
        nth = <int>ntiles if ntiles > 0 else 1
    with nogil, parallel(num_threads=nth):
        tid = threadid()
        for it in prange(ntiles, schedule='static'):
            r0 = it * PYL_R
            nr = <int>(rows - r0) if rows - r0 < PYL_R else PYL_R
            pyl_rowtile(wtype, wp, wstride, r0, nr, k, &A, n, sp + tid * ss, op, os)


def dequant_rows(int wtype, const uint8_t[:, ::1] w, int k, const int64_t[::1] ids,
                 float[:, ::1] out, uint8_t[::1] scratch):
    """out[i] = dequantized W[ids[i]] (ggml's dequantize_row_* arithmetic)."""
    cdef Py_ssize_t i, n = ids.shape[0]
    with nogil:
        for i in range(n):
            pyl_dequant_row(wtype, &w[ids[i], 0], k, &scratch[0], &out[i, 0])
