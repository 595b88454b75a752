"""Cost-aware draft length (DraftPolicy): the expected-tokens / verification-cost rule, its
online acceptance estimates, the n-gram drafter under it, and exactness of greedy speculation
with it on a tiny model (the policy only shortens drafts; verified tokens are the target's)."""
import numpy as np
import pytest

import pyllama
from pyllama.generate import generate
from pyllama.sampling import SamplerChain, SamplerParams
from pyllama.speculative import (DraftPolicy, NgramDrafter, SpecParams, SpecStats, VerifyCost,
                                 measure_verify_cost, speculative_generate)
from pyllama.speculative.policy import expected_tokens

LINEAR = VerifyCost.linear(0.3)


def test_verify_cost_table_then_slope():
    c = VerifyCost((1.0, 1.1, 1.5), 0.25)
    assert [c(k) for k in range(5)] == [1.0, 1.1, 1.5, 1.75, 2.0]
    assert LINEAR(0) == 1.0 and LINEAR(8) == pytest.approx(3.4)


def test_expected_tokens_is_the_geometric_sum():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 5) == 6.0
    assert expected_tokens(0.5, 2) == pytest.approx(1.75)
    p = 0.8
    assert expected_tokens(p, 7) == pytest.approx(sum(p ** i for i in range(8)))


def test_length_maximises_expected_tokens_per_cost():
    pol = DraftPolicy(LINEAR, margin=0.0)
    for p in (0.2, 0.35, 0.5, 0.8, 0.95):
        pol.acc, pol.trials = {"k": p * 1e6}, {"k": 1e6}
        k = pol.length("k", 16)
        ratios = [expected_tokens(p, j) / LINEAR(j) for j in range(17)]
        assert k == int(np.argmax(ratios)), p
    pol.acc, pol.trials = {"k": 0.2e6}, {"k": 1e6}
    assert pol.length("k", 16) == 0              # 1.2 tokens for 1.3 decodes: plain is faster
    pol.acc, pol.trials = {"k": 0.95e6}, {"k": 1e6}
    assert pol.length("k", 16) >= 8 and pol.length("k", 3) == 3


def test_prior_probes_with_a_short_draft():
    pol = DraftPolicy(LINEAR, prior_p=0.5)       # p = 0.5: 1.5 / 1.3 beats 1.75 / 1.6
    assert pol.p("new") == 0.5 and pol.length("new", 8) == 1
    assert DraftPolicy(LINEAR).length("new", 8) == 2     # the default prior p = 0.7


def test_k_min_probes_with_the_shortest_allowed_draft():
    assert DraftPolicy(LINEAR, prior_p=0.5, k_min=2).length("new", 8) == 2
    assert DraftPolicy(LINEAR, prior_p=0.5, k_min=4).length("new", 3) == 0


def test_updates_count_the_tested_positions_and_decay():
    pol = DraftPolicy(LINEAR, prior_p=0.5, prior_n=2.0, decay=0.5)
    pol.update("a", 4, 1)                        # positions 1 (ok) and 2 (rejected) tested
    assert (pol.acc["a"], pol.trials["a"]) == (1.0, 2.0)
    pol.update("a", 3, 3)                        # all 3 tested and accepted; old counts halved
    assert (pol.acc["a"], pol.trials["a"]) == (3.5, 4.0)
    pol.update(None, 0, 0)                       # a round without a draft only decays
    assert (pol.acc["a"], pol.trials["a"]) == (1.75, 2.0)
    assert pol.p("a") == pytest.approx((1.75 + 1.0) / 4.0)


def test_rejected_key_stops_drafting_then_is_probed_again():
    pol = DraftPolicy(LINEAR, prior_p=0.5, prior_n=2.0, decay=0.9)
    for _ in range(10):
        pol.update("bad", 1, 0)
    assert pol.length("bad", 8) == 0
    n = 0
    while pol.length("bad", 8) == 0:
        pol.update(None, 0, 0)
        n += 1
    assert 0 < n < 60 and pol.length("bad", 8) == 1


def test_ngram_drafter_under_the_policy_learns_per_key():
    pol = DraftPolicy(LINEAR, prior_p=0.5, prior_n=2.0, decay=0.97)
    d = NgramDrafter(size_n=3, size_m=8, min_n=1, policy=pol)
    h = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 2, 3]
    assert d.lookup(h, 8) == (3, [4, 5, 6, 7, 8, 9, 10, 11])
    assert d.draft(h, 8) == [4]                  # the prior: a one-token probe
    for _ in range(8):                           # every draft taken whole: longer drafts
        k = len(d.draft(h, 8))
        d.accept(k, k)
    assert len(d.draft(h, 8)) >= 6
    d.accept(0, 8)
    for _ in range(8):                           # after misses this situation stops drafting
        k = len(d.draft(h, 8))
        d.accept(0, k)
    assert d.draft(h, 8) == []
    assert NgramDrafter(size_n=3, size_m=8, min_n=1).draft(h, 8) == [4, 5, 6, 7, 8, 9, 10, 11]


