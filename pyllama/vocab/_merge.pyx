# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The merge step of llama.cpp's tokenizers, built in milliseconds straight from the GGUF arrays.

- TokenTable: the vocab as one packed byte array in GGUF's own layout (u64 length + bytes per
  entry) with an open-addressing hash text -> id (later duplicates win, as token_to_id).
- MergeTable: BPE merges "left right" -> (rank, id of left+right), the first of duplicates wins.
- Merger.encode: pieces from the splitter (vocab.py) -> ids. A text piece runs through
  llama.cpp's llm_tokenizer_spm_session (SPM: spaces escaped to U+2581, UTF-8 characters merged
  by best score then leftmost, unmatched symbols as <0xXX> bytes) or its BPE session (byte-level:
  one symbol per byte, merged by lowest rank then leftmost; optional whole-word lookup first).
  Pieces under 256 bytes keep their ids in a cache (as `tokenizers` caches words), and SPM's
  bigram lookups go through a small memo: the vocab table is large, each probe a cache miss.
Nothing here releases the GIL, so one Merger may serve several threads.
"""
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy

import numpy as np

cdef extern from *:
    """
    static inline uint64_t pyl_fnv(const uint8_t *p, int64_t n) {
        uint64_t h = 1469598103934665603ULL;
        for (int64_t i = 0; i < n; i++) { h ^= p[i]; h *= 1099511628211ULL; }
        return h ^ (h >> 29);
    }
    typedef struct { uint64_t hash; int32_t id; uint8_t len; uint8_t text[19]; } pyl_memo_t;
    static const uint8_t pyl_utf8_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    static inline uint64_t pyl_mix(uint64_t k) {
        k ^= k >> 33; k *= 0xff51afd7ed558ccdULL; k ^= k >> 33;
        k *= 0xc4ceb9fe1a85ec53ULL; k ^= k >> 33; return k;
    }
    """
    uint64_t pyl_fnv(const uint8_t *p, int64_t n) nogil
    uint64_t pyl_mix(uint64_t k) nogil
    ctypedef struct pyl_memo_t:
        uint64_t hash
        int32_t id
        uint8_t len
        uint8_t text[19]
    const uint8_t pyl_utf8_len[16]


cdef enum:
    MEMO_SIZE = 8192
    CACHE_MAX_BYTES = 256       # `tokenizers`' word cache: words under 256 characters,
    CACHE_ENTRIES = 10000       # at most 10000 of them


cdef uint64_t _capacity(int64_t n):
    cdef uint64_t cap = 16
    while cap < <uint64_t>(2 * n):
        cap <<= 1
    return cap


def scan(const uint8_t[::1] raw, int64_t count):
    """(offsets, lengths) int64 of `count` GGUF strings packed in `raw` from its start."""
    offs = np.empty(count, dtype=np.int64)
    lens = np.empty(count, dtype=np.int64)
    cdef int64_t[::1] o = offs, l = lens
    cdef int64_t pos = 0, i, n, size = raw.shape[0]
    cdef uint64_t u
    for i in range(count):
        if pos + 8 > size:
            raise ValueError(f"string array truncated at entry {i}")
        memcpy(&u, &raw[pos], 8)
        if u > <uint64_t>(size - pos - 8):
            raise ValueError(f"string array entry {i} runs past its end")
        o[i] = pos + 8
        l[i] = <int64_t>u
        pos += 8 + <int64_t>u
    return offs, lens


cdef class TokenTable:
    """Token texts (bytes, exact) and the hash text -> id over them."""
    cdef readonly object packed, spans
    cdef const uint8_t *base
    cdef const int64_t *span    # [n, 2]: offset, length (one cache line holds both)
    cdef int32_t n
    cdef uint64_t *slots        # hash tag << 32 | (id + 1); 0: empty
    cdef uint64_t mask

    def __cinit__(self, packed, offsets, lengths):
        self.packed = np.ascontiguousarray(packed, dtype=np.uint8)
        self.spans = np.stack([np.asarray(offsets, dtype=np.int64),
                               np.asarray(lengths, dtype=np.int64)], axis=1)
        cdef const uint8_t[::1] p = self.packed
        cdef const int64_t[:, ::1] sp = self.spans
        self.n = <int32_t>sp.shape[0]
        self.base = &p[0] if p.shape[0] else NULL
        self.span = &sp[0, 0] if self.n else NULL
        cdef uint64_t cap = _capacity(self.n)
        self.mask = cap - 1
        self.slots = <uint64_t *>calloc(cap, sizeof(uint64_t))
        if self.slots == NULL:
            raise MemoryError()
        cdef int32_t i
        for i in range(self.n):
            self._insert(i)

    def __dealloc__(self):
        free(self.slots)

    cdef void _insert(self, int32_t i) noexcept nogil:
        cdef const uint8_t *p = self.base + self.span[2 * i]
        cdef int64_t n = self.span[2 * i + 1]
        cdef uint64_t hash = pyl_fnv(p, n), tag = hash >> 32
        cdef uint64_t h = hash & self.mask, s
        while True:
            s = self.slots[h]
            if s == 0 or (s >> 32) == tag and self._same(<int32_t><uint32_t>s - 1, p, n):
                self.slots[h] = (tag << 32) | <uint64_t>(i + 1)   # a later duplicate replaces the earlier id
                return
            h = (h + 1) & self.mask

    cdef inline bint _same(self, int32_t j, const uint8_t *p, int64_t n) noexcept nogil:
        return self.span[2 * j + 1] == n and memcmp(self.base + self.span[2 * j], p, n) == 0

    cdef int32_t find_c(self, const uint8_t *p, int64_t n) noexcept nogil:
        return self.find_h(p, n, pyl_fnv(p, n))

    cdef int32_t find_h(self, const uint8_t *p, int64_t n, uint64_t hash) noexcept nogil:
        cdef uint64_t tag = hash >> 32
        cdef uint64_t h = hash & self.mask, s
        cdef int32_t j
        while True:
            s = self.slots[h]
            if s == 0:
                return -1
            if (s >> 32) == tag:
                j = <int32_t><uint32_t>s - 1
                if self._same(j, p, n):
                    return j
            h = (h + 1) & self.mask

    def find(self, const uint8_t[::1] text) -> int:
        """The id of the token whose bytes are `text`, or -1."""
        if text.shape[0] == 0:
            return self.find_c(<const uint8_t *>"", 0)
        return self.find_c(&text[0], text.shape[0])

    def raw(self, int64_t i) -> bytes:
        if not 0 <= i < self.n:
            raise IndexError(i)
        cdef int64_t o = self.span[2 * i], n = self.span[2 * i + 1]
        return (<const char *>self.base)[o:o + n] if n else b""

    def text(self, int64_t i) -> str:
        return self.raw(i).decode("utf-8", "replace")

    def __getitem__(self, int64_t i) -> str:
        return self.text(i)

    def __len__(self):
        return self.n


cdef class MergeTable:
    """BPE merges keyed by the (left id, right id) pair: value rank and merged id."""
    cdef uint64_t *keys
    cdef int32_t *ranks
    cdef int32_t *new_ids
    cdef uint64_t mask
    cdef readonly int32_t n

    def __cinit__(self, TokenTable vocab, const uint8_t[::1] packed, const int64_t[::1] offs,
                  const int64_t[::1] lens):
        self.n = <int32_t>offs.shape[0]
        cdef uint64_t cap = _capacity(self.n), k
        self.mask = cap - 1
        self.keys = <uint64_t *>malloc(cap * sizeof(uint64_t))
        self.ranks = <int32_t *>malloc(cap * sizeof(int32_t))
        self.new_ids = <int32_t *>malloc(cap * sizeof(int32_t))
        if self.keys == NULL or self.ranks == NULL or self.new_ids == NULL:
            raise MemoryError()
        for k in range(cap):
            self.ranks[k] = -1
        cdef int32_t r, a, b, c
        cdef int64_t n, sp
        cdef const uint8_t *p
        for r in range(self.n):
            p = &packed[offs[r]] if lens[r] else <const uint8_t *>""
            n = lens[r]
            sp = 1                          # llama.cpp: word.find(' ', 1)
            while sp < n and p[sp] != 32:
                sp += 1
            if sp >= n:
                raise ValueError(f"bad merge entry {(<const char *>p)[:n]!r}")
            a = vocab.find_c(p, sp)
            b = vocab.find_c(p + sp + 1, n - sp - 1)
            c = self._joined(vocab, p, sp, n)
            if a < 0 or b < 0 or c < 0:
                raise ValueError(f"merge {(<const char *>p)[:n]!r} names a token not in the vocab")
            self._insert(a, b, r, c)

    def __dealloc__(self):
        free(self.keys)
        free(self.ranks)
        free(self.new_ids)

    cdef int32_t _joined(self, TokenTable vocab, const uint8_t *p, int64_t sp,
                         int64_t n) except? -2:
        cdef uint8_t small[256]
        cdef uint8_t *buf = &small[0]
        if n > 256:
            buf = <uint8_t *>malloc(n)
            if buf == NULL:
                raise MemoryError()
        memcpy(buf, p, sp)
        memcpy(buf + sp, p + sp + 1, n - sp - 1)
        cdef int32_t c = vocab.find_c(buf, n - 1)
        if n > 256:
            free(buf)
        return c

    cdef void _insert(self, int32_t a, int32_t b, int32_t rank, int32_t c) noexcept nogil:
        cdef uint64_t key = (<uint64_t>a << 32) | <uint32_t>b
        cdef uint64_t h = pyl_mix(key) & self.mask
        while self.ranks[h] >= 0:
            if self.keys[h] == key:
                return                      # llama.cpp's bpe_ranks.emplace: the first wins
            h = (h + 1) & self.mask
        self.keys[h], self.ranks[h], self.new_ids[h] = key, rank, c

    cdef inline int32_t lookup(self, int32_t a, int32_t b, int32_t *new_id) noexcept nogil:
        cdef uint64_t key = (<uint64_t>a << 32) | <uint32_t>b
        cdef uint64_t h = pyl_mix(key) & self.mask
        while self.ranks[h] >= 0:
            if self.keys[h] == key:
                new_id[0] = self.new_ids[h]
                return self.ranks[h]
            h = (h + 1) & self.mask
        return -1



cdef struct Bigram:
    double key          # SPM: -score; BPE: rank (smaller pops first)
    int32_t left, right, size, new_id


cdef struct Work:
    int64_t *start
    int32_t *n
    int32_t *prev
    int32_t *next
    int32_t *id
    Bigram *heap
    int64_t heap_len, heap_cap, cap
    uint8_t *text       # SPM: the escaped piece; BPE: the byte-level form of a word
    int64_t text_cap


cdef int32_t _merge_top(Work *w) noexcept nogil:
    """Pop the best bigram; if both symbols are still as it saw them, merge right into left
    (length, id, links) and return left, else -1 (a stale entry). llama.cpp's SPM and BPE loop."""
    cdef Bigram b = _pop(w)
    cdef int32_t left = b.left, right = b.right
    if w.n[left] == 0 or w.n[right] == 0 or w.n[left] + w.n[right] != b.size:
        return -1
    w.n[left] += w.n[right]
    w.n[right] = 0
    w.id[left] = b.new_id
    w.next[left] = w.next[right]
    if w.next[right] >= 0:
        w.prev[w.next[right]] = left
    return left


