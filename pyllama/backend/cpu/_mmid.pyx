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
from libc.string cimport memcpy

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
    /* out[i] = the same sum over the slots' rows D[pos[j]] (row stride ds) */
    __attribute__((optimize("fp-contract=off"), noinline))
    static void pyl_moe_wsum_idx(const float *D, int64_t ds, const int32_t *pos, const float *w,
                                 int k, float *out, int64_t n) {
        for (int64_t i = 0; i < n; i++) {
            float a = D[pos[0] * ds + i] * w[0];
            for (int j = 1; j < k; j++) {
                const float p = D[pos[j] * ds + i] * w[j];
                a = a + p;
            }
            out[i] = a;
        }
    }
    """
    void pyl_moe_wsum_idx(const float *D, int64_t ds, const int32_t *pos, const float *w, int k,
                          float *out, int64_t n) noexcept nogil
    void pyl_silu_rows(const float *x, const float *g, float *y, int64_t n) noexcept nogil
    void pyl_route_row(const float *x, int E, int k, int norm, float scale, float *p, int *ids,
                       float *w) noexcept nogil
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
    quantized once for gate and up; when the threads divide the experts evenly (or there are at
    least twice as many experts) each task is a whole expert (gate, up, swiglu, its row quantized
    for down, down: one barrier), else every
    (expert, row group) of gate and up is one task of one loop, then the swiglu rows, then down's
    tasks; then the weighted sum. Each value has the bits of the separate ops (the same kernels
    per row). With a router (run_routed): its logits by its own kernel (row tiles, in the calling
    thread) and moe_route's softmax gating (pyl_route_row) first, the bits of matmul + moe_route."""
    cdef wplan P[4]                 # gate, up, down, router
    cdef int n_used, nth, share, has_router, E, rnorm
    cdef float rscale
    cdef object keep
    cdef float[:, ::1] gb, ub, ab, db
    cdef float[::1] logits, probs, rw
    cdef int32_t[::1] rids
    cdef uint8_t[:, ::1] scratch

    def __init__(self, specs, int n_used, int nth, router=None):
        """specs: per weight (gate, up, down) (vec, kernel, kind, raw [n_expert * rows,
        row_bytes] uint8, rows, k); router: None or (spec (row tiles), norm, scale)."""
        import numpy as np
        self.n_used, self.nth = n_used, nth
        keep = []
        cdef int i, n_act, k
        cdef const uint8_t[:, ::1] raw
        cdef int8_t[:, ::1] q
        cdef float[:, ::1] d, s, f
        cdef int16_t[:, ::1] bs
        self.has_router = router is not None
        if router is not None:
            specs = list(specs) + [router[0]]
            if router[0][0] or router[0][5] != specs[0][5]:
                raise ValueError("Moe1: the router takes row tiles over the token's row")
            self.E, self.rnorm, self.rscale = router[0][4], bool(router[1]), router[2]
            self.logits = np.zeros(self.E, np.float32)
            self.probs = np.zeros(self.E, np.float32)
            self.rw = np.zeros(n_used, np.float32)
            self.rids = np.zeros(n_used, np.int32)
        for i in range(len(specs)):
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
        cdef int nu = self.n_used
        if x.shape[0] != self.P[0].k or ids.shape[0] != nu or wts.shape[0] != nu \
                or out.shape[0] != self.P[2].rows:
            raise ValueError("Moe1.run: shape mismatch")
        with nogil:
            self._experts(&x[0], &ids[0], &wts[0], &out[0])

    def run_routed(self, const float[::1] x, float[::1] out):
        """(ids, weights) = moe_route(router . x), then run: out [n_embd]"""
        cdef wplan *R = &self.P[3]
        cdef Py_ssize_t g
        if not self.has_router:
            raise ValueError("Moe1.run_routed: no router")
        if x.shape[0] != self.P[0].k or out.shape[0] != self.P[2].rows:
            raise ValueError("Moe1.run_routed: shape mismatch")
        cdef float *lp = &self.logits[0]
        cdef uint8_t *sp = &self.scratch[0, 0]
        with nogil:
            _wquant(R, &x[0], 0)
            for g in range(R.G):
                _wtask(R, 0, 0, g, lp, sp)
            pyl_route_row(lp, self.E, self.n_used, self.rnorm, self.rscale, &self.probs[0],
                          <int *>&self.rids[0], &self.rw[0])
            self._experts(&x[0], &self.rids[0], &self.rw[0], &out[0])

    cdef void _experts(self, const float *x, const int32_t *idp, const float *wp,
                       float *op) noexcept nogil:
        cdef int nu = self.n_used, nth = self.nth, tid = 0
        cdef wplan *P = self.P
        cdef Py_ssize_t sl, n_out = P[2].rows
        cdef float *db = &self.db[0, 0]
        cdef uint8_t *sp = &self.scratch[0, 0]
        cdef int64_t ss = self.scratch.strides[0]
        _wquant(&P[0], x, 0)
        if not self.share:
            _wquant(&P[1], x, 0)
        if nth == 1:
            for sl in range(nu):
                self._slot(sl, idp[sl], sp)
        elif nu % nth == 0 or nu >= 2 * nth:    # whole experts per task: one barrier; dynamic:
            with parallel(num_threads=nth):     # a thread that wakes late takes fewer experts
                tid = threadid()
                for sl in prange(nu, schedule="dynamic"):
                    self._slot(sl, idp[sl], sp + tid * ss)
        else:
            self._tasks(idp)
        pyl_moe_wsum(db, n_out, wp, nu, op, n_out)

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



