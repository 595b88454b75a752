# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Attention over listed KV cells (f16 or f32 cache), one (query, head) pair per task.

For query i and head h the kernel walks its cells kv_cells[q_start[i]:q_end[i]] in order:
  1. s_j = scale * dot(q, k_j) (K converted f16 -> f32 as stored; 4 cells per step, each cell's
     dot a sequential 8-lane FMA chain over d then a fixed horizontal tree), optional softcap
     s_j = tanh(s_j * (1/cap)) * cap, max over j;
  2. p_j = exp(s_j - max) (8-lane exp of pyl_vmath.h), sum = sum over 8-blocks of the block's
     f32 horizontal sum, accumulated in double (as ggml's soft_max does);
  3. out = (sum_j p_j v_j) * (1/sum), accumulated in order of j, 64 output lanes at a time.
The task's code and order depend only on its own cell list, never on the other queries, the
number of queries or threads: each query's output is bit-identical across batchings
(ARCHITECTURE decision 6). Unlisted cells are never read.
"""
import numpy as np

from cython.parallel cimport prange, threadid
from libc.stdint cimport int32_t, int64_t, uint8_t

cdef extern from *:
    """
    #include "pyl_vmath.h"

    #if PYL_VM_SIMD
    /* dots of q with 4 rows (f16 or f32), one 8-lane FMA chain per row, fixed tail order */
    static inline __attribute__((always_inline)) void pyl_dot4(
            const float *q, const uint8_t *const *k, int f16, int d, float *res) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        int i = 0, t;
        for (; i + 8 <= d; i += 8) {
            __m256 qv = _mm256_loadu_ps(q + i);
            a0 = _mm256_fmadd_ps(qv, pyl_ld8(k[0], f16, i), a0);
            a1 = _mm256_fmadd_ps(qv, pyl_ld8(k[1], f16, i), a1);
            a2 = _mm256_fmadd_ps(qv, pyl_ld8(k[2], f16, i), a2);
            a3 = _mm256_fmadd_ps(qv, pyl_ld8(k[3], f16, i), a3);
        }
        res[0] = pyl_hsum8(a0); res[1] = pyl_hsum8(a1);
        res[2] = pyl_hsum8(a2); res[3] = pyl_hsum8(a3);
        for (; i < d; i++)
            for (t = 0; t < 4; t++)
                res[t] += q[i] * pyl_ld1(k[t], f16, i);
    }

    /* sum of exp(s[j] - mx) over j < n, s[j] overwritten by p_j; s has room for n rounded up to
       8 (padding set to -inf: exp 0). */
    static inline double pyl_softmax_p(float *s, int n, float mx) {
        double sum = 0.0;
        int j;
        for (j = n; j < ((n + 7) & ~7); j++)
            s[j] = -INFINITY;
        for (j = 0; j < n; j += 8) {
            __m256 p = pyl_exp8(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(mx)));
            _mm256_storeu_ps(s + j, p);
            sum += (double)pyl_hsum8(p);
        }
        return sum;
    }

    /* out[0:nd] = inv * sum_j p[j] * v_j[d0 : d0 + nd], nd <= 64, in registers */
    static inline __attribute__((always_inline)) void pyl_pv_block(
            const float *p, const uint8_t *v, int64_t vst, int f16, const int32_t *cells, int n,
            int d0, int nd, float inv, float *out) {
        __m256 acc[8];
        int j, b, nb = nd / 8, i;
        for (b = 0; b < 8; b++)
            acc[b] = _mm256_setzero_ps();
        if (nb == 8) {
            for (j = 0; j < n; j++) {
                const uint8_t *row = v + (int64_t)cells[j] * vst;
                __m256 pj = _mm256_set1_ps(p[j]);
                for (b = 0; b < 8; b++)
                    acc[b] = _mm256_fmadd_ps(pj, pyl_ld8(row, f16, d0 + 8 * b), acc[b]);
            }
        } else {
            for (j = 0; j < n; j++) {
                const uint8_t *row = v + (int64_t)cells[j] * vst;
                __m256 pj = _mm256_set1_ps(p[j]);
                for (b = 0; b < nb; b++)
                    acc[b] = _mm256_fmadd_ps(pj, pyl_ld8(row, f16, d0 + 8 * b), acc[b]);
            }
        }
        for (b = 0; b < nb; b++)
            _mm256_storeu_ps(out + 8 * b, _mm256_mul_ps(acc[b], _mm256_set1_ps(inv)));
        for (i = 8 * nb; i < nd; i++) {          /* lanes past the last full 8: scalar */
            float a = 0.0f;
            for (j = 0; j < n; j++)
                a += p[j] * pyl_ld1(v + (int64_t)cells[j] * vst, f16, d0 + i);
            out[i] = a * inv;
        }
    }
    #endif

    static inline __attribute__((always_inline)) void pyl_attn_task_t(
            const float *q, const uint8_t *k, const uint8_t *v, int64_t kst, int64_t vst,
            const int f16, const int32_t *cells, int n, int dk, int dv, float scale, float cap,
            float *s, float *out) {
        float mx = -INFINITY, inv_cap = cap > 0.0f ? 1.0f / cap : 0.0f, inv;
        double sum = 0.0;
        int j, t, d0;
        if (n <= 0) {
            memset(out, 0, sizeof(float) * (size_t)dv);
            return;
        }
    #if PYL_VM_SIMD
        for (j = 0; j < n; j += 4) {
            const uint8_t *rows[4];
            float r[4];
            for (t = 0; t < 4; t++)           /* past the end: repeat the last listed cell */
                rows[t] = k + (int64_t)cells[j + t < n ? j + t : n - 1] * kst;
            pyl_dot4(q, rows, f16, dk, r);
            for (t = 0; t < 4 && j + t < n; t++) {
                float x = scale * r[t];
                if (cap > 0.0f)
                    x = tanhf(x * inv_cap) * cap;
                s[j + t] = x;
                mx = x > mx ? x : mx;
            }
        }
        sum = pyl_softmax_p(s, n, mx);
        inv = (float)(1.0 / sum);
        for (d0 = 0; d0 < dv; d0 += 64)
            pyl_pv_block(s, v, vst, f16, cells, n, d0, dv - d0 < 64 ? dv - d0 : 64, inv, out + d0);
    #else
        for (j = 0; j < n; j++) {
            const uint8_t *row = k + (int64_t)cells[j] * kst;
            float x = 0.0f;
            for (t = 0; t < dk; t++)
                x += q[t] * pyl_ld1(row, f16, t);
            x *= scale;
            if (cap > 0.0f)
                x = tanhf(x * inv_cap) * cap;
            s[j] = x;
            mx = x > mx ? x : mx;
        }
        for (j = 0; j < n; j++) {
            s[j] = expf(s[j] - mx);
            sum += (double)s[j];
        }
        inv = (float)(1.0 / sum);
        memset(out, 0, sizeof(float) * (size_t)dv);
        for (j = 0; j < n; j++) {
            const uint8_t *row = v + (int64_t)cells[j] * vst;
            for (t = 0; t < dv; t++)
                out[t] += s[j] * pyl_ld1(row, f16, t);
        }
        for (t = 0; t < dv; t++)
            out[t] *= inv;
        (void)d0;
    #endif
    }

    /* One (query, head) task. k/v: the head's first element in cell 0; kst/vst: row strides in
       bytes; s: scratch, n rounded up to 8 floats; out [dv] (overwritten). */
    static void pyl_attn_task(const float *q, const uint8_t *k, const uint8_t *v, int64_t kst,
                              int64_t vst, int f16, const int32_t *cells, int n, int dk, int dv,
                              float scale, float cap, float *s, float *out) {
        if (f16)
            pyl_attn_task_t(q, k, v, kst, vst, 1, cells, n, dk, dv, scale, cap, s, out);
        else
            pyl_attn_task_t(q, k, v, kst, vst, 0, cells, n, dk, dv, scale, cap, s, out);
    }
    """
    int PYL_VM_SIMD
    void pyl_attn_task(const float* q, const uint8_t* k, const uint8_t* v, int64_t kst,
                       int64_t vst, int f16, const int32_t* cells, int n, int dk, int dv,
                       float scale, float cap, float* s, float* out) noexcept nogil


def simd():
    """True when the AVX2/FMA/F16C kernels were compiled in."""
    return bool(PYL_VM_SIMD)


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
    cdef const int32_t* cp = &cells[0] if cells.shape[0] > 0 else NULL
    cdef float[:, ::1] scratch       # one row of scores per thread
    if n_tasks == 0:
        return
    if cp == NULL or max_len <= 0:
        out[:, :, :] = 0
        return
    scratch = np.empty((max(n_threads, 1), max_len + 8), dtype=np.float32)
    for t in prange(n_tasks, nogil=True, num_threads=n_threads, schedule="dynamic", chunksize=4):
        i = t // n_head
        h = t % n_head
        g = h // group
        pyl_attn_task(&q[i, h, 0], &kb[0, 0] + g * dk * esz, &vb[0, 0] + g * dv * esz,
                      kst, vst, f16, cp + q_start[i], <int>(q_end[i] - q_start[i]),
                      dk, dv, scale, softcap, &scratch[threadid(), 0], &out[i, h, 0])
