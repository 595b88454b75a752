"""The iteration order of a libstdc++ (GCC >= 5) std::unordered_map that only ever had keys inserted.

llama.cpp's lookup caches (common/ngram-cache.h) are std::unordered_maps: common_ngram_cache_save
writes them, common_ngram_cache_merge walks them and common_ngram_cache_draft breaks ties in
their iteration order. pyllama keeps them as dicts, whose insertion order is the order llama.cpp
inserted the same keys in; for a map that is only inserted into, libstdc++'s iteration order is a
function of that insertion order, the key hashes and the bucket counts it grows through, which is
what `iteration_order` computes.

libstdc++'s _Hashtable is one singly linked list of nodes, each bucket pointing at the node
before its first one. A node inserted into a non-empty bucket goes to the front of that bucket's
run of nodes; into an empty bucket, to the front of the whole list (_M_insert_bucket_begin). A
rehash walks the old list and re-inserts every node by the same rule (_M_rehash_aux). So after
inserting a sequence S into an empty table of B buckets, the list holds the buckets' runs latest
first-used bucket first, each run's nodes latest first. _Prime_rehash_policy (max load factor 1)
allocates 13 buckets at the first insertion and grows when the table would hold more elements
than buckets, to the first prime in libstdc++'s __prime_list >= twice the count: BUCKETS below,
read from libstdc++.so.6's __prime_list and checked against its _M_need_rehash by
tests/make_lookup_fixture.py.
"""
from __future__ import annotations

import numpy as np

BUCKETS = (13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933,
           351061, 712697, 1447153, 2938679, 5967347, 12117689, 24607243, 49969847, 101473717,
           206062531, 418451333, 849749479, 1725587117, 3504151727, 8589934583, 25769803693,
           68719476731, 206158430123, 412316860387, 1099511627689, 2199023255531)

FIB = 11400714819323198485          # common_token_hash_function's multiplier
M64 = (1 << 64) - 1
_NUMPY_MIN = 2048                   # below this many keys, plain Python is faster


def token_hash(t: int) -> int:
    """common_token_hash_function: the token (sign-extended to size_t) times FIB, mod 2**64."""
    return ((t & M64) * FIB) & M64


def ngram_hash(key) -> int:
    """common_ngram_hash_function: the XOR of its 4 tokens' token_hash."""
    h = 0
    for t in key:
        h ^= ((t & M64) * FIB) & M64
    return h


def _place(seq: list, hashes, nb: int) -> list:
    runs: dict = {}
    for i in seq:
        b = hashes[i] % nb
        r = runs.get(b)
        if r is None:
            runs[b] = [i]
        else:
            r.append(i)
    out = []
    for r in reversed(list(runs.values())):
        out.extend(reversed(r))
    return out


def _place_np(seq: np.ndarray, hashes: np.ndarray, nb: int) -> np.ndarray:
    b = hashes[seq] % np.uint64(nb)
    _, first, inv = np.unique(b, return_index=True, return_inverse=True)
    fp = first[inv.reshape(-1)]
    pos = np.arange(len(seq))
    return seq[np.lexsort((-pos, -fp))]


def iteration_order(hashes) -> list:
    """Indices of n keys with these hashes (in insertion order) in the order a libstdc++
    unordered_map that received them in that order iterates them."""
    n = len(hashes)
    if n == 0:
        return []
    if n >= _NUMPY_MIN:
        h = np.asarray(hashes, dtype=np.uint64)
        order = np.zeros(0, dtype=np.int64)
    else:
        h, order = hashes, []
    start = 0
    for nb in BUCKETS:
        end = min(n, nb)      # the table of nb buckets takes the keys up to index nb - 1
        if isinstance(order, np.ndarray):
            order = _place_np(np.concatenate([order, np.arange(start, end)]), h, nb)
        else:
            order = _place(order + list(range(start, end)), h, nb)
        start = end
        if end == n:
            break
    else:
        raise OverflowError("more keys than the largest bucket count tabulated")
    return [int(i) for i in order]


def ngram_map_order(keys) -> list:
    """The keys of a common_ngram_cache (ngram tuples, in insertion order), in iteration order."""
    keys = list(keys)
    if len(keys) >= _NUMPY_MIN:
        a = np.asarray(keys, dtype=np.int64).astype(np.uint64)
        with np.errstate(over="ignore"):
            h = a * np.uint64(FIB)
        hashes = h[:, 0] ^ h[:, 1] ^ h[:, 2] ^ h[:, 3]
    else:
        hashes = [ngram_hash(k) for k in keys]
    return [keys[i] for i in iteration_order(hashes)]


def token_map_order(tokens) -> list:
    """The keys of a common_ngram_cache_part (token -> count; std::hash<int> is the identity),
    in insertion order, in iteration order."""
    tokens = list(tokens)
    if len(tokens) == 1:
        return tokens
    return [tokens[i] for i in iteration_order([t & M64 for t in tokens])]
