"""ngram-cache drafting and lookup cache files (llama.cpp common/ngram-cache.cpp, the
`ngram-cache` speculative type of common/speculative.cpp and examples/lookup).

A cache maps an n-gram (1..4 tokens, padded to 4 with -1 = LLAMA_TOKEN_NULL) to the counts of the
tokens that followed it. Drafting (common_ngram_cache_draft) extends the draft one token at a
time: the context cache (built from the sequence itself, lax thresholds), then the dynamic cache
(earlier generations, strict thresholds), each trying the longest n-gram first and weighting a
candidate by its count in the static cache (2-grams of a corpus: 100 x count, 1 when absent), then
the static cache alone; the draft stops at the first position none of them can fill.

File format (`--lookup-cache-static/-dynamic`, llama-lookup-create/-merge): a sequence of records,
each the 4 int32 tokens of the n-gram, an int32 count of entries, then that many (int32 token,
int32 count) pairs; little endian, no header. Records are written in insertion order (llama.cpp
writes its unordered_map's order); where two candidates tie exactly, the first one counted wins
here, while llama.cpp takes the first in its hash map's order (a tie only changes a draft, never
the output).
"""
from __future__ import annotations

import struct

from ..errors import PyllamaError
from .drafters import Drafter

NGRAM_MIN, NGRAM_MAX, NGRAM_STATIC = 1, 4, 2
TOKEN_NULL = -1

# the draft is aborted early below these sample sizes / percentages (by n-gram length - 1)
MIN_SAMPLE_LAX = (2, 2, 1, 1)
MIN_PERCENT_LAX = (66, 50, 50, 50)
MIN_SAMPLE_STRICT = (4, 3, 2, 2)
MIN_PERCENT_STRICT = (75, 66, 66, 66)


def _key(tokens) -> tuple:
    t = tuple(int(x) for x in tokens)
    return t + (TOKEN_NULL,) * (NGRAM_MAX - len(t))


def cache_update(cache: dict, ngram_min: int, ngram_max: int, inp, nnew: int) -> None:
    """common_ngram_cache_update: count, for every n-gram size, the token after each n-gram
    ending in the last nnew tokens of inp (inp may only have been appended to since)."""
    n = len(inp)
    inp = [int(t) for t in inp]
    for size in range(ngram_min, ngram_max + 1):
        for i in range(max(n - nnew, size), n):
            key = tuple(inp[i - size:i]) + (TOKEN_NULL,) * (NGRAM_MAX - size)
            part = cache.get(key)
            if part is None:
                cache[key] = {inp[i]: 1}
            else:
                part[inp[i]] = part.get(inp[i], 0) + 1


def _try_static(nc_static: dict, key: tuple) -> int:
    part = nc_static.get(key)
    if part is None:
        return TOKEN_NULL
    best, best_n, total = TOKEN_NULL, 0, 0
    for tok, c in part.items():
        if c > best_n:
            best, best_n = tok, c
        total += c
    if total < MIN_SAMPLE_LAX[NGRAM_STATIC - 1]:
        return TOKEN_NULL
    if 100 * best_n < MIN_PERCENT_LAX[NGRAM_STATIC - 1] * total:
        return TOKEN_NULL
    return best


def _try_primary(nc: dict, keys: list, part_static: dict, min_sample, min_percent) -> int:
    for i in range(len(keys) - 1, -1, -1):
        part = nc.get(keys[i])
        if part is None:
            continue
        best, best_p, best_s, total = TOKEN_NULL, 0, 0, 0
        for tok, c in part.items():
            s = 100 * part_static[tok] if tok in part_static else 1
            if c * s > best_p * best_s:
                best, best_p, best_s = tok, c, s
            total += c
        if total < min_sample[i]:
            continue
        if 100 * best_p < min_percent[i] * total:
            continue
        return best
    return TOKEN_NULL


def cache_draft(inp: list, draft: list, n_draft: int, ngram_min: int, ngram_max: int,
                nc_context: dict, nc_dynamic: dict, nc_static: dict) -> None:
    """common_ngram_cache_draft: extend `draft` (which starts as [id_last], inp ending with
    id_last too) by up to n_draft tokens."""
    assert len(draft) == 1
    n_inp = len(inp)
    if n_inp < NGRAM_STATIC:
        return

    def tok(i):
        return inp[i] if i < n_inp else draft[1 + i - n_inp]
    while len(draft) - 1 < n_draft:
        s0 = n_inp - NGRAM_STATIC + len(draft) - 1
        key_static = _key(tok(j) for j in range(s0, s0 + NGRAM_STATIC))
        part_static = nc_static.get(key_static, {})
        keys = []
        for size in range(ngram_min, ngram_max + 1):
            s = n_inp - size + len(draft) - 1
            keys.append(_key(tok(j) for j in range(s, s + size)))
        t = _try_primary(nc_context, keys, part_static, MIN_SAMPLE_LAX, MIN_PERCENT_LAX)
        if t == TOKEN_NULL:
            t = _try_primary(nc_dynamic, keys, part_static, MIN_SAMPLE_STRICT,
                             MIN_PERCENT_STRICT)
        if t == TOKEN_NULL:
            t = _try_static(nc_static, key_static)
        if t == TOKEN_NULL:
            break
        draft.append(t)


