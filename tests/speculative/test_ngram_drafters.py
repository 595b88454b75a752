"""llama.cpp's model-free drafters (common/ngram-map.cpp, common/ngram-mod.cpp, and their wrappers
in common/speculative.cpp 0c1e570): the proposals on hand-made token sequences, worked out from
llama.cpp's code (named in each case), then speculative == plain with each drafter on a tiny model.

Drafter.draft(history, n_max) takes history = llama.cpp's `inp` (tokens in the target cache) +
[`sampled`] (id_last)."""
import numpy as np
import pytest

import pyllama
from pyllama.generate import generate
from pyllama.sampling import SamplerChain, SamplerParams
from pyllama.speculative import (DrafterChain, NgramDrafter, NgramMapDrafter, NgramModDrafter,
                                 NgramModPool, SpecParams, SpecStats, drafter_chain,
                                 speculative_generate, with_policy)
from pyllama.speculative.ngram import map_hash


# -- ngram-map-k / ngram-map-k4v: common_ngram_map_draft / common_ngram_map_accept -------------

def test_map_k_drafts_the_m_tokens_after_the_key():
    # common_ngram_map_draft: key = inp[-1:] + [sampled] = [1, 2]; the searched positions are
    # 0 < j <= cur_len - n - m - 1 = 3, so the occurrence at j = 1 matches; draft inp[3:6]
    d = NgramMapDrafter(size_n=2, size_m=3, key_only=True)
    assert d.draft([7, 1, 2, 3, 4, 5, 9, 9, 1, 2], 64) == [3, 4, 5]
    # ... cut to the caller's n_max (common_speculative_draft truncates to dp.n_max)
    d = NgramMapDrafter(size_n=2, size_m=3, key_only=True)
    assert d.draft([7, 1, 2, 3, 4, 5, 9, 9, 1, 2], 2) == [3, 4]


def test_map_k_needs_two_keys_and_a_value_and_never_matches_position_0():
    d = NgramMapDrafter(size_n=2, size_m=3)
    assert d.draft([1, 2, 3, 4, 5, 1, 2], 64) == []          # cur_len 6 < 2n + m = 7
    assert d.draft([1, 2, 3, 4, 5, 9, 9, 1, 2], 64) == []    # the only match is at j = 0


def test_map_k_hash_map_keeps_the_first_indexed_match_and_accept_cuts_the_draft():
    d = NgramMapDrafter(size_n=2, size_m=3, key_only=True)
    assert d.draft([7, 1, 2, 3, 4, 5, 9, 9, 1, 2], 64) == [3, 4, 5]
    # common_ngram_map_accept stores n_accepted = 1 in the key's value; the next lookup of
    # [1, 2] goes through key_map (filled with j = 3, 2, 1 in that order: [1, 2] -> 1), so it
    # matches j = 1 again, not the more recent j = 8, and drafts min(m, 1) tokens
    d.accept(1)
    assert d.draft([7, 1, 2, 3, 4, 5, 9, 9, 1, 2, 3, 8, 8, 8, 1, 2], 64) == [3]
    assert map_hash([1, 2], 0, 2) == (1 * 2654435761 + 2) & 0xFFFFFFFF


HIST_K4V = [0, 1, 2, 5, 6, 1, 2, 5, 6, 1, 2, 7, 7, 0, 0, 1, 2]


def test_map_k4v_waits_for_min_hits_then_drafts_after_the_match():
    # common_ngram_map_draft (key_only = false), n = m = 2, min_hits = 2
    d = NgramMapDrafter(size_n=2, size_m=2, min_hits=2, key_only=False)
    # first call: match_pos = 9 (the most recent j <= 16 - 5), key_num = 1 < min_hits
    assert d.draft(HIST_K4V, 64) == []
    # second call: key_map gives j = 9; key_num = 2; the values after [1, 2] at 1, 5, 9 are
    # [5, 6] (twice) and [7, 7] (once): 2 >= 2 * 1, so a draft, copied from match_pos + n
    # (inp[11:13] = [7, 7]), not from the most frequent value's position
    assert d.draft(HIST_K4V[:-1] + [2, 9, 9, 1, 2], 64) == [7, 7]


