"""llama.cpp's model-free drafters ngram-map-k, ngram-map-k4v and ngram-mod (common/ngram-map.cpp,
common/ngram-mod.cpp and their common_speculative_impl_* wrappers in common/speculative.cpp 0c1e570).

In llama.cpp a drafter is called with `inp` (the tokens already in the target cache) and `sampled`
(id_last, not yet decoded). pyllama's Drafter.draft gets `history` = inp + [sampled]; begin() gets
the sequence at the start of a generation (common_speculative_begin). The proposals, the statistics
and the draft length limits follow llama.cpp's code; only the data structures are numpy's.
"""
from __future__ import annotations

import numpy as np

from .drafters import Drafter

# common/ngram-map.h / ngram-map.cpp
NGRAM_MAX_VALUES = 4
NGRAM_HASH_MAP_SIZE = 262144
NGRAM_MAX_VALUE_COUNT = 16380
LCG_FACTOR = 2654435761
_M32 = 0xFFFFFFFF


def map_hash(tokens, start: int, n: int) -> int:
    """common_ngram_map_hash: the 32-bit LCG hash of tokens[start:start + n]."""
    h = 0
    for i in range(n):
        h = (h * LCG_FACTOR + int(tokens[start + i])) & _M32
    return h


def _rfind(h: np.ndarray, key: np.ndarray, hi: int, lo: int) -> int:
    """The largest j with lo < j <= hi and h[j:j + len(key)] == key, else 0 (llama.cpp's
    descending searches, which never test j = lo)."""
    n = len(key)
    hi = min(hi, len(h) - n)
    if hi <= lo:
        return 0
    win = np.lib.stride_tricks.sliding_window_view(h[lo + 1:hi + n], n)
    hits = np.flatnonzero((win == key).all(axis=1))
    return int(hits[-1]) + lo + 1 if len(hits) else 0


class _Value:
    __slots__ = ("value_idx", "value_num", "n_accepted")

    def __init__(self, n_accepted: int):
        self.value_idx, self.value_num, self.n_accepted = 0, 0, n_accepted


class _Key:
    __slots__ = ("key_idx", "stat_idx", "key_num", "values")

    def __init__(self, key_idx: int, m: int):
        self.key_idx, self.stat_idx, self.key_num = key_idx, 0, 0
        self.values = [_Value(m) for _ in range(NGRAM_MAX_VALUES)]