def cache_merge(target: dict, add: dict) -> None:
    """common_ngram_cache_merge: add's counts into target."""
    for key, part in add.items():
        tp = target.get(key)
        if tp is None:
            target[key] = dict(part)
            continue
        for tok, c in part.items():
            tp[tok] = tp.get(tok, 0) + c


def cache_save(cache: dict, path: str) -> None:
    """common_ngram_cache_save: the records described in the module docstring."""
    out = bytearray()
    for key, part in cache.items():
        if not part:
            raise PyllamaError(f"ngram cache entry {key} has no tokens")
        out += struct.pack("<4ii", *key, len(part))
        for tok, c in part.items():
            out += struct.pack("<ii", tok, c)
    with open(path, "wb") as f:
        f.write(out)


def cache_load(path: str) -> dict:
    """common_ngram_cache_load; a missing, truncated or malformed file is a PyllamaError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        raise PyllamaError(f"Unable to open file {path}") from None
    cache: dict = {}
    pos, n = 0, len(data)
    rec = struct.Struct("<4ii")
    while pos < n:
        if pos + rec.size > n:
            raise PyllamaError(f"lookup cache {path}: truncated record at byte {pos}")
        *key, ntok = rec.unpack_from(data, pos)
        pos += rec.size
        if ntok <= 0 or pos + 8 * ntok > n:
            raise PyllamaError(f"lookup cache {path}: bad record at byte {pos - rec.size}")
        vals = struct.unpack_from(f"<{2 * ntok}i", data, pos)
        pos += 8 * ntok
        part = {}
        for j in range(ntok):
            if vals[2 * j + 1] <= 0:
                raise PyllamaError(f"lookup cache {path}: count <= 0 at byte {pos}")
            part[vals[2 * j]] = vals[2 * j + 1]
        cache[tuple(key)] = part
    return cache


class NgramCacheDrafter(Drafter):
    """ngram-cache (common_speculative_impl_ngram_cache): per sequence a context cache of 1..4-grams
    of its tokens, plus the static and dynamic caches loaded from files (shared, read only).
    Drafts up to N_DRAFT = 8 tokens (llama.cpp's fixed n_draft). As in llama.cpp the context cache
    is only appended to: each draft counts the tokens added since the last one (n-grams that span
    two updates are not counted) and nothing is dropped when a new generation starts."""
    name = "ngram-cache"
    N_DRAFT = 8

    def __init__(self, nc_static: dict | None = None, nc_dynamic: dict | None = None):
        self.nc_static = nc_static if nc_static is not None else {}
        self.nc_dynamic = nc_dynamic if nc_dynamic is not None else {}
        self.nc_context: dict = {}
        self.cache_size = 0

    def draft(self, history: list[int], n_max: int) -> list[int]:
        prompt_len = len(history) - 1           # history = prompt + [id_last]
        if self.cache_size < prompt_len + 1:
            new = history[self.cache_size:]
            cache_update(self.nc_context, NGRAM_MIN, NGRAM_MAX, new, len(new))
            self.cache_size = prompt_len + 1
        res = [int(history[-1])]
        cache_draft(history, res, self.N_DRAFT, NGRAM_MIN, NGRAM_MAX,
                    self.nc_context, self.nc_dynamic, self.nc_static)
        return res[1:][:n_max]


def load_lookup(settings: dict) -> tuple:
    """(static, dynamic) caches from settings' lookup_cache_static / lookup_cache_dynamic paths
    ("" = none: an empty cache); a file that cannot be read is a PyllamaError naming it as
    llama.cpp's SPC_ERR does."""
    out = []
    for which in ("static", "dynamic"):
        path = settings.get(f"lookup_cache_{which}", "")
        try:
            out.append(cache_load(path) if path else {})
        except PyllamaError as e:
            raise PyllamaError(f"failed to open {which} lookup cache: {path} ({e})") from None
    return tuple(out)
