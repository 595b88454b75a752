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


# -- one token's experts, whole FFN in one call --------------------------------------------------
cdef extern from *:
    """
    #include "pyl_parity.h"
    /* out[i] = ((y[0][i] * w[0] + y[1][i] * w[1]) + ...) in f32, each product rounded on its own
       (ggml_mul, then the expert views added in slot order): no contraction into fma */
    __attribute__((optimize("fp-contract=off"), noinline))
    static void pyl_moe_wsum(const float *y, int64_t ys, const float *w, int k, float *out,
                             int64_t n) {
        for (int64_t i = 0; i < n; i++) {
            float a = y[i] * w[0];
            for (int j = 1; j < k; j++) {
                const float p = y[j * ys + i] * w[j];
                a = a + p;
            }
            out[i] = a;
        }
    }
    """
    void pyl_silu_rows(const float *x, const float *g, float *y, int64_t n) noexcept nogil
    void pyl_moe_wsum(const float *y, int64_t ys, const float *w, int k, float *out,
                      int64_t n) noexcept nogil
    int64_t PYL_ROWB(int k)


cdef struct wplan:
    int vec                 # 1: the llama.cpp one-token kernel (vec_slots'), 0: row tiles
    int kernel              # vec: GEMV_Q4_K..VEC_IQ4_XS; tiles: the kernel type
    int kind                # tiles: the activation kind
    const uint8_t *w0
    int64_t rb              # bytes per weight row
    int rows, k, G          # G: tasks per slot (row groups / tiles)
    int8_t *q
    float *d
    float *s
    int16_t *bs
    float *f
    int64_t sq, sd, sbs, sf     # per activation row


cdef inline void _wquant(const wplan *P, const float *x, Py_ssize_t row) noexcept nogil:
    if P.vec:
        pyl_c_quant_q8_K(x, P.k, P.q + row * P.sq, P.d + row * P.sd, P.bs + row * P.sbs)
    else:
        _quant_row(P.kind, x, P.k, P.q + row * P.sq, P.d + row * P.sd, P.s + row * P.sd,
                   P.bs + row * P.sbs, P.f + row * P.sf)


cdef inline void _wtask(const wplan *P, Py_ssize_t e, Py_ssize_t xr, Py_ssize_t g, float *orow,
                        uint8_t *scratch) noexcept nogil:
    """rows of group / tile g of expert e times activation row xr into orow (as vec_slots /
    tile_slots compute them)"""
    cdef int nsb = P.k // 256, nr
    cdef int64_t r0
    if P.vec:
        if P.kernel == GEMV_Q4_K:
            pyl_c_dot4_q4_K(P.w0 + (e * P.rows + 4 * g) * P.rb, P.rb, nsb, P.q + xr * P.sq,
                            P.d + xr * P.sd, P.bs + xr * P.sbs, orow + 4 * g)
        else:
            orow[g] = _vec_dot(P.kernel, P.w0 + (e * P.rows + g) * P.rb, nsb, P.q + xr * P.sq,
                               P.d + xr * P.sd, P.bs + xr * P.sbs)
    else:
        r0 = g * PYL_R
        nr = <int>(P.rows - r0) if P.rows - r0 < PYL_R else PYL_R
        _tile_one(P.kernel, P.w0 + e * P.rows * P.rb, P.rb, r0, nr, P.k, P.q + xr * P.sq,
                  P.d + xr * P.sd, P.s + xr * P.sd, P.bs + xr * P.sbs, P.f + xr * P.sf, scratch,
                  orow, P.rows)