class NgramMapDrafter(Drafter):
    """ngram-map-k (key_only) / ngram-map-k4v (common_ngram_map).

    The key is the last size_n tokens (ending with id_last); its most recent earlier occurrence
    (that leaves size_m tokens after it) is found through a hash map from n-gram hash to index,
    filled as the history grows. ngram-map-k drafts the size_m tokens after the match. ngram-map-k4v
    also tracks up to 4 distinct m-grams that followed the key; it drafts only once the key was
    seen min_hits times and the most frequent m-gram occurred at least twice as often as all the
    others together. A draft is cut to the accepted length of the previous draft of the same
    key/value (common_ngram_map_accept)."""

    def __init__(self, size_n: int = 12, size_m: int = 48, min_hits: int = 1,
                 key_only: bool = True):
        self.n, self.m, self.min_hits, self.key_only = size_n, size_m, min_hits, key_only
        self.name = "ngram-map-k" if key_only else "ngram-map-k4v"
        self.keys: list[_Key] = []
        self.key_map = np.zeros(NGRAM_HASH_MAP_SIZE, dtype=np.int64)
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.idx_last_check = 0
        self.last_draft_created = False
        self.last_draft_key = 0
        self.last_draft_value = 0

    # -- common_ngram_map_begin ------------------------------------------------------------
    def begin(self, tokens: list[int]) -> None:
        size_begin = len(tokens)
        cleanup = self.size_last_begin
        if cleanup > size_begin:
            cleanup = size_begin - self.n - self.m if size_begin > self.n + self.m else 0
        if size_begin < self.idx_last_check:
            stale = (self.key_map != 0) & (self.key_map >= cleanup)
            self.key_map[stale] = 0
            self.key_map_last_idx = cleanup - 1 if cleanup > 0 else 0
            for i in range(len(self.keys) - 1, -1, -1):
                key = self.keys[i]
                if key.key_idx >= cleanup:
                    del self.keys[i]
                    continue
                if self.key_only:
                    continue
                for j in range(NGRAM_MAX_VALUES - 1, -1, -1):
                    v = key.values[j]
                    if v.value_idx != 0 and v.value_idx >= cleanup:
                        # shift the later values left; the last slot is cleared but keeps
                        # its n_accepted
                        kept = key.values[-1].n_accepted
                        del key.values[j]
                        key.values.append(_Value(kept))
                if key.values[0].value_idx == 0:
                    del self.keys[i]
        self.idx_last_check = size_begin
        self.size_last_begin = size_begin

    # -- common_ngram_map_draft -----------------------------------------------------------
    def draft(self, history: list[int], n_max: int) -> list[int]:
        out = self._draft(np.asarray(history[:-1], dtype=np.int64), int(history[-1]))
        return out[:n_max]

    def _draft(self, inp: np.ndarray, sampled: int) -> list[int]:
        self.last_draft_created = False
        self.last_draft_key = self.last_draft_value = 0
        cur_len, n, m = len(inp), self.n, self.m
        if cur_len < 2 * n + m:
            return []
        self.idx_last_check = cur_len
        key = np.empty(n, dtype=np.int64)
        key[:n - 1] = inp[cur_len - n + 1:]
        key[n - 1] = sampled
        match_pos = 0
        idx_key = int(self.key_map[map_hash(key, 0, n) % NGRAM_HASH_MAP_SIZE])
        if idx_key != 0 and idx_key < cur_len - n - m - 1 and (inp[idx_key:idx_key + n] == key).all():
            match_pos = idx_key
        slb, last = self.size_last_begin, self.key_map_last_idx
        if match_pos == 0 and slb > n + m + 1:
            match_pos = _rfind(inp, key, slb - n - m - 1, last)
        if match_pos == 0:
            match_pos = _rfind(inp, key, cur_len - n - m - 1, max(slb, last))
        # add the hashes of the new n-grams, in the same descending order (first writer wins)
        if slb > n + m + 1:
            self._add_hashes(inp, slb - n - m - 1, last)
        self._add_hashes(inp, cur_len - n - m - 1, max(slb, last))
        self.key_map_last_idx = max(cur_len - n - m - 1, self.key_map_last_idx)
        if match_pos == 0:
            return []

        for off, k in enumerate(self.keys):
            if (inp[k.key_idx:k.key_idx + n] == key).all():
                break
        else:
            self.keys.append(_Key(match_pos, m))
            off = len(self.keys) - 1
        cur = self.keys[off]
        cur.key_num = min(cur.key_num + 1, NGRAM_MAX_VALUE_COUNT)
        if self.key_only:
            return self._emit(inp, match_pos, off, 0)
        if cur.key_num < self.min_hits:
            return []
        # count the m-grams after each occurrence of the key in [stat_idx, match_pos]
        for i in range(cur.stat_idx, match_pos + 1):
            if not (inp[i:i + n] == key).all():
                continue
            b = i + n
            for v in cur.values:
                if v.value_idx == 0:
                    v.value_idx, v.value_num, v.n_accepted = b, 0, m
                    break
                if (inp[b:b + m] == inp[v.value_idx:v.value_idx + m]).all():
                    break
            else:
                continue
            v.value_num = min(v.value_num + 1, NGRAM_MAX_VALUE_COUNT)
        cur.stat_idx = match_pos
        nums = [v.value_num for v in cur.values]
        slot = int(np.argmax(nums)) if max(nums) > 0 else 0
        others = sum(nums) - nums[slot]
        if others > 0 and nums[slot] < 2 * others:
            return []
        return self._emit(inp, match_pos, off, slot)

    def _emit(self, inp, match_pos: int, off: int, slot: int) -> list[int]:
        """The draft: the tokens after the match (not after the chosen value: llama.cpp copies
        from match_pos for both modes), cut to the value's last accepted length."""
        k = min(self.m, self.keys[off].values[slot].n_accepted)
        self.last_draft_created, self.last_draft_key, self.last_draft_value = True, off, slot
        s = match_pos + self.n
        return [int(t) for t in inp[s:s + k]]

    def _add_hashes(self, inp, hi: int, lo: int) -> None:
        for j in range(hi, lo, -1):
            i = map_hash(inp, j, self.n) % NGRAM_HASH_MAP_SIZE
            if self.key_map[i] == 0:
                self.key_map[i] = j

    def accept(self, n_accepted: int, n_drafted: int | None = None) -> None:
        """common_ngram_map_accept: the next draft from this key/value is at most this long."""
        if self.last_draft_created:
            self.keys[self.last_draft_key].values[self.last_draft_value].n_accepted = n_accepted


