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
    int PYL_ACT_Q8_K4
    int PYL_ACT_F16
    int PYL_ACT_BF16
    int PYL_ACT_F32
    int pyl_family(int t)
    int pyl_act_kind(int t)
    int64_t PYL_ROWB(int k)
    void pyl_quant_q8_0(const float *x, int k, int8_t *q, float *d, float *s)
    void pyl_quant_q8_K(const float *x, int k, int8_t *q, float *d, int16_t *bs, int rule4x8)
    float pyl_round_f16(float f)
    float pyl_round_bf16(float f)
    void pyl_rowtile(int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nr, int k,
                     const pyl_acts *A, int64_t n, uint8_t *scratch, float *out, int64_t os)
    int pyl_tile_rows(int t, int64_t n)
    int PYL_HAVE_RP
    int PYL_RP
    void pyl_r8_repack(int t, const uint8_t *src, int64_t rows, int64_t rb, uint8_t *dst)
    int64_t pyl_scratch_bytes(int k)
    void pyl_dequant_row(int t, const uint8_t *src, int k, uint8_t *scratch, float *y)
    void pyl_init_tables()
    float pyl_vecdot_iq(int t, const uint8_t *row, int nsb, const int8_t *q8, const float *d8)

pyl_init_tables()

cdef int64_t _parallel_min_bytes = 131072


def set_parallel_min_bytes(int64_t n):
    """Weight bytes x tokens below which a matmul runs on one thread (never changes a result)."""
    global _parallel_min_bytes
    _parallel_min_bytes = n


TILE_ROWS = PYL_R
TILE_TOKENS = PYL_T
HAVE_AVX2 = bool(PYL_AVX2)
HAVE_R8_REPACK = bool(PYL_HAVE_RP)   # kernel type | RP: pyl_r8_repack's copy of an R8 weight
RP = PYL_RP
ACT_Q8_0 = PYL_ACT_Q8_0
ACT_Q8_K = PYL_ACT_Q8_K
ACT_Q8_K4 = PYL_ACT_Q8_K4
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
    return pyl_scratch_bytes(k)


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
    elif kind == PYL_ACT_Q8_K or kind == PYL_ACT_Q8_K4:
        pyl_quant_q8_K(x, k, q, d, bs, kind == PYL_ACT_Q8_K4)
    else:
        _round_row(kind, x, f, k)


cdef struct _actbuf:
    int8_t *q
    float *d
    float *s
    int16_t *bs
    float *f
    int64_t sq, sd, sb, sf


cdef void _quantize(int kind, const float *x, int64_t sx, int64_t n, int k, _actbuf *B,
                    int nth) noexcept nogil:
    cdef Py_ssize_t i
    if n * k < 16384 or n < 2:
        nth = 1
    if nth == 1:
        for i in range(n):
            _quant_row(kind, x + i * sx, k, B.q + i * B.sq, B.d + i * B.sd, B.s + i * B.sd,
                       B.bs + i * B.sb, B.f + i * B.sf)
        return
    for i in prange(n, num_threads=nth, schedule='static'):
        _quant_row(kind, x + i * sx, k, B.q + i * B.sq, B.d + i * B.sd, B.s + i * B.sd,
                   B.bs + i * B.sb, B.f + i * B.sf)


cdef _actbuf _bufs(int8_t[:, ::1] q, float[:, ::1] d, float[:, ::1] s, int16_t[:, ::1] bs,
                   float[:, ::1] f):
    cdef _actbuf B
    B.q = &q[0, 0]
    B.d = &d[0, 0]
    B.s = &s[0, 0]
    B.bs = &bs[0, 0]
    B.f = &f[0, 0]
    B.sq = q.shape[1]
    B.sd = d.shape[1]
    B.sb = bs.shape[1]
    B.sf = f.shape[1]
    return B


def quantize_acts(int kind, const float[:, ::1] x, int8_t[:, ::1] q, float[:, ::1] d,
                  float[:, ::1] s, int16_t[:, ::1] bs, float[:, ::1] f, int nth):
    """Quantize/round every row of x [n, k] into the activation kind's arrays (unused arrays
    may be 1x1 dummies): q8_0 -> q, d, s (q8_1 sums); q8_K -> q, d, bs; f16/bf16/f32 -> f."""
    cdef _actbuf B = _bufs(q, d, s, bs, f)
    with nogil:
        _quantize(kind, &x[0, 0], x.shape[1], x.shape[0], <int>x.shape[1], &B, nth)


