# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Non-matmul CPU ops: rms_norm (optionally fused with the weight), rope, GELU/SiLU/softcap and the
gated GELU/SiLU products. Threads split rows/tokens/chunks; every reduction runs in one thread in a
fixed order, so a row's result does not depend on the batch (ARCHITECTURE decision 6).

Numerics follow ggml's CPU ops (see pyllama/backend/ref.py for the oracle and the notes).
"""
from cython.parallel cimport prange
from libc.math cimport cosf, expf, sinf, sqrtf, tanhf

cdef extern from "omp_shim.h" nogil:
    int pyl_omp_max_threads()

cdef float GELU_COEF_A = 0.044715
cdef float SQRT_2_OVER_PI = 0.79788456080286535587989211986876
cdef Py_ssize_t CHUNK = 2048      # elementwise work unit (elements)


def max_threads():
    return pyl_omp_max_threads()


# -- rms_norm ------------------------------------------------------------------------------------
cdef inline void _rms_row(const float* x, const float* w, float* y, Py_ssize_t d,
                          float eps) noexcept nogil:
    cdef double s = 0.0
    cdef float v, mean, scale
    cdef Py_ssize_t i
    for i in range(d):
        v = x[i] * x[i]
        s += <double>v
    mean = <float>(s / <double>d)
    scale = <float>1.0 / sqrtf(mean + eps)
    if w != NULL:
        for i in range(d):
            v = x[i] * scale
            y[i] = v * w[i]
    else:
        for i in range(d):
            y[i] = x[i] * scale


def rms_norm(const float[:, ::1] x, const float[::1] w, float eps, float[:, ::1] out,
             int n_threads):
    """out[r] = x[r] / sqrt(mean(x[r]^2) + eps) (* w): x, out [n, d]; w [d] or None."""
    cdef Py_ssize_t n = x.shape[0], d = x.shape[1], r
    cdef const float* wp = NULL
    if w is not None:
        wp = &w[0]
    if n == 0 or d == 0:
        return
    for r in prange(n, nogil=True, num_threads=n_threads, schedule="static"):
        _rms_row(&x[r, 0], wp, &out[r, 0], d, eps)


# -- rope ----------------------------------------------------------------------------------------
cdef inline void _rope_cache(float p, float theta_scale, float freq_scale, float* cs, float* sn,
                             Py_ssize_t half) noexcept nogil:
    cdef float theta = p, t
    cdef Py_ssize_t i
    for i in range(half):
        t = freq_scale * theta
        cs[i] = cosf(t)
        sn[i] = sinf(t)
        theta = theta * theta_scale


cdef inline void _rope_head(const float* x, float* y, const float* cs, const float* sn,
                            Py_ssize_t n_rot, Py_ssize_t hd, bint neox) noexcept nogil:
    cdef Py_ssize_t i, half = n_rot // 2, a, b
    cdef float x0, x1, c, s
    for i in range(half):
        if neox:
            a = i
            b = i + half
        else:
            a = 2 * i
            b = 2 * i + 1
        x0 = x[a]
        x1 = x[b]
        c = cs[i]
        s = sn[i]
        y[a] = x0 * c - x1 * s
        y[b] = x0 * s + x1 * c
    for i in range(n_rot, hd):
        y[i] = x[i]


def rope(const float[:, :, ::1] x, const int[::1] pos, int n_rot, float theta_scale,
         float freq_scale, bint neox, float[:, :, ::1] out, float[:, ::1] cs, float[:, ::1] sn,
         int n_threads):
    """Rotate x [n, n_head, hd] at pos [n] into out; cs/sn [n, n_rot/2] scratch (the rope cache)."""
    cdef Py_ssize_t n = x.shape[0], nh = x.shape[1], hd = x.shape[2], t, h
    cdef Py_ssize_t half = n_rot // 2
    if n == 0 or nh == 0:
        return
    for t in prange(n, nogil=True, num_threads=n_threads, schedule="static"):
        _rope_cache(<float>pos[t], theta_scale, freq_scale, &cs[t, 0], &sn[t, 0], half)
        for h in range(nh):
            _rope_head(&x[t, h, 0], &out[t, h, 0], &cs[t, 0], &sn[t, 0], n_rot, hd, neox)


# -- elementwise ---------------------------------------------------------------------------------
cdef inline float _gelu(float x) noexcept nogil:
    cdef float inner = SQRT_2_OVER_PI * x * (<float>1.0 + GELU_COEF_A * x * x)
    return <float>0.5 * x * (<float>1.0 + tanhf(inner))


cdef inline float _silu(float x) noexcept nogil:
    return x / (<float>1.0 + expf(-x))


# kind: 0 gelu, 1 silu, 2 softcap (a = 1/cap, b = cap), 3 geglu, 4 swiglu
cdef inline void _unary_chunk(int kind, const float* x, const float* g, float* y, Py_ssize_t n,
                              float a, float b) noexcept nogil:
    cdef Py_ssize_t i
    if kind == 0:
        for i in range(n):
            y[i] = _gelu(x[i])
    elif kind == 1:
        for i in range(n):
            y[i] = _silu(x[i])
    elif kind == 2:
        for i in range(n):
            y[i] = tanhf(x[i] * a) * b
    elif kind == 3:
        for i in range(n):
            y[i] = _gelu(x[i]) * g[i]
    else:
        for i in range(n):
            y[i] = _silu(x[i]) * g[i]


def unary(int kind, const float[::1] x, const float[::1] g, float[::1] out, float a, float b,
          int n_threads):
    """Elementwise op `kind` over flat contiguous x (and gate partner g) into out."""
    cdef Py_ssize_t n = x.shape[0], nc = (n + CHUNK - 1) // CHUNK, c, lo, m
    cdef const float* gp = NULL
    if n == 0:
        return
    if g is not None:
        gp = &g[0]
    for c in prange(nc, nogil=True, num_threads=n_threads, schedule="static"):
        lo = c * CHUNK
        m = n - lo
        if m > CHUNK:
            m = CHUNK
        _unary_chunk(kind, &x[lo], gp + lo if gp != NULL else NULL, &out[lo], m, a, b)
