"""ngram-cache (llama.cpp common/ngram-cache.cpp): counting, drafting with the context / dynamic /
static caches and their thresholds, merging, and the lookup cache file format (records of 4
int32 n-gram tokens, int32 entry count, then (int32 token, int32 count) pairs, as
common_ngram_cache_save writes them)."""
import struct

import pytest

from pyllama.errors import PyllamaError
from pyllama.speculative.ngram_cache import (NgramCacheDrafter, cache_draft, cache_load,
                                             cache_merge, cache_save, cache_update, load_lookup)

N = -1


def test_update_counts_each_ngram_size_and_only_the_new_tokens():
    c = {}
    cache_update(c, 1, 2, [5, 6, 5, 6], 4)
    assert c[(5, N, N, N)] == {6: 2} and c[(6, N, N, N)] == {5: 1}
    assert c[(5, 6, N, N)] == {5: 1} and c[(6, 5, N, N)] == {6: 1}
    cache_update(c, 1, 2, [5, 6, 5, 6, 7], 1)      # one appended token
    assert c[(6, N, N, N)] == {5: 1, 7: 1} and c[(5, 6, N, N)] == {5: 1, 7: 1}


def test_draft_from_the_context_cache_with_lax_thresholds():
    inp = [1, 2, 3, 1, 2, 3, 1, 2]
    ctx = {}
    cache_update(ctx, 1, 4, inp, len(inp))
    d = [inp[-1]]
    cache_draft(inp, d, 4, 1, 4, ctx, {}, {})
    assert d == [2, 3, 1, 2, 3]           # 4-gram (3,1,2)->3 seen once: enough for size 4 (1)
    d = [1]
    cache_draft([1], d, 4, 1, 4, ctx, {}, {})
    assert d == [1]                       # fewer than 2 tokens: no draft


def test_dynamic_cache_needs_strict_counts_and_static_needs_half():
    dyn = {(7, N, N, N): {8: 3}}          # 3 < strict sample size 4 for 1-grams
    d = [7]
    cache_draft([9, 7], d, 2, 1, 1, {}, dyn, {})
    assert d == [7]
    dyn = {(7, N, N, N): {8: 4}}
    d = [7]
    cache_draft([9, 7], d, 1, 1, 1, {}, dyn, {})
    assert d == [7, 8]
    st = {(9, 7, N, N): {4: 1, 5: 1}}     # 2 samples, 50% >= 50%: drafted from the static cache
    d = [7]
    cache_draft([9, 7], d, 1, 1, 1, {}, {}, st)
    assert d == [7, 5]                    # a tie: the first in libstdc++'s order (5 then 4)
    for st in ({(9, 7, N, N): {4: 1}}, {(9, 7, N, N): {4: 1, 5: 1, 6: 1}}):   # 1 sample; 33%
        d = [7]
        cache_draft([9, 7], d, 1, 1, 1, {}, {}, st)
        assert d == [7]


def test_static_counts_weight_the_context_candidates():
    ctx = {(7, N, N, N): {1: 2, 2: 1}}
    d = [7]
    cache_draft([3, 7], d, 1, 1, 1, ctx, {}, {})
    assert d == [7, 1]                    # 2 of 3 >= 66% (1-grams, lax)
    # static 2-gram (3, 7): token 2 seen -> weight 100 x count; 1 absent -> weight 1
    # the weighted winner 2 has 1 of 3 < 50%: no context draft; the static entry (1 sample)
    # is too small to draft alone
    d = [7]
    cache_draft([3, 7], d, 1, 1, 1, ctx, {}, {(3, 7, N, N): {2: 1}})
    assert d == [7]


def test_file_format_and_merge(tmp_path):
    a = {(1, 2, N, N): {3: 2, 4: 1}, (5, N, N, N): {6: 7}}
    p = tmp_path / "a.bin"
    cache_save(a, str(p))
    raw = p.read_bytes()
    # libstdc++'s order: the later-used bucket first (the two n-grams' hashes differ mod 13,
    # so do tokens 3 and 4)
    assert raw == (struct.pack("<4ii", 5, N, N, N, 1) + struct.pack("<ii", 6, 7) +
                   struct.pack("<4ii", 1, 2, N, N, 2) + struct.pack("<iiii", 4, 1, 3, 2))
    assert cache_load(str(p)) == a
    b = {(1, 2, N, N): {3: 1, 9: 1}, (8, N, N, N): {1: 1}}
    cache_merge(a, b)
    assert a == {(1, 2, N, N): {3: 3, 4: 1, 9: 1}, (5, N, N, N): {6: 7}, (8, N, N, N): {1: 1}}


def test_bad_files_are_one_clear_error(tmp_path):
    with pytest.raises(PyllamaError, match="Unable to open file"):
        cache_load(str(tmp_path / "missing.bin"))
    p = tmp_path / "bad.bin"
    p.write_bytes(struct.pack("<4ii", 1, 2, N, N, 2) + struct.pack("<ii", 3, 1))
    with pytest.raises(PyllamaError, match="bad record"):
        cache_load(str(p))
    with pytest.raises(PyllamaError, match="failed to open static lookup cache"):
        load_lookup({"lookup_cache_static": str(tmp_path / "missing.bin")})


def test_drafter_appends_only_new_tokens_and_drafts_at_most_8():
    d = NgramCacheDrafter()
    h = [1, 2] * 20
    out = d.draft(h, 100)
    assert out == [1, 2, 1, 2, 1, 2, 1, 2] and d.cache_size == len(h)
    assert d.draft(h, 3) == [1, 2, 1]
    before = dict(d.nc_context[(1, N, N, N)])
    d.draft(h + [1], 8)                   # only the new token: n-grams across the boundary
    assert d.nc_context[(1, N, N, N)] == before     # are not counted (as in llama.cpp)
    assert d.nc_context[(2, N, N, N)] == {1: 19} and d.cache_size == len(h) + 1


def test_lookup_merge_tool(tmp_path):
    """llama-lookup-merge a.bin b.bin out.bin: llama.cpp's messages, the merged counts."""
    import subprocess
    import sys
    a, b, out = (str(tmp_path / n) for n in ("a.bin", "b.bin", "out.bin"))
    cache_save({(1, 2, N, N): {3: 2}}, a)
    cache_save({(1, 2, N, N): {3: 1, 4: 1}, (5, N, N, N): {6: 1}}, b)
    r = subprocess.run([sys.executable, "-m", "pyllama", "lookup-merge", a, b, out],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (f"lookup-merge: loading file {a}\nlookup-merge: loading file {b}\n"
                        f"lookup-merge: saving file {out}\n")
    assert cache_load(out) == {(1, 2, N, N): {3: 3, 4: 1}, (5, N, N, N): {6: 1}}
    r = subprocess.run([sys.executable, "-m", "pyllama", "lookup-merge", a],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and r.stderr.startswith("Merges multiple lookup cache files")
    r = subprocess.run([sys.executable, "-m", "pyllama", "lookup-merge", a, str(tmp_path / "x"),
                        out], capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "Unable to open file" in r.stderr.splitlines()[-1]


def test_update_reports_progress_like_print_progress():
    seen = []
    cache_update({}, 2, 2, list(range(10)), 10, progress=lambda d, t: seen.append((d, t)),
                 every=4)
    assert seen == [(4, 10), (8, 10)]      # 8 2-grams of 10 tokens; n_todo = 10 x 1 size