# common/ngram-mod.cpp
NGRAM_MOD_SIZE = 4 * 1024 * 1024
_MOD_MUL = 6364136223846793005
EMPTY = -1


class NgramModPool:
    """common_ngram_mod: a table of 4M slots, hash(n tokens) -> the token that followed them
    (the last writer wins; collisions overwrite). Shared by all sequences of a drafter."""

    def __init__(self, n: int, size: int = NGRAM_MOD_SIZE):
        self.n, self.size = n, size
        self.entries = np.full(size, EMPTY, dtype=np.int32)
        self.used = 0

    def reset(self) -> None:
        self.entries.fill(EMPTY)
        self.used = 0

    def idx(self, tokens) -> int:
        """The 64-bit multiply-add hash of tokens[:n], modulo the table size."""
        r = 0
        for t in tokens[:self.n]:
            r = (r * _MOD_MUL + int(t)) & 0xFFFFFFFFFFFFFFFF
        return r % self.size

    def get(self, tokens) -> int:
        return int(self.entries[self.idx(tokens)])

    def add_range(self, toks: np.ndarray, lo: int, hi: int) -> None:
        """add() for the n-grams starting at lo..hi-1 (value toks[i + n]), in that order."""
        if hi <= lo:
            return
        n = self.n
        if self.size & (self.size - 1) == 0:
            # the table size is a power of two: the hash modulo it needs only the low bits
            mask = self.size - 1
            mul = _MOD_MUL & mask
            h = np.zeros(hi - lo, dtype=np.int64)
            for k in range(n):
                h = (h * mul + toks[lo + k:hi + k]) & mask
        else:
            h = np.array([self.idx(toks[i:i + n]) for i in range(lo, hi)], dtype=np.int64)
        vals = toks[lo + n:hi + n]
        # sequential semantics: the last write of each slot wins
        rev_u, rev_i = np.unique(h[::-1], return_index=True)
        last = len(h) - 1 - rev_i
        self.used += int((self.entries[rev_u] == EMPTY).sum())
        self.entries[rev_u] = vals[last]


class NgramModDrafter(Drafter):
    """ngram-mod (common_speculative_impl_ngram_mod): chain lookups in the shared pool from the
    last n_match tokens; drafts at most n_max tokens and nothing when fewer than n_min are found.
    The pool is reset when it is more than 25% full at begin(), and after 5 drafts in a row of
    this sequence with less than a quarter accepted."""
    name = "ngram-mod"

    def __init__(self, n_match: int = 24, n_min: int = 48, n_max: int = 64,
                 pool: NgramModPool | None = None):
        self.pool = pool if pool is not None else NgramModPool(n_match)
        if self.pool.n != n_match:
            raise ValueError(f"ngram-mod pool has n = {self.pool.n}, not {n_match}")
        self.n_min, self.n_max = n_min, n_max
        self.i_last = 0
        self.n_draft_last = 0
        self.n_low = 0

    def begin(self, tokens: list[int]) -> None:
        self.i_last = self.n_draft_last = 0
        n = self.pool.n
        if len(tokens) < n:
            return
        t = np.asarray(tokens, dtype=np.int64)
        self.pool.add_range(t, 0, len(t) - n)
        self.i_last = len(t) - n
        if self.pool.used / self.pool.size > 0.25:
            self.pool.reset()

    def draft(self, history: list[int], n_max: int) -> list[int]:
        self.n_draft_last = 0
        inp = np.asarray(history[:-1], dtype=np.int64)
        n, cur_len = self.pool.n, len(inp)
        if cur_len < n:
            return []
        if self.i_last + 32 < cur_len:
            self.pool.add_range(inp, self.i_last, cur_len - n)
            self.i_last = cur_len - n
        ring = [int(t) for t in inp[cur_len - n + 1:]] + [int(history[-1])]
        out: list[int] = []
        for i in range(self.n_max):
            tok = self.pool.get(ring[i:i + n])
            if tok == EMPTY:
                if i < self.n_min:
                    return []
                break
            ring.append(tok)
            out.append(tok)
        self.n_draft_last = len(out)
        return out[:n_max]

    def cut(self, k: int) -> None:
        """The last draft was cut to k tokens before verification (the cost-aware policy): the
        acceptance ratio is taken over those."""
        self.n_draft_last = min(self.n_draft_last, k)

    def accept(self, n_accepted: int, n_drafted: int | None = None) -> None:
        if self.n_draft_last > 0:
            if n_accepted / self.n_draft_last < 0.25:
                self.n_low += 1
                if self.n_low >= 5:
                    self.pool.reset()
                    self.n_low = 0
                    self.i_last = 0
            else:
                self.n_low = 0