def test_map_k4v_refuses_when_no_value_dominates():
    # values [5, 6] and [7, 7] once each: max 1 < 2 * 1 -> no draft; ngram-map-k drafts anyway
    h = [0, 1, 2, 5, 6, 1, 2, 7, 7, 0, 0, 0, 1, 2]
    assert NgramMapDrafter(2, 2, 1, key_only=False).draft(h, 64) == []
    assert NgramMapDrafter(2, 2, 1, key_only=True).draft(h, 64) == [7, 7]


def test_map_begin_searches_the_prompt_first_and_a_shorter_begin_drops_later_keys():
    d = NgramMapDrafter(size_n=2, size_m=2, key_only=True)
    d.begin(HIST_K4V[:10])
    # common_ngram_map_draft: with size_last_begin = 10 the prompt part (j <= 10 - 5) is
    # searched first, descending: [1, 2] at j = 5, draft inp[7:9]; hashes of j = 5..1 and 11
    assert d.draft(HIST_K4V, 64) == [5, 6] and d.keys[0].key_idx == 5
    # common_ngram_map_begin on 8 < 16 tokens: cleanup from 8 - n - m = 4: the key at 5 and
    # the hashes of j >= 4 go, key_map_last_idx = 3; [1, 2] at j = 1 was never indexed (its
    # slot already held j = 5, written first in the descending pass), so j = 2, 3 remain
    d.begin(HIST_K4V[:8])
    assert d.keys == [] and d.key_map_last_idx == 3
    assert sorted(int(j) for j in d.key_map[d.key_map != 0]) == [2, 3]


# -- ngram-mod: common_speculative_impl_ngram_mod ---------------------------------------------

def test_mod_chains_lookups_from_the_last_n_match_tokens():
    d = NgramModDrafter(n_match=2, n_min=2, n_max=4)
    prompt = [1, 2, 3, 4, 1, 2, 3]
    d.begin(prompt)      # adds (1,2)->3 (2,3)->4 (3,4)->1 (4,1)->2 (1,2)->3, i_last = 5
    # draft_one: result = [inp[-1], id_last] = [3, 4]; (3,4)->1 (4,1)->2 (1,2)->3 (2,3)->4
    assert d.draft(prompt + [4], 64) == [1, 2, 3, 4]
    d6 = NgramModDrafter(n_match=2, n_min=2, n_max=6, pool=d.pool)
    d6.begin(prompt)
    assert d6.draft(prompt + [4], 64) == [1, 2, 3, 4, 1, 2]
    assert d6.draft(prompt + [4], 3) == [1, 2, 3]


def test_mod_n_min_drops_a_short_chain():
    prompt = [1, 2, 3, 4, 9, 9, 1]
    # (1,2)->3 (2,3)->4 (3,4)->9 (4,9)->9 (9,9)->1; (9,1) is not in the pool
    d = NgramModDrafter(n_match=2, n_min=2, n_max=8)
    d.begin(prompt)
    assert d.draft(prompt + [2], 64) == [3, 4, 9, 9, 1]
    d = NgramModDrafter(n_match=2, n_min=6, n_max=8)
    d.begin(prompt)
    assert d.draft(prompt + [2], 64) == []
    assert d.draft(prompt + [7], 64) == []      # (1, 7) unknown at i = 0 < n_min


def test_mod_resets_the_pool_after_five_poor_drafts():
    # accept(): n_accepted / n_draft_last < 0.25 five times in a row -> mod.reset(), i_last = 0
    prompt = [1, 2, 3, 4, 1, 2, 3]
    d = NgramModDrafter(n_match=2, n_min=1, n_max=4)
    d.begin(prompt)
    for i in range(5):
        assert d.draft(prompt + [4], 64) == [1, 2, 3, 4]
        assert d.pool.used > 0
        d.accept(1 if i == 2 else 0)       # 1/4 = 0.25 is not low: the streak restarts
    assert d.pool.used > 0 and d.n_low == 2
    for _ in range(3):
        d.draft(prompt + [4], 64)
        d.accept(0)
    assert d.pool.used == 0 and d.i_last == 0
    assert d.draft(prompt + [4], 64) == []      # the history is < i_last + 32: not re-added