def test_overlapping_match_continues_through_its_own_copy():
    d = NgramDrafter(size_n=3, size_m=8, min_n=1)
    assert d.lookup([9, 1, 2, 3, 1, 2, 3, 1, 2], 7) == (3, [3, 1, 2, 3, 1, 2, 3])
    assert d.draft([4, 5, 5, 5], 5) == [5, 5, 5, 5, 5]


def _lookup_by_windows(d, history, n_max):
    """NgramDrafter.lookup as one window search per n (the definition)."""
    from pyllama.speculative.drafters import _copy_from
    h = np.asarray(history, dtype=np.int64)
    for n in range(min(d.size_n, len(h) - 1), d.min_n - 1, -1):
        win = np.lib.stride_tricks.sliding_window_view(h[:-1], n)
        hits = np.flatnonzero((win == h[-n:]).all(axis=1))
        if len(hits) >= d.min_hits:
            src = int(hits[-1]) + n
            if d._ptr is not None and np.any(hits == d._ptr - n):
                src = d._ptr
            return n, _copy_from(h, src, min(d.size_m, n_max))
    return 0, []


def test_lookup_equals_the_window_search_per_n():
    rng = np.random.default_rng(0)
    for trial in range(400):
        vocab = int(rng.integers(2, 6))
        h = [int(t) for t in rng.integers(0, vocab, int(rng.integers(2, 60)))]
        d = NgramDrafter(size_n=int(rng.integers(1, 8)), size_m=int(rng.integers(1, 10)),
                         min_n=int(rng.integers(1, 3)), min_hits=int(rng.integers(1, 4)))
        d._ptr = int(rng.integers(1, len(h) + 1)) if trial % 2 else None
        ptr = d._ptr
        assert d.lookup(h, 8) == _lookup_by_windows(d, h, 8), (h, vars(d))
        assert d._ptr == ptr


def test_with_policy_gives_short_ngram_matches_a_lower_prior():
    """The tools' cost-aware ngram-simple: a 1- or 2-gram match starts at 0.4, a 3-gram at 0.6,
    longer ones at 0.7; one failed probe of a 2-gram situation stops it (p 0.2: 1.2 tokens for
    1.3 decodes) where a 5-gram one is probed again (p 0.35: 1.35 tokens)."""
    from pyllama.speculative import with_policy
    d = with_policy(NgramDrafter(size_n=6, size_m=8))
    pol = d.policy
    assert [pol.p((n, False)) for n in (1, 2, 3, 5, 8)] == [0.4, 0.4, 0.6, 0.7, 0.7]
    h2 = [7, 1, 2, 9, 5, 6, 1, 2]                # only [1, 2] matches
    assert d.draft(h2, 8) == [9]                 # a one-token probe
    d.accept(0, 1)
    assert d.draft(h2, 8) == []
    h5 = [1, 2, 3, 4, 5, 9, 8, 7, 1, 2, 3, 4, 5]
    d = with_policy(NgramDrafter(size_n=5, size_m=8))
    assert d.draft(h5, 8) == [9, 8]              # 0.7: two tokens pay best
    d.accept(0, 2)
    assert d.draft(h5, 8) == [9]                 # 0.35: still a one-token probe


def test_copy_in_progress_wins_over_the_most_recent_match():
    """After a draft copied from position 3 is taken whole and the target's token continues the
    copy (8 after 3 4 5), the key [4 5 8] occurs at 4 (the copy) and at 12 (more recent): the
    copy goes on (1 2 3) where a fresh drafter takes the most recent match (0 9 1)."""
    h0 = [9, 1, 2, 3, 4, 5, 8, 1, 2, 3, 6, 7, 4, 5, 8, 0, 9, 1, 2]
    d = NgramDrafter(size_n=3, size_m=3, min_n=2)
    assert d.draft(h0, 8) == [3, 4, 5]
    d.accept(3, 3)
    h1 = h0 + [3, 4, 5, 8]
    assert d.draft(h1, 8) == [1, 2, 3]
    assert NgramDrafter(size_n=3, size_m=3, min_n=2).draft(h1, 8) == [0, 9, 1]
    # a rejection ends the copy: the next lookup takes the most recent match again
    d.accept(0, 3)
    h2 = h1 + [6, 4, 5, 8]
    assert d.draft(h2, 8) == NgramDrafter(size_n=3, size_m=3, min_n=2).draft(h2, 8)
    # a new generation forgets the copy
    d.accept(3, 3)
    d.begin(h1[:-1])
    assert d.draft(h1, 8) == [0, 9, 1]


