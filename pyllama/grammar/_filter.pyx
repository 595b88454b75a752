# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The vocabulary walk of the grammar token filter (filter.py has the model).

The pieces are sorted by their bytes, so a trie walk is a walk over the sorted list that reuses
the states of the common prefix with the previous piece (`lcp`). UTF-8 is decoded here exactly
as llama.cpp's decode_utf8 does (continuation bytes are checked only when they continue a
sequence begun by an earlier token); a stack state id moves on each completed code point through
a hash table (state, code point) -> state, filled by the owner in Python on a miss
(`owner.step(state, cp)`, -1: rejected). A piece may end in a state when no sequence is pending,
or when its pending sequence can still match (`owner.end(state, value, n_remain)`, cached too).
"""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int8_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef int[16] LEAD_LEN = [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4]


def sorted_pieces(list pieces):
    """(order [n] int32, buf uint8, offs [n] int64, lens [n] int32, lcp [n] int32, max_len) of
    the non-empty pieces sorted by bytes; lcp[k] is the common prefix length with piece k-1."""
    cdef Py_ssize_t n, k, i, m
    idx = [i for i in range(len(pieces)) if len(pieces[i]) > 0]
    idx.sort(key=pieces.__getitem__)
    n = len(idx)
    order = np.asarray(idx, dtype=np.int32)
    lens_np = np.fromiter((len(pieces[i]) for i in idx), dtype=np.int32, count=n)
    offs_np = np.zeros(n, dtype=np.int64)
    if n > 1:
        np.cumsum(lens_np[:n - 1], out=offs_np[1:])
    buf_np = np.frombuffer(b"".join([pieces[i] for i in idx]), dtype=np.uint8).copy()
    lcp_np = np.zeros(n, dtype=np.int32)
    cdef const uint8_t[::1] buf = buf_np
    cdef int64_t[::1] offs = offs_np
    cdef int32_t[::1] lens = lens_np
    cdef int32_t[::1] lcp = lcp_np
    cdef Py_ssize_t prev
    for k in range(1, n):
        prev = k - 1
        m = min(lens[k], lens[prev])
        i = 0
        while i < m and buf[offs[k] + i] == buf[offs[prev] + i]:
            i += 1
        lcp[k] = i
    return order, buf_np, offs_np, lens_np, lcp_np, int(lens_np.max()) if n else 0


cdef inline int64_t _step_key(int32_t sid, uint32_t cp):
    return (<int64_t>sid << 32) | cp


cdef inline int64_t _end_key(int32_t sid, uint32_t value, int n_remain):
    return (<int64_t>sid << 32) | 0x80000000u | (<uint32_t>n_remain << 24) | value


cdef class Walker:
    """The (state, code point) -> state and (state, partial) -> may-end caches of one grammar
    over one vocabulary, and the walks over them."""
    cdef object owner
    cdef int64_t[::1] keys
    cdef int32_t[::1] vals
    cdef object _keys_np, _vals_np
    cdef Py_ssize_t cap, count
    cdef int32_t[::1] st_sid
    cdef uint32_t[::1] st_val
    cdef int8_t[::1] st_rem
    cdef int8_t[::1] st_ph
    cdef object _scratch
    # per state, the code points cut into intervals on which every stack top's char class
    # answers the same, so one step result serves a whole interval
    cdef int64_t[::1] iv_off
    cdef int32_t[::1] iv_len
    cdef uint32_t[::1] iv_bound
    cdef int32_t[::1] iv_res
    cdef object _iv
    cdef Py_ssize_t iv_used

    def __init__(self, owner, int max_len):
        self.owner = owner
        self._alloc(1 << 14)
        self._iv_alloc(1024, 1 << 14)
        n = max_len + 2
        self._scratch = (np.zeros(n, np.int32), np.zeros(n, np.uint32), np.zeros(n, np.int8),
                         np.zeros(n, np.int8))
        self.st_sid, self.st_val, self.st_rem, self.st_ph = self._scratch

    def _alloc(self, Py_ssize_t cap):
        self._keys_np = np.full(cap, -1, dtype=np.int64)
        self._vals_np = np.zeros(cap, dtype=np.int32)
        self.keys, self.vals = self._keys_np, self._vals_np
        self.cap, self.count = cap, 0

    def _iv_alloc(self, Py_ssize_t n_states, Py_ssize_t n_bounds):
        off = np.full(n_states, -1, dtype=np.int64)
        ln = np.zeros(n_states, dtype=np.int32)
        bd = np.zeros(n_bounds, dtype=np.uint32)
        rs = np.full(n_bounds, -3, dtype=np.int32)
        if self._iv is not None:
            o_off, o_len, o_bd, o_rs = self._iv
            off[:o_off.shape[0]] = o_off
            ln[:o_len.shape[0]] = o_len
            bd[:o_bd.shape[0]] = o_bd
            rs[:o_rs.shape[0]] = o_rs
        else:
            self.iv_used = 0
        self._iv = (off, ln, bd, rs)
        self.iv_off, self.iv_len, self.iv_bound, self.iv_res = off, ln, bd, rs

    cdef int32_t _interval_step(self, int32_t sid, uint32_t cp) except -3:
        cdef Py_ssize_t off, lo, hi, mid, n
        cdef int32_t v
        if sid >= self.iv_off.shape[0]:
            self._iv_alloc(max(2 * self.iv_off.shape[0], sid + 1), self.iv_bound.shape[0])
        if self.iv_off[sid] < 0:
            bounds = self.owner.bounds(sid)  # sorted, starting at 0
            n = len(bounds)
            if self.iv_used + n > self.iv_bound.shape[0]:
                self._iv_alloc(self.iv_off.shape[0], max(2 * self.iv_bound.shape[0],
                                                         self.iv_used + n))
            for lo in range(n):
                self.iv_bound[self.iv_used + lo] = bounds[lo]
            self.iv_off[sid] = self.iv_used
            self.iv_len[sid] = <int32_t>n
            self.iv_used += n
        off, n = self.iv_off[sid], self.iv_len[sid]
        lo, hi = 0, n - 1  # the last bound <= cp
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if self.iv_bound[off + mid] <= cp:
                lo = mid
            else:
                hi = mid - 1
        v = self.iv_res[off + lo]
        if v == -3:
            v = self.owner.step(sid, cp)
            self.iv_res[off + lo] = v
        return v

    def clear(self):
        self._alloc(1 << 14)

    @property
    def size(self):
        return self.count

    cdef int32_t _get(self, int64_t key):
        cdef Py_ssize_t m = self.cap - 1
        cdef Py_ssize_t h = <Py_ssize_t>(((<uint64_t>key * <uint64_t>0x9E3779B97F4A7C15) >> 32) & <uint64_t>m)
        while True:
            if self.keys[h] == key:
                return self.vals[h]
            if self.keys[h] == -1:
                return -2
            h = (h + 1) & m

    cdef void _put(self, int64_t key, int32_t val):
        cdef Py_ssize_t m, h, i
        if (self.count + 1) * 2 > self.cap:
            old_k, old_v = self._keys_np, self._vals_np
            self._alloc(self.cap * 2)
            ks, vs = old_k[old_k != -1], old_v[old_k != -1]
            for i in range(ks.shape[0]):
                self._put(ks[i], vs[i])
        m = self.cap - 1
        h = <Py_ssize_t>(((<uint64_t>key * <uint64_t>0x9E3779B97F4A7C15) >> 32) & <uint64_t>m)
        while self.keys[h] != -1 and self.keys[h] != key:
            h = (h + 1) & m
        if self.keys[h] == -1:
            self.count += 1
        self.keys[h] = key
        self.vals[h] = val

    cdef int32_t _step(self, int32_t sid, uint32_t cp) except -3:
        cdef int64_t key = _step_key(sid, cp)
        cdef int32_t v = self._get(key)
        if v == -2:
            v = self._interval_step(sid, cp)
            self._put(key, v)
        return v

    cdef int _end(self, int32_t sid, uint32_t value, int n_remain) except -1:
        cdef int64_t key
        cdef int32_t v
        if n_remain == 0:
            return 1
        key = _end_key(sid, value, n_remain)
        v = self._get(key)
        if v == -2:
            v = 1 if self.owner.end(sid, value, n_remain) else 0
            self._put(key, v)
        return v

    cdef inline int _byte(self, int32_t* sid, uint32_t* val, int8_t* rem, int8_t* ph,
                          uint8_t b) except -3:
        """One byte of decode_utf8; 0 when the piece is rejected, 1 otherwise."""
        cdef int n
        if rem[0] > 0:
            if ph[0] == 1 and (b >> 6) != 2:
                return 0
            val[0] = (val[0] << 6) + (b & 0x3F)
            rem[0] -= 1
            if rem[0] == 0:
                if val[0] == 0:
                    return 0  # llama.cpp's decoded string ends at a 0 code point
                sid[0] = self._step(sid[0], val[0])
                val[0] = 0
                ph[0] = 2
                return 1 if sid[0] >= 0 else 0
            return 1
        n = LEAD_LEN[b >> 4] - 1
        if n < 0:
            return 0
        if n == 0:
            if b == 0:
                return 0
            sid[0] = self._step(sid[0], b)
            return 1 if sid[0] >= 0 else 0
        val[0] = b & ((1 << (7 - n)) - 1)
        rem[0] = n
        ph[0] = 2
        return 1

    def walk(self, int32_t start, uint32_t value, int n_remain, const uint8_t[::1] buf,
             const int64_t[::1] offs, const int32_t[::1] lens, const int32_t[::1] lcp,
             const int32_t[::1] order, uint8_t[::1] out):
        """out[token] = 1 for every piece the grammar accepts from the start state (others
        untouched)."""
        cdef Py_ssize_t n = order.shape[0], k
        cdef int32_t d, L, known = 0, dead_at = -1
        cdef int32_t sid
        cdef uint32_t val
        cdef int8_t rem, ph
        cdef int64_t off
        self.st_sid[0] = start
        self.st_val[0] = value
        self.st_rem[0] = <int8_t>n_remain
        self.st_ph[0] = 1 if n_remain > 0 else 2
        for k in range(n):
            L = lens[k]
            d = lcp[k] if lcp[k] < known else known
            if d == dead_at:
                known = d
                continue
            dead_at = -1
            sid, val, rem, ph = self.st_sid[d], self.st_val[d], self.st_rem[d], self.st_ph[d]
            off = offs[k]
            while d < L:
                if not self._byte(&sid, &val, &rem, &ph, buf[off + d]):
                    dead_at = d + 1
                    d += 1
                    break
                d += 1
                self.st_sid[d], self.st_val[d], self.st_rem[d], self.st_ph[d] = sid, val, rem, ph
            known = d
            if dead_at >= 0:
                continue
            if self._end(sid, val, rem):
                out[order[k]] = 1

    def walk_one(self, int32_t start, uint32_t value, int n_remain, const uint8_t[::1] piece):
        """(state, value, n_remain) after `piece` from the start state; state -1: rejected,
        -2: rejected at its end (a pending sequence that cannot match)."""
        cdef Py_ssize_t i
        cdef int32_t sid = start
        cdef uint32_t val = value
        cdef int8_t rem = <int8_t>n_remain
        cdef int8_t ph = 1 if n_remain > 0 else 2
        for i in range(piece.shape[0]):
            if not self._byte(&sid, &val, &rem, &ph, piece[i]):
                return -1, 0, 0
        if not self._end(sid, val, rem):
            return -2, val, rem
        return sid, val, rem