# -- a batch's experts (prefill), invariant numerics ---------------------------------------------
cdef struct tplan:              # one expert tensor on the row-tile kernels
    int kt, kind, rows, k, ntiles
    const uint8_t *w0
    int64_t rb


cdef struct _abuf:              # activation rows of one kind (row strides in elements)
    int8_t *q
    float *d
    float *s
    int16_t *bs
    float *f
    int64_t sq, sd, sbs, sf


cdef inline void _acts_at(const _abuf *B, Py_ssize_t row, pyl_acts *A) noexcept nogil:
    A.q = B.q + row * B.sq
    A.d = B.d + row * B.sd
    A.s = B.s + row * B.sd
    A.bs = B.bs + row * B.sbs
    A.f = B.f + row * B.sf
    A.sq, A.sd, A.sbs, A.sf = B.sq, B.sd, B.sbs, B.sf


cdef inline void _aquant(int kind, const float *x, int k, const _abuf *B,
                         Py_ssize_t row) noexcept nogil:
    _quant_row(kind, x, k, B.q + row * B.sq, B.d + row * B.sd, B.s + row * B.sd,
               B.bs + row * B.sbs, B.f + row * B.sf)


cdef inline void _acopy(int kind, int k, const _abuf *S, Py_ssize_t a, const _abuf *D,
                        Py_ssize_t b) noexcept nogil:
    """activation row a of S -> row b of D (the parts kind uses)"""
    if kind == PYL_ACT_Q8_0:
        memcpy(D.q + b * D.sq, S.q + a * S.sq, k)
        memcpy(D.d + b * D.sd, S.d + a * S.sd, 4 * (k // 32))
        memcpy(D.s + b * D.sd, S.s + a * S.sd, 4 * (k // 32))
    elif kind == PYL_ACT_Q8_K or kind == PYL_ACT_Q8_K4:
        memcpy(D.q + b * D.sq, S.q + a * S.sq, k)
        memcpy(D.d + b * D.sd, S.d + a * S.sd, 4 * (k // 256))
        memcpy(D.bs + b * D.sbs, S.bs + a * S.sbs, 2 * (k // 16))
    else:
        memcpy(D.f + b * D.sf, S.f + a * S.sf, 4 * k)


cdef _abuf _abuf_of(bufs):
    """(q int8 [n, k], d f32 [n, k/32], s f32 [n, k/32], bs int16 [n, k/16], f f32 [n, k])"""
    cdef int8_t[:, ::1] q = bufs[0]
    cdef float[:, ::1] d = bufs[1]
    cdef float[:, ::1] s = bufs[2]
    cdef int16_t[:, ::1] bs = bufs[3]
    cdef float[:, ::1] f = bufs[4]
    cdef _abuf B
    B.q, B.d, B.s, B.bs, B.f = &q[0, 0], &d[0, 0], &s[0, 0], &bs[0, 0], &f[0, 0]
    B.sq, B.sd, B.sbs, B.sf = q.shape[1], d.shape[1], bs.shape[1], f.shape[1]
    return B


cdef tplan _tplan_of(spec):
    cdef tplan T
    cdef const uint8_t[:, ::1] raw = spec[2]
    T.kt, T.kind, T.rows, T.k = spec[0], spec[1], spec[3], spec[4]
    T.ntiles = (T.rows + PYL_R - 1) // PYL_R
    T.w0 = &raw[0, 0]
    T.rb = raw.shape[1]
    return T


cdef inline void _gtile(const tplan *T, const _abuf *A, Py_ssize_t e, Py_ssize_t g0,
                        Py_ssize_t ng, Py_ssize_t it, float *Y, uint8_t *scratch) noexcept nogil:
    """row tile it of expert e times the ng sorted activation rows from g0 -> Y rows g0.."""
    cdef pyl_acts X
    cdef int64_t r0 = it * PYL_R
    cdef int nr = <int>(T.rows - r0) if T.rows - r0 < PYL_R else PYL_R
    _acts_at(A, g0, &X)
    pyl_rowtile(T.kt, T.w0 + e * T.rows * T.rb, T.rb, r0, nr, T.k, &X, ng, scratch,
                Y + g0 * T.rows, T.rows)


def moe_batch(specs, const float[:, ::1] x, const int32_t[::1] xrow, const int32_t[::1] gexp,
              const int32_t[::1] gstart, const int32_t[::1] pos, const float[:, ::1] wts,
              xbufs, ubufs, sbufs, dbufs, float[:, ::1] G, float[:, ::1] U, float[:, ::1] D,
              uint8_t[:, ::1] scratch, float[:, ::1] out, int nth):
    """A batch's SwiGLU experts on the row-tile kernels (numerics "invariant": every value has
    the bits of the per-expert matmuls, swiglu and Graph.sum_experts of the weighted rows).
    The slots (token t, j-th expert) are sorted by expert: S sorted rows, group g = expert
    gexp[g] on sorted rows gstart[g]..gstart[g+1]; sorted row i reads x row xrow[i]; pos[t * k +
    j] is the sorted row of slot (t, j). specs: (kernel type, act kind, raw [n_expert * rows,
    row_bytes], rows, k) for gate, up, down. x's rows are quantized once (xbufs; ubufs for up
    when its kind differs, else None), copied into sorted order (sbufs: gate's, then up's
    rows after S), every (group, row tile) of gate and up is one task, then each sorted row's
    swiglu is quantized for down (dbufs), then down's tasks, then the weighted sums.
    G, U [S, n_ff] (U then holds the swiglu rows), D [S, n_embd]; out [n, n_embd]."""
    cdef tplan T[3]
    cdef int i
    for i in range(3):
        T[i] = _tplan_of(specs[i])
    cdef _abuf XB = _abuf_of(xbufs), SB = _abuf_of(sbufs), DB = _abuf_of(dbufs)
    cdef _abuf XU = _abuf_of(ubufs) if ubufs is not None else XB
    cdef bint own_up = ubufs is not None
    cdef Py_ssize_t n = x.shape[0], S = xrow.shape[0], ngr = gexp.shape[0], ku = wts.shape[1]
    cdef Py_ssize_t ff = T[0].rows, ne = T[2].rows, nt0 = ngr * T[0].ntiles
    cdef Py_ssize_t nt01 = nt0 + ngr * T[1].ntiles, nt2 = ngr * T[2].ntiles
    cdef Py_ssize_t a, b, b2, t, i1, i2, g1, g2
    cdef int tid = 0
    if (T[1].rows != ff or T[1].k != T[0].k or T[2].k != ff or x.shape[1] != T[0].k
            or S != n * ku or pos.shape[0] != S or gstart.shape[0] != ngr + 1
            or G.shape[0] < S or U.shape[0] < S or D.shape[0] < S or G.shape[1] != ff
            or U.shape[1] != ff or D.shape[1] != ne or out.shape[0] != n
            or out.shape[1] != ne or scratch.shape[0] < nth):
        raise ValueError("moe_batch: shape mismatch")
    cdef _abuf SU = SB
    SU.q, SU.d, SU.s = SB.q + S * SB.sq, SB.d + S * SB.sd, SB.s + S * SB.sd
    SU.bs, SU.f = SB.bs + S * SB.sbs, SB.f + S * SB.sf
    cdef float *Gp = &G[0, 0]
    cdef float *Up = &U[0, 0]
    cdef float *Dp = &D[0, 0]
    cdef uint8_t *sp = &scratch[0, 0]
    cdef int64_t ss = scratch.strides[0]
    cdef const int32_t *ge = &gexp[0]
    cdef const int32_t *gs = &gstart[0]
    with nogil, parallel(num_threads=nth):
        tid = threadid()
        for a in prange(n, schedule="static"):
            _aquant(T[0].kind, &x[a, 0], T[0].k, &XB, a)
            if own_up:
                _aquant(T[1].kind, &x[a, 0], T[1].k, &XU, a)
        for b in prange(S, schedule="static"):
            _acopy(T[0].kind, T[0].k, &XB, xrow[b], &SB, b)
            if own_up:
                _acopy(T[1].kind, T[1].k, &XU, xrow[b], &SU, b)
        for i1 in prange(nt01, schedule="dynamic"):
            if i1 < nt0:
                g1 = i1 // T[0].ntiles
                _gtile(&T[0], &SB, ge[g1], gs[g1], gs[g1 + 1] - gs[g1], i1 % T[0].ntiles, Gp,
                       sp + tid * ss)
            else:
                g1 = (i1 - nt0) // T[1].ntiles
                _gtile(&T[1], &SU if own_up else &SB, ge[g1], gs[g1], gs[g1 + 1] - gs[g1],
                       (i1 - nt0) % T[1].ntiles, Up, sp + tid * ss)
        for b2 in prange(S, schedule="static"):
            pyl_silu_rows(Gp + b2 * ff, Up + b2 * ff, Up + b2 * ff, ff)
            _aquant(T[2].kind, Up + b2 * ff, T[2].k, &DB, b2)
        for i2 in prange(nt2, schedule="dynamic"):
            g2 = i2 // T[2].ntiles
            _gtile(&T[2], &DB, ge[g2], gs[g2], gs[g2 + 1] - gs[g2], i2 % T[2].ntiles, Dp,
                   sp + tid * ss)
        for t in prange(n, schedule="static"):
            pyl_moe_wsum_idx(Dp, ne, &pos[t * ku], &wts[t, 0], <int>ku, &out[t, 0], ne)