cdef inline bint _less(Bigram *a, Bigram *b) noexcept nogil:
    return a.key < b.key or (a.key == b.key and a.left < b.left)


cdef int _push(Work *w, double key, int32_t left, int32_t right, int32_t size,
               int32_t new_id) except -1 nogil:
    cdef Bigram *h
    cdef int64_t i, parent
    if w.heap_len == w.heap_cap:
        w.heap_cap = 2 * w.heap_cap + 16
        h = <Bigram *>realloc(w.heap, w.heap_cap * sizeof(Bigram))
        if h == NULL:
            with gil:
                raise MemoryError()
        w.heap = h
    h = w.heap
    i = w.heap_len
    w.heap_len += 1
    h[i].key, h[i].left, h[i].right, h[i].size, h[i].new_id = key, left, right, size, new_id
    while i > 0:
        parent = (i - 1) >> 1
        if not _less(&h[i], &h[parent]):
            break
        h[i], h[parent] = h[parent], h[i]
        i = parent
    return 0


cdef Bigram _pop(Work *w) noexcept nogil:
    cdef Bigram *h = w.heap
    cdef Bigram top = h[0]
    cdef int64_t i = 0, c, n
    w.heap_len -= 1
    n = w.heap_len
    h[0] = h[n]
    while True:
        c = 2 * i + 1
        if c >= n:
            break
        if c + 1 < n and _less(&h[c + 1], &h[c]):
            c += 1
        if not _less(&h[c], &h[i]):
            break
        h[i], h[c] = h[c], h[i]
        i = c
    return top