def test_mod_pool_reset_at_begin_over_a_quarter_full():
    pool = NgramModPool(2, size=8)
    d = NgramModDrafter(n_match=2, n_min=1, n_max=4, pool=pool)
    d.begin([1, 2, 3])                 # one n-gram: 1/8 used
    assert pool.used == 1
    d.begin([1, 2, 3, 4, 5, 6])        # more than 2 of 8 slots -> reset
    assert pool.used == 0


def test_mod_pool_add_is_sequential_last_write_wins():
    pool = NgramModPool(1, size=16)
    t = np.array([1, 5, 1, 6, 1], dtype=np.int64)
    pool.add_range(t, 0, 4)      # (1)->5, (5)->1, (1)->6, (6)->1
    assert pool.get([1]) == 6 and pool.get([5]) == 1
    ref = 0
    for tok in (3, 4):
        ref = (ref * 6364136223846793005 + tok) % 2**64
    assert NgramModPool(2).idx([3, 4]) == ref % (4 * 1024 * 1024)


# -- ngram-simple min_hits ---------------------------------------------------------------------

def test_ngram_simple_min_hits_needs_that_many_earlier_occurrences():
    h = [5, 1, 2, 3, 9, 1, 2, 4, 8, 1, 2]
    assert NgramDrafter(2, 2, min_n=2).draft(h, 8) == [4, 8]
    assert NgramDrafter(2, 2, min_n=2, min_hits=2).draft(h, 8) == [4, 8]
    assert NgramDrafter(2, 2, min_n=2, min_hits=3).draft(h, 8) == []


# -- several types at once: common_speculative_init / _draft / _accept -------------------------

def test_chain_uses_llamacpp_priority_and_accepts_into_the_last_drafter():
    s = dict(ngram_map_k_size_n=2, ngram_map_k_size_m=3, ngram_mod_n_match=2,
             ngram_mod_n_min=8, ngram_mod_n_max=8)
    # listed mod first: the order is common_speculative_init's, not the command line's
    d, n_max = drafter_chain(["ngram-mod", "none", "ngram-map-k"], s)
    assert isinstance(d, DrafterChain) and d.name == "ngram-map-k,ngram-mod" and n_max == 8
    h = [7, 1, 2, 3, 4, 5, 9, 9, 1, 2]
    d.begin(h[:-1])
    assert d.draft(h, 64) == [3, 4, 5] and d.last is d.drafters[0]
    d.accept(2)
    assert d.drafters[0].keys[0].values[0].n_accepted == 2
    # map-k finds nothing now (a new key); ngram-mod's chain is shorter than its n_min: no draft,
    # and the result of the round still goes to the last drafter that drafted (impl_last)
    assert d.draft(h[:-1] + [2, 6, 0], 64) == []
    d.accept(0)
    assert d.drafters[0].keys[0].values[0].n_accepted == 2   # last_draft_created was reset
    assert drafter_chain(["none"], s) == (None, 0)


def test_chain_falls_through_to_the_next_drafter():
    s = dict(ngram_map_k4v_size_n=2, ngram_map_k4v_size_m=2, ngram_map_k4v_min_hits=5,
             ngram_mod_n_match=2, ngram_mod_n_min=1, ngram_mod_n_max=3)
    d, n_max = drafter_chain(["ngram-map-k4v", "ngram-mod"], s)
    assert n_max == 3
    d.begin(HIST_K4V[:-1])
    # k4v: key_num 1 < min_hits 5; ngram-mod from [1, 2]: (1,2)->7 (the last write), (2,7)->7,
    # (7,7)->0
    assert d.draft(HIST_K4V, 64) == [7, 7, 0] and d.last is d.drafters[1]


