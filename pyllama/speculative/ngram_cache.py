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
int32 count) pairs; little endian, no header. The caches are dicts whose insertion order is the
order llama.cpp inserts the same keys into its std::unordered_maps; saving, merging and the
drafts' tie-breaks walk them in libstdc++'s iteration order for that insertion order
(pyllama.speculative.std_order), so the files are byte for byte llama.cpp's and so are the drafts.
"""
from __future__ import annotations

import struct

from ..errors import PyllamaError
from .drafters import Drafter
from .std_order import ngram_map_order, token_map_order

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


def cache_update(cache: dict, ngram_min: int, ngram_max: int, inp, nnew: int,
                 progress=None, every: int = 10_000_000) -> None:
    """common_ngram_cache_update: count, for every n-gram size, the token after each n-gram
    ending in the last nnew tokens of inp (inp may only have been appended to since).
    progress(n_done, n_todo) is called after every `every` n-grams (llama.cpp's print_progress:
    n_todo is len(inp) times the number of sizes)."""
    n = len(inp)
    lo = max(0, n - nnew - ngram_max)
    tail = [int(t) for t in inp[lo:]]
    n_todo, n_done = n * (ngram_max - ngram_min + 1), 0
    for size in range(ngram_min, ngram_max + 1):
        for i in range(max(n - nnew, size), n):
            j = i - lo
            key = tuple(tail[j - size:j]) + (TOKEN_NULL,) * (NGRAM_MAX - size)
            part = cache.get(key)
            if part is None:
                cache[key] = {tail[j]: 1}
            else:
                part[tail[j]] = part.get(tail[j], 0) + 1
            if progress is not None:
                n_done += 1
                if n_done % every == 0:
                    progress(n_done, n_todo)


def _i32(x: int) -> int:
    """x as the int32 llama.cpp's products wrap to."""
    return ((x + 0x80000000) & 0xFFFFFFFF) - 0x80000000


def _first_max(part: dict, score) -> int:
    """The token with the highest score, the first in the map's iteration order among equals
    (llama.cpp's loops replace the best only on a strictly greater score)."""
    best, best_s, n_best = TOKEN_NULL, 0, 0
    for tok in part:
        s = score(tok)
        if s > best_s:
            best, best_s, n_best = tok, s, 1
        elif s == best_s and s > 0:
            n_best += 1
    if n_best > 1:
        for tok in token_map_order(part):
            if score(tok) == best_s:
                return tok
    return best


def _try_static(nc_static: dict, key: tuple) -> int:
    part = nc_static.get(key)
    if part is None:
        return TOKEN_NULL
    best = _first_max(part, part.__getitem__)
    total = sum(part.values())
    if total < MIN_SAMPLE_LAX[NGRAM_STATIC - 1]:
        return TOKEN_NULL
    if 100 * part[best] < MIN_PERCENT_LAX[NGRAM_STATIC - 1] * total:
        return TOKEN_NULL
    return best


def _try_primary(nc: dict, keys: list, part_static: dict, min_sample, min_percent) -> int:
    for i in range(len(keys) - 1, -1, -1):
        part = nc.get(keys[i])
        if part is None:
            continue

        def score(tok, part=part):
            s = _i32(100 * part_static[tok]) if tok in part_static else 1
            return _i32(part[tok] * s)
        best = _first_max(part, score)
        total = sum(part.values())
        if total < min_sample[i]:
            continue
        if best == TOKEN_NULL or 100 * part[best] < min_percent[i] * total:
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
    """common_ngram_cache_merge: add's counts into target, walking add in llama.cpp's order."""
    for key in ngram_map_order(add):
        part = add[key]
        tp = target.get(key)
        if tp is None:
            target[key] = dict(part)
            continue
        for tok in token_map_order(part):
            tp[tok] = tp.get(tok, 0) + part[tok]


def cache_save(cache: dict, path: str) -> None:
    """common_ngram_cache_save: the records described in the module docstring, in llama.cpp's
    iteration order."""
    out = bytearray()
    for key in ngram_map_order(cache):
        part = cache[key]
        if not part:
            raise PyllamaError(f"ngram cache entry {key} has no tokens")
        out += struct.pack("<4ii", *key, len(part))
        for tok in token_map_order(part):
            out += struct.pack("<ii", tok, part[tok])
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
            part.setdefault(vals[2 * j], vals[2 * j + 1])    # emplace: the first one stays
        cache.setdefault(tuple(key), part)
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