def matmul_rows(int wtype, const uint8_t[:, ::1] w, int k, int8_t[:, ::1] q, float[:, ::1] d,
                float[:, ::1] s, int16_t[:, ::1] bs, float[:, ::1] f, float[:, :] out,
                uint8_t[:, ::1] scratch, int nth):
    """out[t, r] = dot(W[r], x[t]) for the quantized activations from quantize_acts.
    w: [rows, row_bytes] raw rows; out: [n, >= rows] (row stride free); scratch:
    [>= nth, row_scratch_bytes(k)]."""
    if out.strides[1] != 4 or out.shape[1] < w.shape[0]:
        raise ValueError("out must be [n, >= rows] float32 with contiguous rows")
    cdef _actbuf B = _bufs(q, d, s, bs, f)
    cdef pyl_acts A = _acts(&B)
    with nogil:
        _tiles(wtype, &w[0, 0], w.strides[0], w.shape[0], k, &A, out.shape[0], &out[0, 0],
               out.strides[0] // 4, &scratch[0, 0], scratch.strides[0], nth)


cdef pyl_acts _acts(const _actbuf *B) noexcept nogil:
    cdef pyl_acts A
    A.q = B.q
    A.d = B.d
    A.s = B.s
    A.bs = B.bs
    A.f = B.f
    A.sq = B.sq
    A.sd = B.sd
    A.sbs = B.sb
    A.sf = B.sf
    return A


cdef inline Py_ssize_t _chunk(Py_ssize_t ntiles, int nth) noexcept nogil:
    """Tiles per work item of the dynamic schedule: about 8 items per thread (at least 1, at
    most 256 tiles): a thread that starts late (waking up, or descheduled on a busy machine)
    takes fewer items instead of the others waiting for its static share. Which thread computes
    a tile never changes its bits."""
    cdef Py_ssize_t c = ntiles // (8 * nth)
    return 1 if c < 1 else (256 if c > 256 else c)


cdef void _tiles(int wtype, const uint8_t *wp, int64_t wstride, int64_t rows, int k,
                 const pyl_acts *A, int64_t n, float *op, int64_t os, uint8_t *sp, int64_t ss,
                 int nth) noexcept nogil:
    cdef int tr = pyl_tile_rows(wtype, n)
    cdef Py_ssize_t ntiles = (rows + tr - 1) // tr, it, chunk
    cdef int tid = 0, nr
    cdef int64_t r0
    if ntiles < 2 or rows * wstride * n < _parallel_min_bytes:   # waking a thread costs more
        nth = 1
    if nth == 1:
        for it in range(ntiles):
            r0 = it * tr
            nr = <int>(rows - r0) if rows - r0 < tr else tr
            pyl_rowtile(wtype, wp, wstride, r0, nr, k, A, n, sp, op, os)
        return
    chunk = _chunk(ntiles, nth)
    with parallel(num_threads=nth):
        tid = threadid()
        for it in prange(ntiles, schedule='dynamic', chunksize=chunk):
            r0 = it * tr
            nr = <int>(rows - r0) if rows - r0 < tr else tr
            pyl_rowtile(wtype, wp, wstride, r0, nr, k, A, n, sp + tid * ss, op, os)


def matmul(int wtype, const uint8_t[:, ::1] w, int k, const float[:, ::1] x, float[:, :] out,
           int8_t[:, ::1] q, float[:, ::1] d, float[:, ::1] s, int16_t[:, ::1] bs,
           float[:, ::1] f, uint8_t[:, ::1] scratch, int nth):
    """quantize_acts + matmul_rows in one call (the arrays come from the caller's cache)."""
    if out.strides[1] != 4 or out.shape[1] < w.shape[0] or out.shape[0] != x.shape[0]:
        raise ValueError("out must be [n, >= rows] float32 with contiguous rows")
    if x.shape[1] != k:
        raise ValueError("x has the wrong number of columns")
    cdef _actbuf B = _bufs(q, d, s, bs, f)
    cdef pyl_acts A = _acts(&B)
    with nogil:
        _quantize(pyl_act_kind(wtype), &x[0, 0], x.shape[1], x.shape[0], k, &B, nth)
        _tiles(wtype, &w[0, 0], w.strides[0], w.shape[0], k, &A, out.shape[0], &out[0, 0],
               out.strides[0] // 4, &scratch[0, 0], scratch.strides[0], nth)


cdef class Plan:
    """The activation buffers and per-thread scratch of one matmul shape (n rows of length k),
    as raw pointers taken once: `matmul_plan` then converts 3 arrays per call instead of 9
    (each typed-memoryview argument costs ~0.5 us; a decode token makes ~130 matmul calls)."""
    cdef _actbuf B
    cdef uint8_t *sp
    cdef int64_t ss, n, k, nth
    cdef object arrays                  # keeps the buffers alive

    def __init__(self, int8_t[:, ::1] q, float[:, ::1] d, float[:, ::1] s, int16_t[:, ::1] bs,
                 float[:, ::1] f, uint8_t[:, ::1] scratch, int64_t n, int64_t k, int nth):
        if scratch.shape[0] < nth:
            raise ValueError("scratch needs a row per thread")
        self.B = _bufs(q, d, s, bs, f)
        self.sp = &scratch[0, 0]
        self.ss = scratch.strides[0]
        self.n, self.k, self.nth = n, k, nth
        self.arrays = (q, d, s, bs, f, scratch)


def matmul_plan(int wtype, const uint8_t[:, ::1] w, const float[:, ::1] x, float[:, :] out,
                Plan p):
    """matmul with the buffers of a Plan made for x's shape (p.n rows of p.k) and p.nth
    threads; same arithmetic, same bits."""
    if out.strides[1] != 4 or out.shape[1] < w.shape[0] or out.shape[0] != x.shape[0]:
        raise ValueError("out must be [n, >= rows] float32 with contiguous rows")
    if x.shape[1] != p.k or x.shape[0] > p.n:
        raise ValueError("x does not fit the plan")
    cdef pyl_acts A = _acts(&p.B)
    cdef int k = <int>p.k, nth = <int>p.nth
    with nogil:
        _quantize(pyl_act_kind(wtype), &x[0, 0], x.shape[1], x.shape[0], k, &p.B, nth)
        _tiles(wtype, &w[0, 0], w.strides[0], w.shape[0], k, &A, out.shape[0], &out[0, 0],
               out.strides[0] // 4, p.sp, p.ss, nth)


def repack_r8(int wtype, const uint8_t[:, ::1] w, uint8_t[:, ::1] out):
    """out = the 8-row interleaved copy of w (Q4_0 / IQ4_NL / MXFP4 rows, rows % 8 == 0) that
    kernel type wtype | R8 | RP reads (pyl_matmul.h pyl_r8_repack)."""
    if out.shape[0] != w.shape[0] or out.shape[1] != w.shape[1] or w.shape[0] % 8:
        raise ValueError("repack_r8: out must match w, rows % 8 == 0")
    with nogil:
        pyl_r8_repack(wtype, &w[0, 0], w.shape[0], w.shape[1], &out[0, 0])


def dequant_rows(int wtype, const uint8_t[:, ::1] w, int k, const int64_t[::1] ids,
                 float[:, ::1] out, uint8_t[::1] scratch):
    """out[i] = dequantized W[ids[i]] (ggml's dequantize_row_* arithmetic)."""
    cdef Py_ssize_t i, n = ids.shape[0]
    with nogil:
        for i in range(n):
            pyl_dequant_row(wtype, &w[ids[i], 0], k, &scratch[0], &out[i, 0])


def vecdot_iq(int wtype, const uint8_t[:, ::1] w, const int8_t[:, ::1] q, const float[:, ::1] d,
              float[:, ::1] out, int nth):
    """out[t, r] = llama.cpp's AVX2 vec_dot of weight row r (a grid i-quant) with the q8_K row
    t (q [n, k], d [n, k/256]): numerics="llama.cpp" under 8 rows (AVX2 builds only)."""
    if not PYL_AVX2:
        raise NotImplementedError("the i-quant vec_dot kernels need AVX2")
    cdef Py_ssize_t n = q.shape[0], rows = w.shape[0], r, t
    cdef int nsb = <int>(q.shape[1] // 256)
    if out.shape[0] != n or out.shape[1] < rows or d.shape[1] != nsb:
        raise ValueError("vecdot_iq: shape mismatch")
    if rows * n < 64:
        nth = 1
    with nogil:
        for r in prange(rows, num_threads=nth, schedule="static"):
            for t in range(n):
                out[t, r] = pyl_vecdot_iq(wtype, &w[r, 0], nsb, &q[t, 0], &d[t, 0])


cdef enum:
    _MAXW = 4       # weights per matmul_plan_many call

cdef struct _wjob:
    int wtype
    int tr          # rows per tile (pyl_tile_rows)
    const uint8_t *wp
    int64_t wstride, rows, tile0
    float *op
    int64_t os


cdef void _tiles_many(const _wjob *J, int nw, int k, const pyl_acts *A, int64_t n, uint8_t *sp,
                      int64_t ss, int nth) noexcept nogil:
    """_tiles over several weights of the same k in one parallel region: the tiles of every
    weight in one index space (weight j owns tiles J[j].tile0 .. J[j+1].tile0); each tile is
    the same pyl_rowtile call as in _tiles, so every output element keeps its bits."""
    cdef Py_ssize_t ntiles = J[nw].tile0, it, chunk
    cdef int tid = 0, nr, j
    cdef int64_t r0, work = 0
    for j in range(nw):
        work += J[j].rows * J[j].wstride
    if ntiles < 2 or work * n < _parallel_min_bytes:
        nth = 1
    if nth == 1:
        for j in range(nw):
            for it in range(J[j + 1].tile0 - J[j].tile0):
                r0 = it * J[j].tr
                nr = <int>(J[j].rows - r0) if J[j].rows - r0 < J[j].tr else J[j].tr
                pyl_rowtile(J[j].wtype, J[j].wp, J[j].wstride, r0, nr, k, A, n, sp, J[j].op,
                            J[j].os)
        return
    chunk = _chunk(ntiles, nth)
    with parallel(num_threads=nth):
        tid = threadid()
        for it in prange(ntiles, schedule='dynamic', chunksize=chunk):
            j = 0
            while it >= J[j + 1].tile0:
                j = j + 1
            r0 = (it - J[j].tile0) * J[j].tr
            nr = <int>(J[j].rows - r0) if J[j].rows - r0 < J[j].tr else J[j].tr
            pyl_rowtile(J[j].wtype, J[j].wp, J[j].wstride, r0, nr, k, A, n, sp + tid * ss,
                        J[j].op, J[j].os)


def matmul_plan_many(tuple wtypes, tuple ws, const float[:, ::1] x, tuple outs, Plan p):
    """matmul_plan for up to 4 weights of the same activation kind and k on the same x: the
    activations are quantized once and all the weights' row tiles run in one parallel region
    (one thread wake-up instead of one per weight); each output is bit-identical to
    matmul_plan's."""
    cdef int nw = len(ws), j, kind = -1
    if nw < 1 or nw > _MAXW or len(wtypes) != nw or len(outs) != nw:
        raise ValueError("matmul_plan_many takes 1 to 4 weights with one out each")
    if x.shape[1] != p.k or x.shape[0] > p.n:
        raise ValueError("x does not fit the plan")
    cdef _wjob J[_MAXW + 1]
    cdef const uint8_t[:, ::1] wv
    cdef float[:, :] ov
    cdef int64_t t0 = 0
    for j in range(nw):
        wv = ws[j]
        ov = outs[j]
        J[j].wtype = wtypes[j]
        if kind < 0:
            kind = pyl_act_kind(J[j].wtype)
        elif pyl_act_kind(J[j].wtype) != kind:
            raise ValueError("matmul_plan_many: weights of different activation kinds")
        if ov.strides[1] != 4 or ov.shape[1] < wv.shape[0] or ov.shape[0] != x.shape[0]:
            raise ValueError("out must be [n, >= rows] float32 with contiguous rows")
        J[j].wp = &wv[0, 0]
        J[j].wstride = wv.strides[0]
        J[j].rows = wv.shape[0]
        J[j].op = &ov[0, 0]
        J[j].os = ov.strides[0] // 4
        J[j].tile0 = t0
        J[j].tr = pyl_tile_rows(J[j].wtype, x.shape[0])
        t0 += (wv.shape[0] + J[j].tr - 1) // J[j].tr
    J[nw].tile0 = t0
    cdef pyl_acts A = _acts(&p.B)
    cdef int k = <int>p.k, nth = <int>p.nth
    with nogil:
        _quantize(kind, &x[0, 0], x.shape[1], x.shape[0], k, &p.B, nth)
        _tiles_many(J, nw, k, &A, x.shape[0], p.sp, p.ss, nth)
