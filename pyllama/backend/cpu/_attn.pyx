# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Attention over listed KV cells (f16 or f32 cache), one (query, head) pair per task.

For query i and head h the kernel walks kv_cells[q_start[i]:q_end[i]] in order, twice:
  pass 1: s_j = scale * dot(q, k_j) (K converted f16 -> f32 as stored), optional softcap
          s_j = tanh(s_j * (1/cap)) * cap, running max;
  pass 2: p_j = exp(s_j - max), sum += p_j (double, like ggml's soft_max), acc += p_j * v_j;
  out = acc * (1/sum).
The task code is the same whatever the number of queries or threads, so each query's output is
bit-identical across batchings (ARCHITECTURE decision 6). Unlisted cells are never read.
AVX2+FMA+F16C intrinsics when the compiler targets them, a scalar path otherwise.
"""
from cython.parallel cimport parallel, prange
from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.stdlib cimport free, malloc

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    #include <math.h>
    #if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
    #include <immintrin.h>
    #define PYL_ATTN_SIMD 1
    #else
    #define PYL_ATTN_SIMD 0
    #endif

    static inline float pyl_h2f(uint16_t h) {
    #if defined(__F16C__)
        return _cvtsh_ss(h);
    #else
        uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, bits;
        float f;
        if (e == 0) {
            f = (float)m * (1.0f / 16777216.0f);
            return sign ? -f : f;
        }
        bits = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
        memcpy(&f, &bits, 4);
        return f;
    #endif
    }

    #if PYL_ATTN_SIMD
    static inline float pyl_hsum8(__m256 a) {
        __m128 lo = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
        lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
        return _mm_cvtss_f32(lo);
    }
    static inline __m256 pyl_ld(const void *p, int f16, int i) {
        return f16 ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)))
                   : _mm256_loadu_ps((const float *)p + i);
    }
    #endif

    static inline float pyl_ld1(const void *p, int f16, int i) {
        return f16 ? pyl_h2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
    }

    /* dot(q[0:n], k[0:n]); k f16 or f32. Fixed reduction order for a given n. */
    static inline float pyl_dot(const float *q, const void *k, int f16, int n) {
        int i = 0;
        float s = 0.0f;
    #if PYL_ATTN_SIMD
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
        for (; i + 32 <= n; i += 32) {
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), pyl_ld(k, f16, i), a0);
            a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), pyl_ld(k, f16, i + 8), a1);
            a2 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 16), pyl_ld(k, f16, i + 16), a2);
            a3 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 24), pyl_ld(k, f16, i + 24), a3);
        }
        for (; i + 8 <= n; i += 8)
            a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), pyl_ld(k, f16, i), a0);
        s = pyl_hsum8(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
    #endif
        for (; i < n; i++)
            s += q[i] * pyl_ld1(k, f16, i);
        return s;
    }

    /* y[0:n] += a * v[0:n]; v f16 or f32. */
    static inline void pyl_axpy(float *y, float a, const void *v, int f16, int n) {
        int i = 0;
    #if PYL_ATTN_SIMD
        __m256 va = _mm256_set1_ps(a);
        for (; i + 8 <= n; i += 8)
            _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, pyl_ld(v, f16, i), _mm256_loadu_ps(y + i)));
    #endif
        for (; i < n; i++)
            y[i] += a * pyl_ld1(v, f16, i);
    }

    /* One (query, head) task. k/v: base pointers of the head's first element in cell 0;
       kst/vst: row strides in bytes; s: scratch [n] floats; out [dv] (overwritten). */
    static void pyl_attn_task(const float *q, const uint8_t *k, const uint8_t *v,
                              int64_t kst, int64_t vst, int f16, const int32_t *cells, int n,
                              int dk, int dv, float scale, float cap, float *s, float *out) {
        float mx = -INFINITY, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f, inv;
        double sum = 0.0;
        int j;
        memset(out, 0, sizeof(float) * (size_t)dv);
        if (n <= 0)
            return;
        for (j = 0; j < n; j++) {
            float x = scale * pyl_dot(q, k + (int64_t)cells[j] * kst, f16, dk);
            if (cap > 0.0f)
                x = tanhf(x * inv_cap) * cap;
            s[j] = x;
            mx = x > mx ? x : mx;
        }
        for (j = 0; j < n; j++) {
            float p = expf(s[j] - mx);
            sum += (double)p;
            pyl_axpy(out, p, v + (int64_t)cells[j] * vst, f16, dv);
        }
        inv = (float)(1.0 / sum);
        for (j = 0; j < dv; j++)
            out[j] *= inv;
    }
    """
    int PYL_ATTN_SIMD
    void pyl_attn_task(const float* q, const uint8_t* k, const uint8_t* v, int64_t kst,
                       int64_t vst, int f16, const int32_t* cells, int n, int dk, int dv,
                       float scale, float cap, float* s, float* out) noexcept nogil


def simd():
    """True when the AVX2/FMA/F16C kernels were compiled in."""
    return bool(PYL_ATTN_SIMD)


def attention(const float[:, :, ::1] q, const uint8_t[:, ::1] kb, const uint8_t[:, ::1] vb,
              bint f16, int n_head_kv, const int32_t[::1] cells, const int64_t[::1] q_start,
              const int64_t[::1] q_end, float scale, float softcap, float[:, :, ::1] out,
              int max_len, int n_threads):
    """q [n_q, n_head, dk]; kb/vb the caches as bytes [n_cells, row_bytes]; out [n_q, n_head, dv].

    The caller validated cells (in range) and q_start/q_end (0 <= start <= end <= len(cells)).
    """
    cdef int n_q = q.shape[0], n_head = q.shape[1], dk = q.shape[2], dv = out.shape[2]
    cdef int group = n_head // n_head_kv, esz = 2 if f16 else 4
    cdef int64_t kst = kb.strides[0], vst = vb.strides[0]
    cdef Py_ssize_t t, n_tasks = <Py_ssize_t>n_q * n_head
    cdef int i, h, g
    cdef float* scratch
    cdef const int32_t* cp = &cells[0] if cells.shape[0] > 0 else NULL
    if n_tasks == 0:
        return
    if kb.shape[0] == 0 or max_len <= 0:
        out[:, :, :] = 0
        return
    with nogil, parallel(num_threads=n_threads):
        scratch = <float*>malloc(sizeof(float) * max_len)
        for t in prange(n_tasks, schedule="dynamic", chunksize=4):
            i = t // n_head
            h = t % n_head
            g = h // group
            pyl_attn_task(&q[i, h, 0], &kb[0, 0] + g * dk * esz, &vb[0, 0] + g * dv * esz,
                          kst, vst, f16, cp + q_start[i], <int>(q_end[i] - q_start[i]),
                          dk, dv, scale, softcap, scratch, &out[i, h, 0])
        free(scratch)