cdef int _reserve(Work *w, int64_t n) except -1:
    if n <= w.cap:
        return 0
    cdef int64_t cap = max(n, 2 * w.cap)
    w.start = <int64_t *>realloc(w.start, cap * sizeof(int64_t))
    w.n = <int32_t *>realloc(w.n, cap * sizeof(int32_t))
    w.prev = <int32_t *>realloc(w.prev, cap * sizeof(int32_t))
    w.next = <int32_t *>realloc(w.next, cap * sizeof(int32_t))
    w.id = <int32_t *>realloc(w.id, cap * sizeof(int32_t))
    if not (w.start and w.n and w.prev and w.next and w.id):
        raise MemoryError()
    w.cap = cap
    return 0


cdef int _reserve_text(Work *w, int64_t n) except -1:
    if n > w.text_cap:
        w.text = <uint8_t *>realloc(w.text, n)
        if w.text == NULL:
            raise MemoryError()
        w.text_cap = n
    return 0


cdef void _release(Work *w) noexcept:
    free(w.start)
    free(w.n)
    free(w.prev)
    free(w.next)
    free(w.id)
    free(w.heap)
    free(w.text)


cdef void memset_work(Work *w) noexcept:
    w.start = NULL
    w.n = NULL
    w.prev = NULL
    w.next = NULL
    w.id = NULL
    w.heap = NULL
    w.text = NULL
    w.heap_len = w.heap_cap = w.cap = w.text_cap = 0