cdef class Moe1:
    """One token's SwiGLU experts (build_moe_ffn's up / gate / down mul_mat_id, swiglu, the weights
    and the sum of the expert views) in one call and one OpenMP region: the token's row is
    quantized once for gate and up; when the threads divide the experts evenly each thread runs
    whole experts (gate, up, swiglu, its row quantized for down, down: one barrier), else every
    (expert, row group) of gate and up is one task of one loop, then the swiglu rows, then down's
    tasks; then the weighted sum. Each value has the bits of the separate ops (the same kernels
    per row)."""
    cdef wplan P[3]                 # gate, up, down
    cdef int n_used, nth, share
    cdef object keep
    cdef float[:, ::1] gb, ub, ab, db
    cdef uint8_t[:, ::1] scratch

    def __init__(self, specs, int n_used, int nth):
        """specs: per weight (gate, up, down) (vec, kernel, kind, raw [n_expert * rows,
        row_bytes] uint8, rows, k)."""
        import numpy as np
        self.n_used, self.nth = n_used, nth
        keep = []
        cdef int i, n_act, k
        cdef const uint8_t[:, ::1] raw
        cdef int8_t[:, ::1] q
        cdef float[:, ::1] d, s, f
        cdef int16_t[:, ::1] bs
        for i in range(3):
            vec, kernel, kind, raw_a, rows, k = specs[i]
            raw = raw_a
            n_act = n_used if i == 2 else 1
            q = np.zeros((n_act, k), np.int8)
            d = np.zeros((n_act, k // 32), np.float32)
            s = np.zeros((n_act, k // 32), np.float32)
            bs = np.zeros((n_act, k // 16), np.int16)
            f = np.zeros((n_act, k), np.float32)
            keep.append((raw_a, q, d, s, bs, f))
            self.P[i].vec, self.P[i].kernel, self.P[i].kind = bool(vec), kernel, kind
            self.P[i].w0 = &raw[0, 0]
            self.P[i].rb = raw.shape[1]
            self.P[i].rows, self.P[i].k = rows, k
            if vec:
                self.P[i].G = rows // 4 if kernel == GEMV_Q4_K else rows
            else:
                self.P[i].G = (rows + PYL_R - 1) // PYL_R
            self.P[i].q, self.P[i].d, self.P[i].s = &q[0, 0], &d[0, 0], &s[0, 0]
            self.P[i].bs, self.P[i].f = &bs[0, 0], &f[0, 0]
            self.P[i].sq, self.P[i].sd, self.P[i].sbs, self.P[i].sf = k, k // 32, k // 16, k
        if self.P[0].rows != self.P[1].rows or self.P[0].k != self.P[1].k \
                or self.P[2].k != self.P[0].rows:
            raise ValueError("Moe1: gate / up / down shapes do not chain")
        # up reads gate's quantized row when both take the same activation type
        self.share = self.P[0].vec == self.P[1].vec and (
            self.P[0].vec or self.P[0].kind == self.P[1].kind)
        if self.share:
            self.P[1].q, self.P[1].d, self.P[1].s = self.P[0].q, self.P[0].d, self.P[0].s
            self.P[1].bs, self.P[1].f = self.P[0].bs, self.P[0].f
        ff = self.P[0].rows
        self.gb = np.empty((n_used, ff), np.float32)
        self.ub = np.empty((n_used, ff), np.float32)
        self.ab = np.empty((n_used, ff), np.float32)
        self.db = np.empty((n_used, self.P[2].rows), np.float32)
        self.scratch = np.empty((max(1, nth), PYL_R * PYL_ROWB(max(self.P[0].k, ff))),
                                np.uint8)
        self.keep = keep

    def run(self, const float[::1] x, const int32_t[::1] ids, const float[::1] wts,
            float[::1] out):
        """out [n_embd] = sum_j wts[j] * down[ids[j]] . swiglu(gate[ids[j]] . x, up[ids[j]] . x)"""
        cdef int nu = self.n_used, nth = self.nth, tid = 0
        cdef wplan *P = self.P
        cdef Py_ssize_t sl, n_out = P[2].rows
        cdef float *db = &self.db[0, 0]
        cdef uint8_t *sp = &self.scratch[0, 0]
        cdef int64_t ss = self.scratch.strides[0]
        if x.shape[0] != P[0].k or ids.shape[0] != nu or wts.shape[0] != nu \
                or out.shape[0] != n_out:
            raise ValueError("Moe1.run: shape mismatch")
        cdef const int32_t *idp = &ids[0]
        with nogil:
            _wquant(&P[0], &x[0], 0)
            if not self.share:
                _wquant(&P[1], &x[0], 0)
            if nth == 1:
                for sl in range(nu):
                    self._slot(sl, idp[sl], sp)
            elif nu % nth == 0:         # whole experts per thread: one barrier
                with parallel(num_threads=nth):
                    tid = threadid()
                    for sl in prange(nu, schedule="static"):
                        self._slot(sl, idp[sl], sp + tid * ss)
            else:
                self._tasks(idp)
            pyl_moe_wsum(db, n_out, &wts[0], nu, &out[0], n_out)

    cdef void _slot(self, Py_ssize_t sl, Py_ssize_t e, uint8_t *scratch) noexcept nogil:
        """all of slot sl (expert e): gate and up rows, swiglu, its down row quantized, down"""
        cdef wplan *P = self.P
        cdef Py_ssize_t g, ff = P[0].rows
        cdef float *gr = &self.gb[sl, 0]
        cdef float *ur = &self.ub[sl, 0]
        cdef float *ar = &self.ab[sl, 0]
        for g in range(P[0].G):
            _wtask(&P[0], e, 0, g, gr, scratch)
        for g in range(P[1].G):
            _wtask(&P[1], e, 0, g, ur, scratch)
        pyl_silu_rows(gr, ur, ar, ff)
        _wquant(&P[2], ar, sl)
        for g in range(P[2].G):
            _wtask(&P[2], e, sl, g, &self.db[sl, 0], scratch)

    cdef void _tasks(self, const int32_t *idp) noexcept nogil:
        """run's loop when the experts do not split evenly over the threads: (expert, row group)
        tasks of gate and up, then the swiglu rows, then down's tasks"""
        cdef int nu = self.n_used, nth = self.nth, tid = 0
        cdef wplan *P = self.P
        cdef Py_ssize_t ng = nu * P[0].G, nug = ng + nu * P[1].G, nd = nu * P[2].G
        cdef Py_ssize_t i, j, s1, s2, s3, i3, n_out = P[2].rows
        cdef Py_ssize_t ff = P[0].rows
        cdef float *gb = &self.gb[0, 0]
        cdef float *ub = &self.ub[0, 0]
        cdef float *ab = &self.ab[0, 0]
        cdef float *db = &self.db[0, 0]
        cdef uint8_t *sp = &self.scratch[0, 0]
        cdef int64_t ss = self.scratch.strides[0]
        with parallel(num_threads=nth):
            tid = threadid()
            for i in prange(nug, schedule="static"):
                if i < ng:
                    s1 = i // P[0].G
                    _wtask(&P[0], idp[s1], 0, i % P[0].G, gb + s1 * ff, sp + tid * ss)
                else:
                    j = i - ng
                    s1 = j // P[1].G
                    _wtask(&P[1], idp[s1], 0, j % P[1].G, ub + s1 * ff, sp + tid * ss)
            for s2 in prange(nu, schedule="static"):
                pyl_silu_rows(gb + s2 * ff, ub + s2 * ff, ab + s2 * ff, ff)
                _wquant(&P[2], ab + s2 * ff, s2)
            for i3 in prange(nd, schedule="static"):
                s3 = i3 // P[2].G
                _wtask(&P[2], idp[s3], s3, i3 % P[2].G, db + s3 * n_out, sp + tid * ss)