# -- speculative == plain with each drafter (invariant numerics, tiny model) ------------------

N_PREDICT = 120


@pytest.fixture(scope="module")
def target(tiny_model_path):
    return pyllama.load_model(tiny_model_path("gemma3", embd_std=0.25))


def _prompt():
    return [int(t) for t in np.random.default_rng(0).integers(0, 270, 20)] * 2


def _chain(model):
    return SamplerChain(SamplerParams(temp=0.0), model.n_vocab, eog_ids=())


@pytest.fixture(scope="module")
def plain(target):
    ctx = pyllama.Context(target, n_ctx=512, n_ubatch=64)
    return list(generate(ctx, _prompt(), _chain(target), n_predict=N_PREDICT, stop_tokens=()))


@pytest.mark.parametrize("types,settings", [
    (["ngram-map-k"], dict(ngram_map_k_size_n=2, ngram_map_k_size_m=8)),
    (["ngram-map-k4v"], dict(ngram_map_k4v_size_n=2, ngram_map_k4v_size_m=4,
                             ngram_map_k4v_min_hits=1)),
    (["ngram-mod"], dict(ngram_mod_n_match=3, ngram_mod_n_min=1, ngram_mod_n_max=8)),
    (["ngram-simple", "ngram-map-k4v", "ngram-mod"],
     dict(ngram_simple_size_n=3, ngram_simple_size_m=6, ngram_simple_min_hits=2,
          ngram_map_k4v_size_n=2, ngram_map_k4v_size_m=4, ngram_mod_n_match=2,
          ngram_mod_n_min=1, ngram_mod_n_max=8)),
])
@pytest.mark.parametrize("policy", ["fixed", "cost"])
def test_speculative_with_each_drafter_equals_plain(target, plain, types, settings, policy):
    drafter, n_max = drafter_chain(types, settings)
    if policy == "cost":
        drafter = with_policy(drafter)
    ctx = pyllama.Context(target, n_ctx=512, n_ubatch=64)
    st = SpecStats()
    out = list(speculative_generate(ctx, _chain(target), _prompt(), drafter,
                                    SpecParams(n_max=n_max), n_predict=N_PREDICT,
                                    stop_tokens=(), stats=st))
    assert out == plain
    assert st.n_drafted > 0 and st.n_accept > 0     # the drafter really drafted


@pytest.mark.parametrize("policy", ["fixed", "cost"])
@pytest.mark.parametrize("which", ["dynamic", "static"])
def test_ngram_cache_with_lookup_caches_equals_plain(target, plain, which, policy):
    """ngram-cache with a dynamic cache (1..4-grams of an earlier generation, as llama-lookup
    saves it with -lcd) or a static one (2-grams of a corpus, llama-lookup-create): drafts are
    taken and verified, the output is plain greedy's."""
    from pyllama.speculative.ngram_cache import cache_update
    corpus = _prompt() + plain
    cache = {}
    if which == "dynamic":
        cache_update(cache, 1, 4, corpus, len(corpus))
    else:
        for _ in range(2):           # two occurrences: the static cache's minimum sample size
            cache_update(cache, 2, 2, corpus, len(corpus))
    lookup = ({}, cache) if which == "dynamic" else (cache, {})
    drafter, n_max = drafter_chain(["ngram-cache"], {}, lookup=lookup)
    assert n_max == 8
    if policy == "cost":
        drafter = with_policy(drafter)
    ctx = pyllama.Context(target, n_ctx=512, n_ubatch=64)
    st = SpecStats()
    out = list(speculative_generate(ctx, _chain(target), _prompt(), drafter,
                                    SpecParams(n_max=n_max), n_predict=N_PREDICT,
                                    stop_tokens=(), stats=st))
    assert out == plain
    assert st.n_drafted > 0 and st.n_accept > 0