# common_speculative_init's priority order (the first drafter with a non-empty draft wins)
SPEC_PRIORITY = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache",
                 "draft-simple")


def drafter_chain(types, settings: dict, draft=None, draft_n_max: int = 3,
                  mod_pool: NgramModPool | None = None, lookup: tuple | None = None):
    """The drafter for a list of --spec-type values, combined as common_speculative_init does
    (each type once, in SPEC_PRIORITY order, "none" ignored), and the largest draft length any of
    them proposes (common_speculative_n_max). `settings` holds the common_params_speculative
    n-gram fields by their pyllama names (ngram_simple_size_n, ngram_map_k4v_min_hits,
    ngram_mod_n_match, ...; missing ones take llama.cpp's defaults); `draft` is the
    draft-simple drafter (a DraftModelDrafter), used when "draft-simple" is listed; `lookup`
    the (static, dynamic) lookup caches for ngram-cache (else loaded from the settings'
    lookup_cache_static / lookup_cache_dynamic paths).
    Returns (None, 0) when no drafter is enabled."""
    from .drafters import DrafterChain, NgramDrafter

    def g(name, default):
        return settings.get(name, default)
    want = set(types) - {"none"}
    unknown = want - set(SPEC_PRIORITY)
    if unknown:
        raise ValueError(f"unsupported speculative decoding type(s): {sorted(unknown)}")
    ds, lims = [], []
    for t in SPEC_PRIORITY:
        if t not in want:
            continue
        if t == "ngram-simple":
            m = g("ngram_simple_size_m", 48)
            ds.append(NgramDrafter(g("ngram_simple_size_n", 12), m,
                                   min_hits=g("ngram_simple_min_hits", 1)))
        elif t in ("ngram-map-k", "ngram-map-k4v"):
            f = "ngram_map_k_" if t == "ngram-map-k" else "ngram_map_k4v_"
            m = g(f + "size_m", 48)
            ds.append(NgramMapDrafter(g(f + "size_n", 12), m, g(f + "min_hits", 1),
                                      key_only=t == "ngram-map-k"))
        elif t == "ngram-mod":
            m = max(0, g("ngram_mod_n_max", 64))
            ds.append(NgramModDrafter(g("ngram_mod_n_match", 24), g("ngram_mod_n_min", 48), m,
                                      pool=mod_pool))
        elif t == "ngram-cache":
            from .ngram_cache import NgramCacheDrafter, load_lookup
            st, dy = lookup if lookup is not None else load_lookup(settings)
            m = NgramCacheDrafter.N_DRAFT
            ds.append(NgramCacheDrafter(st, dy))
        elif t == "draft-simple":
            if draft is None:
                continue
            m = draft_n_max
            ds.append(draft)
        else:
            raise ValueError(f"speculative decoding type '{t}' is not supported by pyllama yet")
        lims.append(m)
    if not ds:
        return None, 0
    return (ds[0] if len(ds) == 1 else DrafterChain(ds, lims)), max(lims)