class LookupDrafter(Drafter):
    """examples/lookup's drafting (llama-lookup): the context cache counts the prompt's n-grams
    at begin() and then every token the sequence gains, one at a time, as lookup.cpp does;
    drafts of up to n_draft tokens from the context, dynamic and static caches. `finish()`
    counts the tokens of the last round and returns the dynamic cache with the context cache
    merged in (what llama-lookup saves to -lcd)."""
    name = "ngram-cache"

    def __init__(self, n_draft: int, nc_static: dict | None = None,
                 nc_dynamic: dict | None = None):
        self.n_draft = n_draft
        self.nc_static = nc_static if nc_static is not None else {}
        self.nc_dynamic = nc_dynamic if nc_dynamic is not None else {}
        self.nc_context: dict = {}
        self.n_counted = 0

    def begin(self, tokens: list[int]) -> None:
        cache_update(self.nc_context, NGRAM_MIN, NGRAM_MAX, tokens, len(tokens))
        self.n_counted = len(tokens)

    def count(self, history: list[int]) -> None:
        """Count the tokens history gained since the last call, one update per token."""
        for k in range(self.n_counted + 1, len(history) + 1):
            cache_update(self.nc_context, NGRAM_MIN, NGRAM_MAX, history[:k], 1)
        self.n_counted = max(self.n_counted, len(history))

    def draft(self, history: list[int], n_max: int) -> list[int]:
        self.count(history)
        res = [int(history[-1])]
        cache_draft(history, res, min(n_max, self.n_draft), NGRAM_MIN, NGRAM_MAX,
                    self.nc_context, self.nc_dynamic, self.nc_static)
        return res[1:]

    def finish(self, history: list[int]) -> dict:
        self.count(history)
        cache_merge(self.nc_dynamic, self.nc_context)
        return self.nc_dynamic


def lookup_stats(inp: list[int], n_ctx: int, n_draft: int, nc_static: dict | None = None,
                 nc_dynamic: dict | None = None, progress=None) -> dict:
    """examples/lookup/lookup-stats.cpp: the input in chunks of n_ctx tokens (only chunks that
    end before the input's last token), each generated "as if" by a model that always produces
    the input: draft from the caches, accept the drafts matching the input, then one sampled
    token; after each chunk the context cache goes into the dynamic one. Returns the counts
    llama-lookup-stats prints. progress(i_start, n_input) is called where llama.cpp logs."""
    nc_static = nc_static if nc_static is not None else {}
    nc_dynamic = nc_dynamic if nc_dynamic is not None else {}
    n_input = len(inp)
    n_drafted = n_accept = 0
    i_start = 0
    while i_start + n_ctx < n_input:
        chunk = [int(t) for t in inp[i_start:i_start + n_ctx]]
        nc_context: dict = {}
        out = [chunk[0]]
        while len(out) < n_ctx:
            draft = [out[-1]]
            cache_draft(out, draft, n_draft, NGRAM_MIN, NGRAM_MAX, nc_context, nc_dynamic,
                        nc_static)
            n_drafted += len(draft) - 1
            for d in draft[1:]:
                if len(out) >= n_ctx or chunk[len(out)] != d:
                    break
                n_accept += 1
                out.append(d)
                cache_update(nc_context, NGRAM_MIN, NGRAM_MAX, out, 1)
            if len(out) < n_ctx:
                out.append(chunk[len(out)])
                cache_update(nc_context, NGRAM_MIN, NGRAM_MAX, out, 1)
        if progress is not None and i_start > 0 and \
                i_start // 100000 != (i_start - n_ctx) // 100000:
            progress(i_start, n_input)
        cache_merge(nc_dynamic, nc_context)
        i_start += n_ctx
    return {"n_draft": n_draft, "n_predict": n_input - n_input % n_ctx,
            "n_drafted": n_drafted, "n_accept": n_accept}


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
