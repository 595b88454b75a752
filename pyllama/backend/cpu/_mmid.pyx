# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Fused ggml_mul_mat_id for few tokens per expert (private: use pyllama.backend.cpu.mmid).

One call runs every selected expert's mat-vecs of a ubatch: the activation rows are quantized
once (not once per expert), then an OpenMP prange over (slot, row group) pairs runs the same
per-row kernels as the per-expert path (pyl_compat.h's vec_dot / gemv for numerics="llama.cpp",
pyl_matmul.h's row tiles for "invariant"), so every output element has the same bits. A slot is
s = t * n_used + j (token t, its j-th expert); its activation row is t * m + j % m of x.
"""
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t

cdef extern from "pyl_matmul.h" nogil:
    ctypedef struct pyl_acts:
        const int8_t *q
        const float *d
        const float *s
        const int16_t *bs
        const float *f
        int64_t sq, sd, sbs, sf
    int PYL_R
    int PYL_ACT_Q8_0
    int PYL_ACT_Q8_K
    int PYL_ACT_Q8_K4
    int PYL_ACT_F16
    int PYL_ACT_BF16
    int pyl_act_kind(int t)
    void pyl_quant_q8_0(const float *x, int k, int8_t *q, float *d, float *s)
    void pyl_quant_q8_K(const float *x, int k, int8_t *q, float *d, int16_t *bs, int rule4x8)
    float pyl_round_f16(float f)
    float pyl_round_bf16(float f)
    void pyl_rowtile(int t, const uint8_t *wsrc, int64_t wstride, int64_t r0, int nr, int k,
                     const pyl_acts *A, int64_t n, uint8_t *scratch, float *out, int64_t os)
    void pyl_init_tables()

cdef extern from "pyl_compat.h" nogil:
    void pyl_c_quant_q8_K(const float *x, int k, int8_t *q, float *d, int16_t *bs)
    float pyl_c_dot_q4_K(const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                         const int16_t *bs)
    float pyl_c_dot_q6_K(const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                         const int16_t *bs)
    void pyl_c_dot4_q4_K(const uint8_t *w, int64_t rs, int nsb, const int8_t *q8,
                         const float *d8, const int16_t *bs, float *out)
    float pyl_c_dot_q23_K(int q3, const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                          const int16_t *bs)
    float pyl_c_dot_q45_K(int q5, const uint8_t *w, int nsb, const int8_t *q8, const float *d8,
                          const int16_t *bs)
    float pyl_c_dot_iq4_xs(const uint8_t *w, int nsb, const int8_t *q8, const float *d8)

pyl_init_tables()       # this module's copy of the f16 / e8m0 tables

# the one-token kernels, numbered as _compat.GEMV_Q4_K, VEC_Q4_K, ... VEC_IQ4_XS
cdef enum:
    GEMV_Q4_K = 0
    VEC_Q4_K = 1
    VEC_Q5_K = 2
    VEC_Q6_K = 3
    VEC_Q2_K = 4
    VEC_Q3_K = 5
    VEC_IQ4_XS = 6


cdef inline float _vec_dot(int kernel, const uint8_t *w, int nsb, const int8_t *q8,
                           const float *d8, const int16_t *bs) noexcept nogil:
    if kernel == GEMV_Q4_K:
        return pyl_c_dot_q4_K(w, nsb, q8, d8, bs)
    if kernel == VEC_Q6_K:
        return pyl_c_dot_q6_K(w, nsb, q8, d8, bs)
    if kernel == VEC_IQ4_XS:
        return pyl_c_dot_iq4_xs(w, nsb, q8, d8)
    if kernel == VEC_Q2_K or kernel == VEC_Q3_K:
        return pyl_c_dot_q23_K(kernel == VEC_Q3_K, w, nsb, q8, d8, bs)
    return pyl_c_dot_q45_K(kernel == VEC_Q5_K, w, nsb, q8, d8, bs)


def vec_slots(int kernel, const uint8_t[:, ::1] raw, int rows, int k, const float[:, ::1] x,
              const int32_t[::1] ids, const int32_t[::1] slots, int n_used, int m,
              float[:, ::1] out, int8_t[:, ::1] q, float[:, ::1] d, int16_t[:, ::1] bs,
              int nth):
    """out[s, :rows] = W[ids[s]] @ x[s // n_used * m + s % n_used % m] for s in slots, with
    llama.cpp's one-token kernel (as _compat.matvec_k). raw: the experts' rows
    [n_expert * rows, row_bytes]; x [n * m, k]; ids [n * n_used] (flat); q/d/bs: [n * m, k],
    [., k/256], [., k/16] scratch (every row of x is quantized once, quantize_row_q8_K_ref)."""
    cdef Py_ssize_t nx = x.shape[0], ns = slots.shape[0], t, i, s, xr, e
    cdef int nsb = k // 256
    cdef Py_ssize_t G = rows // 4 if kernel == GEMV_Q4_K else rows
    cdef int64_t rb = raw.shape[1]
    if kernel < 0 or kernel > 6 or k % 256 or x.shape[1] != k or q.shape[0] < nx:
        raise ValueError("vec_slots: shape mismatch")
    if out.shape[1] < rows or raw.shape[0] % rows or (kernel == GEMV_Q4_K and rows % 4):
        raise ValueError("vec_slots: shape mismatch")
    cdef const uint8_t *w0 = &raw[0, 0]
    with nogil:
        for t in range(nx):
            pyl_c_quant_q8_K(&x[t, 0], k, &q[t, 0], &d[t, 0], &bs[t, 0])
        for i in prange(ns * G, num_threads=nth, schedule="static"):
            s = slots[i // G]
            xr = s // n_used * m + s % n_used % m
            e = ids[s]
            if kernel == GEMV_Q4_K:
                pyl_c_dot4_q4_K(w0 + (e * rows + 4 * (i % G)) * rb, rb, nsb, &q[xr, 0],
                                &d[xr, 0], &bs[xr, 0], &out[s, 4 * (i % G)])
            else:
                out[s, i % G] = _vec_dot(kernel, w0 + (e * rows + i % G) * rb, nsb, &q[xr, 0],
                                         &d[xr, 0], &bs[xr, 0])


cdef inline void _quant_row(int kind, const float *x, int k, int8_t *q, float *d, float *s,
                            int16_t *bs, float *f) noexcept nogil:
    """as _matmul's: one activation row into the weight type's vec_dot type"""
    cdef int j
    if kind == PYL_ACT_Q8_0:
        pyl_quant_q8_0(x, k, q, d, s)
    elif kind == PYL_ACT_Q8_K or kind == PYL_ACT_Q8_K4:
        pyl_quant_q8_K(x, k, q, d, bs, kind == PYL_ACT_Q8_K4)
    elif kind == PYL_ACT_F16:
        for j in range(k):
            f[j] = pyl_round_f16(x[j])
    elif kind == PYL_ACT_BF16:
        for j in range(k):
            f[j] = pyl_round_bf16(x[j])
    else:
        for j in range(k):
            f[j] = x[j]


cdef inline void _tile_one(int ktype, const uint8_t *w, int64_t rb, int64_t r0, int nr, int k,
                           const int8_t *q, const float *d, const float *s, const int16_t *bs,
                           const float *f, uint8_t *scratch, float *out,
                           int64_t os) noexcept nogil:
    """rows r0..r0+nr of one expert w times one activation row"""
    cdef pyl_acts A
    A.q, A.d, A.s, A.bs, A.f = q, d, s, bs, f
    A.sq, A.sd, A.sbs, A.sf = 0, 0, 0, 0
    pyl_rowtile(ktype, w, rb, r0, nr, k, &A, 1, scratch, out, os)


def tile_slots(int ktype, const uint8_t[:, ::1] raw, int rows, int k, const float[:, ::1] x,
               const int32_t[::1] ids, const int32_t[::1] slots, int n_used, int m,
               float[:, ::1] out, int8_t[:, ::1] q, float[:, ::1] d, float[:, ::1] sm,
               int16_t[:, ::1] bs, float[:, ::1] f, uint8_t[:, ::1] scratch, int nth):
    """out[s, :rows] = W[ids[s]] @ x[...] for s in slots (as vec_slots) by the row-tile kernels
    of _matmul.matmul for kernel type ktype, one activation row at a time (their results do not
    depend on the number of rows). q/d/sm/bs/f: _matmul's activation arrays for x's rows (unused
    ones may be 1x1); scratch [>= nth, row_scratch_bytes(k)]."""
    cdef Py_ssize_t nx = x.shape[0], ns = slots.shape[0], t, i, s, xr, e, it
    cdef int kind = pyl_act_kind(ktype), nr, tid = 0
    cdef Py_ssize_t ntiles = (rows + PYL_R - 1) // PYL_R
    cdef int64_t rb = raw.shape[1], r0
    cdef int64_t sq = q.shape[1], sd = d.shape[1], sb = bs.shape[1], sf = f.shape[1]
    if x.shape[1] != k or out.shape[1] < rows or raw.shape[0] % rows or scratch.shape[0] < nth:
        raise ValueError("tile_slots: shape mismatch")
    cdef const uint8_t *w0 = &raw[0, 0]
    cdef uint8_t *sp = &scratch[0, 0]
    cdef int64_t ss = scratch.strides[0]
    cdef int8_t *q0 = &q[0, 0]
    cdef float *d0 = &d[0, 0]
    cdef float *s0 = &sm[0, 0]
    cdef int16_t *b0 = &bs[0, 0]
    cdef float *f0 = &f[0, 0]
    with nogil:
        for t in range(nx):
            _quant_row(kind, &x[t, 0], k, q0 + t * sq, d0 + t * sd, s0 + t * sd, b0 + t * sb,
                       f0 + t * sf)
        with parallel(num_threads=nth):
            tid = threadid()
            for i in prange(ns * ntiles, schedule="static"):
                s = slots[i // ntiles]
                it = i % ntiles
                xr = s // n_used * m + s % n_used % m
                r0 = it * PYL_R
                nr = <int>(rows - r0) if rows - r0 < PYL_R else PYL_R
                _tile_one(ktype, w0 + ids[s] * rows * rb, rb, r0, nr, k, q0 + xr * sq,
                          d0 + xr * sd, s0 + xr * sd, b0 + xr * sb, f0 + xr * sf,
                          sp + tid * ss, &out[s, 0], rows)