def test_drafts_dropped_by_the_loop_are_not_counted():
    pol = DraftPolicy(LINEAR, prior_p=0.5)
    d = NgramDrafter(size_n=2, size_m=4, min_n=1, policy=pol)
    assert d.draft([5, 6, 7, 5, 6], 4) == [7]
    d.accept(0, 0)                               # the loop verified none of it (n_min)
    assert pol.trials.get((2, False), 0.0) == 0.0


def _greedy(model):
    return SamplerChain(SamplerParams(temp=0.0), model.n_vocab, eog_ids=())


@pytest.fixture(scope="module")
def target(tiny_model_path):
    # greedy output: runs of one token, switches and short loops (n-gram drafts hit and miss)
    return pyllama.load_model(tiny_model_path("gemma3", seed=1, embd_std=0.05))


def _prompt():
    base = [int(t) for t in np.random.default_rng(3).integers(0, 270, 24)]
    return base + base[:16]                      # something to look up from the start


@pytest.mark.parametrize("n_min", [0, 2])
def test_greedy_speculation_with_the_policy_equals_plain(target, n_min):
    n = 200
    ref = list(generate(pyllama.Context(target, n_ctx=512, n_ubatch=64), _prompt(),
                        _greedy(target), n_predict=n, stop_tokens=()))
    runs = {}
    for name, pol in (("plain", None), ("policy", DraftPolicy(LINEAR, k_min=n_min))):
        ctx = pyllama.Context(target, n_ctx=512, n_ubatch=64)
        st = SpecStats()
        d = NgramDrafter(size_n=6, size_m=16, min_n=1, policy=pol)
        out = list(speculative_generate(ctx, _greedy(target), _prompt(), d,
                                        SpecParams(n_max=16, n_min=n_min), n_predict=n,
                                        stop_tokens=(), stats=st))
        assert out == ref, name
        runs[name] = st
    pl, po = runs["plain"], runs["policy"]
    assert po.n_drafted > 0 and po.n_accept > 0
    assert po.n_drafted - po.n_accept < pl.n_drafted - pl.n_accept   # fewer wasted rows


def test_measured_cost_is_a_line_through_the_timings(target):
    c = measure_verify_cost(target, k_max=4, n_rep=1)
    assert len(c.measured) == 5 and c.measured[0] == 1.0 and c.t_decode > 0
    k = np.arange(5)
    fit = (k * (np.asarray(c.measured) - 1)).sum() / (k * k).sum()
    assert c.slope == pytest.approx(max(fit, 0.05)) and c(0) == 1.0
    assert c(4) == pytest.approx(1 + 4 * c.slope)


def test_draft_cost_shortens_drafts():
    p = 0.8
    pol = DraftPolicy(LINEAR, margin=0.0)
    pol.acc, pol.trials = {"k": p * 1e6}, {"k": 1e6}
    k0 = pol.length("k", 16)
    pol.draft_cost = 0.3
    k1 = pol.length("k", 16)
    ratios = [expected_tokens(p, j) / (LINEAR(j) + 0.3 * j) for j in range(17)]
    assert k1 == int(np.argmax(ratios)) and k1 < k0
    pol.draft_cost = 1.0                         # a draft as dear as the target never pays
    assert pol.length("k", 16) == 0


@pytest.fixture(scope="module")
def other(tiny_model_path):
    return pyllama.load_model(tiny_model_path("gemma3", seed=2, embd_std=0.05))


@pytest.mark.parametrize("which", ["self", "other"])
def test_draft_model_under_the_policy_is_exact_and_adapts(target, other, which):
    from pyllama.speculative import DraftModelDrafter
    n = 120
    ref = list(generate(pyllama.Context(target, n_ctx=512, n_ubatch=64), _prompt(),
                        _greedy(target), n_predict=n, stop_tokens=()))
    dm = target if which == "self" else other
    runs = {}
    for name, pol in (("plain", None), ("policy", DraftPolicy(LINEAR, draft_cost=0.1))):
        d = DraftModelDrafter(pyllama.Context(dm, n_ctx=512, n_ubatch=64), policy=pol)
        st = SpecStats()
        out = list(speculative_generate(pyllama.Context(target, n_ctx=512, n_ubatch=64),
                                        _greedy(target), _prompt(), d, SpecParams(n_max=8),
                                        n_predict=n, stop_tokens=(), stats=st))
        assert out == ref, name
        runs[name] = st
    pl, po = runs["plain"], runs["policy"]
    if which == "self":                          # always right: drafts grow to n_max
        assert po.n_accept == po.n_drafted > 0 and max(len(po.accepted_per_pos), 0) == 8
    else:                                        # mostly wrong: far fewer drafted tokens
        assert pl.accept_rate < 0.5 and po.n_drafted < pl.n_drafted / 2