cdef inline int64_t _utf8_len(uint8_t c) noexcept nogil:
    return pyl_utf8_len[c >> 4]


cdef class Merger:
    """The model step for one vocab (see module doc)."""
    cdef TokenTable vocab
    cdef MergeTable merges
    cdef const float[::1] scores
    cdef int32_t byte_ids[256]         # SPM: <0xXX> (or the byte itself); BPE: byte-level char
    cdef uint8_t bl_text[256][2]       # BPE: the byte-level character of each byte (UTF-8)
    cdef uint8_t bl_len[256]
    cdef bint spm, ignore_merges, space_prefix
    cdef pyl_memo_t *memo               # SPM: recent text -> id lookups (direct-mapped)
    cdef dict cache                     # short text piece (bytes) -> ids

    def __cinit__(self, TokenTable vocab, MergeTable merges, scores, byte_ids, bytelevel,
                  bint ignore_merges, bint space_prefix):
        """SPM when `merges` is None (then `scores` float32 per token), else BPE with
        `bytelevel[b]` the UTF-8 text standing for byte b. byte_ids[b]: token id or -1."""
        self.vocab, self.merges = vocab, merges
        self.spm = merges is None
        self.scores = np.ascontiguousarray(scores if scores is not None else
                                           np.zeros(len(vocab), np.float32), dtype=np.float32)
        self.ignore_merges, self.space_prefix = ignore_merges, space_prefix
        self.cache = {}
        self.memo = <pyl_memo_t *>calloc(MEMO_SIZE, sizeof(pyl_memo_t))
        if self.memo == NULL:
            raise MemoryError()
        cdef int i
        for i in range(256):
            self.byte_ids[i] = byte_ids[i]
            t = bytelevel[i] if bytelevel is not None else b""
            self.bl_len[i] = len(t)
            for j in range(len(t)):
                self.bl_text[i][j] = t[j]

    def __dealloc__(self):
        free(self.memo)

    cdef int32_t _find(self, const uint8_t *p, int64_t n) noexcept nogil:
        """vocab.find_c through the memo: the vocab table is large and each probe a cache
        miss, while a text repeats the same few thousand bigrams."""
        if n > 19:
            return self.vocab.find_c(p, n)
        cdef uint64_t h = pyl_fnv(p, n)
        cdef pyl_memo_t *e = &self.memo[h & (MEMO_SIZE - 1)]
        if e.hash == h and e.len == n and memcmp(e.text, p, n) == 0:
            return e.id
        e.hash, e.len, e.id = h, <uint8_t>n, self.vocab.find_h(p, n, h)
        memcpy(e.text, p, n)
        return e.id

    def encode(self, bytes text, list pieces, const int64_t[::1] bpos,
               const int32_t[::1] remap) -> list:
        """`text` UTF-8; `pieces`: (splitter id, (char start, char end)) pairs, id 0 is text,
        others map to vocab ids through `remap`. bpos: byte offset of each character (None
        when ASCII). Short text pieces are cached (as `tokenizers` caches words)."""
        cdef Work w
        memset_work(&w)
        out = []
        cdef const uint8_t *data = <const uint8_t *><const char *>text
        cdef int64_t s, e, k
        cdef int sid
        try:
            for sid, (s, e) in pieces:
                if sid:
                    out.append(remap[sid])
                    continue
                if bpos is not None:
                    s, e = bpos[s], bpos[e]
                if e <= s:
                    continue
                if e - s > CACHE_MAX_BYTES:
                    self._piece(&w, data + s, e - s, out)
                    continue
                key = text[s:e]
                hit = self.cache.get(key)
                if hit is not None:
                    out.extend(<list>hit)
                    continue
                k = len(out)
                self._piece(&w, data + s, e - s, out)
                if len(self.cache) < CACHE_ENTRIES:
                    self.cache[key] = out[k:]
        finally:
            _release(&w)
        return out

    cdef int _piece(self, Work *w, const uint8_t *src, int64_t n, list out) except -1:
        if self.spm:
            return self._spm(w, src, n, out)
        return self._bpe(w, src, n, out)

    cdef int _spm(self, Work *w, const uint8_t *src, int64_t n, list out) except -1:
        # llama_escape_whitespace on ' ' + text (the prefix when add_space_prefix)
        cdef int64_t i, m = 0, k
        _reserve_text(w, 3 * (n + 1))
        cdef uint8_t *t = w.text
        for i in range(-1 if self.space_prefix else 0, n):
            if i < 0 or src[i] == 32:
                t[m], t[m + 1], t[m + 2] = 0xE2, 0x96, 0x81
                m += 3
            else:
                t[m] = src[i]
                m += 1
        _reserve(w, m)
        cdef int32_t ns = 0
        i = 0
        while i < m:
            k = min(m - i, _utf8_len(t[i]))
            w.start[ns], w.n[ns], w.prev[ns], w.next[ns] = i, <int32_t>k, ns - 1, ns + 1
            ns += 1
            i += k
        if ns == 0:
            return 0
        self._merge_all(w, ns, True)
        i = 0
        while i != -1:
            self._resegment(w, <int32_t>i, out)
            i = w.next[i]
        return 0

    cdef int _merge_all(self, Work *w, int32_t ns, bint spm) except -1:
        """Link symbols 0..ns-1, queue every adjacent pair, merge until no pair is left
        (llama.cpp's SPM loop when spm, else its BPE loop)."""
        cdef int32_t i, left
        w.next[ns - 1] = -1
        w.heap_len = 0
        for i in range(1, ns):
            self._pair(w, spm, i - 1, i)
        while w.heap_len:
            left = _merge_top(w)
            if left >= 0:
                self._pair(w, spm, w.prev[left], left)
                self._pair(w, spm, left, w.next[left])
        return 0

    cdef inline int _pair(self, Work *w, bint spm, int32_t left, int32_t right) except -1:
        return self._spm_pair(w, left, right) if spm else self._bpe_pair(w, left, right)

    cdef int _spm_pair(self, Work *w, int32_t left, int32_t right) except -1:
        if left < 0 or right < 0:
            return 0
        cdef int32_t size = w.n[left] + w.n[right]
        cdef int32_t tok = self._find(w.text + w.start[left], size)
        if tok >= 0:
            _push(w, -<double>self.scores[tok], left, right, size, tok)
        return 0

    cdef int _resegment(self, Work *w, int32_t i, list out) except -1:
        cdef int32_t tok = self._find(w.text + w.start[i], w.n[i])
        cdef int64_t j
        if tok >= 0:
            out.append(tok)
            return 0
        for j in range(w.start[i], w.start[i] + w.n[i]):
            if self.byte_ids[w.text[j]] >= 0:
                out.append(self.byte_ids[w.text[j]])
        return 0

    cdef int _bpe(self, Work *w, const uint8_t *src, int64_t n, list out) except -1:
        cdef int64_t i, m = 0
        cdef int32_t tok, ns = 0, new_id, rank
        if self.ignore_merges:
            _reserve_text(w, 2 * n)
            for i in range(n):
                memcpy(w.text + m, self.bl_text[src[i]], self.bl_len[src[i]])
                m += self.bl_len[src[i]]
            tok = self.vocab.find_c(w.text, m)
            if tok >= 0:
                out.append(tok)
                return 0
        _reserve(w, n)
        for i in range(n):
            tok = self.byte_ids[src[i]]
            if tok < 0:
                continue                    # a byte with no token is dropped
            w.start[ns], w.n[ns], w.prev[ns], w.next[ns], w.id[ns] = i, 1, ns - 1, ns + 1, tok
            ns += 1
        if ns == 0:
            return 0
        self._merge_all(w, ns, False)
        i = 0
        while i != -1:
            out.append(w.id[i])
            i = w.next[i]
        return 0

    cdef int _bpe_pair(self, Work *w, int32_t left, int32_t right) except -1:
        if left < 0 or right < 0:
            return 0
        cdef int32_t new_id = -1
        cdef int32_t rank = self.merges.lookup(w.id[left], w.id[right], &new_id)
        if rank >= 0:
            _push(w, <double>rank, left, right, w.n[left] + w.n[right], new_id)
        return 0


