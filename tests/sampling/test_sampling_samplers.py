"""Each sampler on a tiny vocabulary, with the expected values derived by hand from llama.cpp's
formulas (src/llama-sampler.cpp). Logits are often log-probabilities so the softmax is exact."""
import math

import numpy as np
import pytest

from pyllama.sampling import greedy
from pyllama.sampling.candidates import Candidates, dist_select, softmax
from pyllama.sampling.dry import DRY, process_breakers
from pyllama.sampling.samplers import (
    XTC, LogitBias, MinP, Mirostat, MirostatV2, Penalties, TempExt, TopK, TopNSigma, TopP, Typical)

LN = np.log


def cands(logits):
    return Candidates.from_logits(np.asarray(logits, dtype=np.float32))


def kept(cur):
    return cur.ids.tolist()


def test_greedy_lowest_id_on_ties():
    assert greedy(np.array([1.0, 3.0, 2.0, 3.0], np.float32)) == 1


def test_top_k_keeps_k_best_sorted_ties_lowest_id():
    cur = cands([1, 3, 2, 3, 0])
    TopK(2).apply(cur)
    assert kept(cur) == [1, 3] and cur.sorted  # both logit 3; the lower id first
    cur = cands([1, 3, 2, 3, 0])
    TopK(0).apply(cur)  # k <= 0: off
    assert kept(cur) == [0, 1, 2, 3, 4] and not cur.sorted
    cur = cands([1, 3, 2])
    TopK(10).apply(cur)  # k > n: everything, sorted
    assert kept(cur) == [1, 2, 0]


def test_top_k_tie_across_the_cut_on_a_large_vocab():
    logits = np.zeros(5000, np.float32)
    logits[[4000, 10]] = 2.0  # two clear winners, then 4998 equal logits
    cur = cands(logits)
    TopK(5).apply(cur)
    assert kept(cur) == [10, 4000, 0, 1, 2]


def test_top_p_smallest_prefix_reaching_p():
    # p = 0.5 0.2 0.2 0.1: cumulative 0.5, 0.7 >= 0.6 -> keep 2 (the tie 0.2/0.2 keeps id 1)
    cur = cands(LN([0.5, 0.2, 0.2, 0.1]))
    TopP(0.6, 0).apply(cur)
    assert kept(cur) == [0, 1]
    cur = cands(LN([0.5, 0.2, 0.2, 0.1]))
    TopP(0.6, 3).apply(cur)  # min_keep 3
    assert kept(cur) == [0, 1, 2]
    cur = cands(LN([0.5, 0.2, 0.2, 0.1]))
    TopP(1.0, 0).apply(cur)  # p >= 1: off
    assert kept(cur) == [0, 1, 2, 3]


def test_top_p_large_unsorted_vocab_beyond_the_256_guess():
    rng = np.random.default_rng(1)
    logits = (rng.standard_normal(3000) * 0.1).astype(np.float32)  # flat: p 0.9 needs ~2700
    cur = cands(logits)
    TopP(0.9, 0).apply(cur)
    # numpy reference: sort descending, float32 cumulative sum, first index reaching p
    e = np.exp(logits - logits.max(), dtype=np.float32)
    p = e / np.cumsum(e, dtype=np.float32)[-1]
    order = np.lexsort((np.arange(3000), -logits.astype(np.float64)))
    n = int(np.flatnonzero(np.cumsum(p[order], dtype=np.float32) >= np.float32(0.9))[0]) + 1
    assert n > 256 and kept(cur) == order[:n].tolist()


def test_min_p_threshold_relative_to_max():
    # p >= 0.2 * 0.5 = 0.1 keeps ids 0,1,2 (unsorted path keeps id order)
    cur = cands(LN([0.15, 0.5, 0.3, 0.05]))
    MinP(0.2, 0).apply(cur)
    assert kept(cur) == [0, 1, 2]
    # min_keep 4: the unsorted pass keeps 3 < 4, the sorted pass may not cut before 4
    cur = cands(LN([0.15, 0.5, 0.3, 0.05]))
    MinP(0.2, 4).apply(cur)
    assert kept(cur) == [1, 2, 0, 3]
    cur = cands(LN([0.15, 0.5, 0.3, 0.05]))
    MinP(0.0, 0).apply(cur)
    assert kept(cur) == [0, 1, 2, 3]


def test_typical_orders_by_distance_to_entropy():
    # p = 1/2 1/4 1/8 1/8: H = 1.75 ln 2 = 1.2130; |-ln p - H| = 0.520, 0.173, 0.866, 0.866
    # order id1, id0, id2, id3; cumulative 0.25, 0.75 > 0.5 -> keep [1, 0]
    cur = cands(LN([0.5, 0.25, 0.125, 0.125]))
    Typical(0.5, 0).apply(cur)
    assert kept(cur) == [1, 0] and not cur.sorted
    cur = cands(LN([0.5, 0.25, 0.125, 0.125]))
    Typical(0.5, 3).apply(cur)  # min_keep 3: i >= 2
    assert kept(cur) == [1, 0, 2]


def test_top_n_sigma_masks_below_max_minus_n_std():
    # logits 4 2 0 -2: mean 1, std sqrt((9+1+1+9)/4) = 2.236; n = 1 keeps >= 1.764: ids 0,1;
    # the others become -inf but stay in the (unsorted) list
    cur = cands([4, 2, 0, -2])
    TopNSigma(1.0).apply(cur)
    assert kept(cur) == [0, 1, 2, 3] and not cur.sorted
    assert cur.logits[:2].tolist() == [4, 2] and np.isneginf(cur.logits[2:]).all()
    cur = cands([4, 2, 0, -2])
    TopNSigma(2.0).apply(cur)  # keeps >= 4 - 4.47: ids 0, 1, 2
    assert np.isneginf(cur.logits).tolist() == [False, False, False, True]


def test_temperature_scales_and_zero_keeps_the_first_max():
    cur = cands([1, 2])
    TempExt(0.5, 0.0, 1.0).apply(cur)
    assert cur.logits.tolist() == [2, 4]
    cur = cands([1, 3, 3])
    TempExt(0.0, 0.0, 1.0).apply(cur)
    assert cur.logits[1] == 3 and np.isneginf(cur.logits[[0, 2]]).all()


def test_dynamic_temperature_from_normalised_entropy():
    # p = 0.75 0.25: H = 0.5623, H / ln 2 = 0.8113; temp 1, range 0.5, exp 1:
    # dyn = 0.5 + (1.5 - 0.5) * 0.8113 = 1.3113; logits (sorted) / dyn
    lg = LN([0.25, 0.75]).astype(np.float32)
    cur = cands(lg)
    TempExt(1.0, 0.5, 1.0).apply(cur)
    h = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    dyn = 0.5 + h / math.log(2)
    assert kept(cur) == [1, 0]
    assert cur.logits == pytest.approx(np.array([lg[1], lg[0]]) / dyn, rel=1e-5)
    assert cur.p.sum() == pytest.approx(1.0)


def test_penalties_repeat_frequency_presence():
    pen = Penalties(64, 2.0, 0.5, 1.0)
    for t in (1, 1, 2):
        pen.accept(t)
    cur = cands([1, 2, -1, 3])
    pen.apply(cur)
    # id1: count 2, 2 / 2 - (2 * 0.5 + 1) = -1;  id2: count 1, -1 * 2 - (0.5 + 1) = -3.5
    assert cur.logits.tolist() == [1, -1, -3.5, 3]
    win = Penalties(2, 2.0, 0.5, 1.0)  # window of 2: history 1 2 -> id1 count 1
    for t in (1, 1, 2):
        win.accept(t)
    cur = cands([1, 2, -1, 3])
    win.apply(cur)
    assert cur.logits.tolist() == [1, 2 / 2 - 1.5, -1 * 2 - 1.5, 3]


def test_logit_bias_adds_and_repeats_add_up():
    cur = cands([0, 0, 0, 0])
    LogitBias([(0, 5.0), (3, -math.inf), (0, 1.0)]).apply(cur)
    assert cur.logits[0] == 6 and np.isneginf(cur.logits[3]) and cur.logits[1] == 0


class _Always:
    def random_float(self):
        return 0.0


def test_xtc_drops_top_choices_but_the_last_above_threshold():
    # p = 0.5 0.3 0.15 0.05, threshold 0.1: ids 0,1,2 >= 0.1, pos_last = 2 -> keep ids 2, 3
    cur = cands(LN([0.5, 0.3, 0.15, 0.05]))
    XTC(1.0, 0.1, 0, _Always()).apply(cur)
    assert kept(cur) == [2, 3]
    cur = cands(LN([0.5, 0.3, 0.15, 0.05]))
    XTC(1.0, 0.1, 3, _Always()).apply(cur)  # 4 - 2 < min_keep 3: unchanged
    assert kept(cur) == [0, 1, 2, 3]


def test_mirostat_v2_truncates_by_surprise_and_updates_mu():
    # tau 1 -> mu 2; surprise -log2 p = 1 2 3 3: keep ids 0,1, renormalised 2/3 1/3
    m = MirostatV2(tau=1.0, eta=0.1)
    cur = cands(LN([0.5, 0.25, 0.125, 0.125]))
    m.apply(cur, lambda: 0.9)  # cumulative 0.667, 1.0: u 0.9 -> id 1
    assert kept(cur) == [0, 1] and cur.ids[cur.selected] == 1
    # mu = 2 - 0.1 * (-log2(1/3) - 1)
    assert m.mu == pytest.approx(2 - 0.1 * (math.log2(3) - 1), rel=1e-6)


def test_mirostat_v1_zipf_estimate():
    # p_i ~ 1/i^2 (i = 1..4): b_i = 2 t_i, so s_hat = 2, eps = 1;
    # k = (1 * 2^mu / (1 - 4^-1))^(1/2) with mu = 2 tau = 2: sqrt(16/3) = 2.31 -> top-2
    p = np.array([1, 1 / 4, 1 / 9, 1 / 16])
    m = Mirostat(n_vocab=4, tau=1.0, eta=0.1)
    cur = cands(LN(p / p.sum()))
    m.apply(cur, lambda: 0.5)
    assert kept(cur) == [0, 1] and cur.p == pytest.approx([0.8, 0.2], rel=1e-5)
    assert cur.ids[cur.selected] == 0
    assert m.mu == pytest.approx(2 - 0.1 * (-math.log2(0.8) - 1), rel=1e-5)


def test_dist_walks_candidates_in_order():
    # p = 0.25 0.75 in id order: u < 0.25 -> id 0, else id 1
    for u, want in ((0.0, 0), (0.2, 0), (0.3, 1), (0.99, 1)):
        cur = cands(LN([0.25, 0.75]))
        dist_select(cur, u)
        assert cur.ids[cur.selected] == want
    cur = cands([0.0, -math.inf, 1.0])
    dist_select(cur, 0.0)  # u = 0 never lands on a zero-probability candidate
    assert cur.selected == 0


def test_softmax_sorted():
    cur = cands(LN([0.25, 0.75]))
    softmax(cur, do_sort=True)
    assert kept(cur) == [1, 0] and cur.p == pytest.approx([0.75, 0.25])


PIECES = ["a", "b", "c", ":", "d"]


def _dry(history, multiplier=1.0, base=1.75, allowed=2, last_n=64, breakers=("\n", ":")):
    brk = process_breakers(list(breakers), len(PIECES), PIECES.__getitem__)
    d = DRY(multiplier, base, allowed, last_n, brk)
    for t in history:
        d.accept(t)
    cur = cands([0, 0, 0, 0, 0])
    d.apply(cur)
    return cur.logits.tolist()


def test_dry_penalises_the_token_extending_a_repeat():
    a, b, c, colon = 0, 1, 2, 3
    # a b c a b: "a b" repeats, c would extend it to 3: repeat_len 2, allowed 2 -> 1 * 1.75^0
    assert _dry([a, b, c, a, b]) == [0, 0, -1, 0, 0]
    # allowed 1: the longest repeat c extends is still "a b": 1 * 1.75^(2 - 1)
    assert _dry([a, b, c, a, b], allowed=1) == pytest.approx([0, 0, -1.75, 0, 0])
    # a b c d a b c: c extends nothing; d extends "a b c" (3): 1 * 1.75^(3 - 2)
    assert _dry([a, b, c, 4, a, b, c]) == pytest.approx([0, 0, 0, 0, -1.75])
    # a b : a b -- ":" would extend, but a single-token breaker is never penalised
    assert _dry([a, b, colon, a, b]) == [0, 0, 0, 0, 0]
    # a : b c a : b c -- "a : b c" (4) repeats and a would extend it: 1.75^(4 - 2) = 3.0625;
    # with ":" a breaker the newest ":" is 2 tokens back, so the length counts as 2: 1.75^0
    hist = [a, colon, b, c, a, colon, b, c]
    assert _dry(hist, breakers=()) == pytest.approx([-3.0625, 0, 0, 0, 0])
    assert _dry(hist) == pytest.approx([-1, 0, 0, 0, 0])
    # window: only the last 4 tokens (a : b c) are scanned -> no earlier occurrence
    assert _dry(hist, last_n=4, breakers=()) == [0, 0, 0, 0, 0]


def test_dry_breaker_processing_heads_and_tails():
    pieces = ["xa", "b", "ab", "c", "q\nq"]
    brk = process_breakers(["ab", "\n"], len(pieces), pieces.__getitem__)
    # "ab" inside token 2; token 0 ends with "a", the rest "b" tokenises to [1]; "\n" in token 4
    assert brk == {2: [()], 0: [(1,)], 4: [()]}


def _infill(p, pieces, eog=(3,), eot=3):
    from pyllama.sampling.samplers import Infill
    cur = cands(LN(np.array(p)))
    Infill(eog, pieces.__getitem__, eot).apply(cur)
    return kept(cur), cur.p


def test_infill_prefers_eog_when_text_is_weak():
    # p_eog 0.3: 3 * 0.3 * 4 = 3.6 > p_txt 0.7 -> only the EOG token is left
    ids, p = _infill([0.3, 0.3, 0.1, 0.3], ["a", "ab", "x", ""])
    assert ids == [3] and p == pytest.approx([1.0])


def test_infill_merges_prefixes_and_thresholds():
    # sorted a .4, ab .3, x .25, eos .05; "a" prefixes "ab": a takes .3 -> .7, ab dropped;
    # p >= 0.2 or EOG keeps a, x, eos (2 text tokens); then p >= 1/3 or EOG: a .7, eos .05
    ids, p = _infill([0.4, 0.3, 0.25, 0.05], ["a", "ab", "x", ""])
    assert ids == [0, 3] and p == pytest.approx([0.7 / 0.75, 0.05 / 0.75], rel=1e-5)


def test_infill_falls_back_to_end_of_text():
    # ten text tokens of .099 (none reaches 0.2), eos .01 (3 * .01 * 11 < .99): only eot is left
    pieces = list("abcdefghij") + [""]
    ids, _ = _infill([0.099] * 10 + [0.01], pieces, eog=(10,), eot=10)
    assert ids == [10]


def test_adaptive_p_reshapes_around_the_target():
    from pyllama.sampling.samplers import AdaptiveP
    # target .5, decay .9: EMA 5 / 10 -> adapted target 2 * .5 - .5 = .5
    # p .5 .3 .2: d = |p - .5| / .3 = 0, 2/3, 1; logit = 5 - 10 d^2 / (1 + d) = 5, 2.333, 0
    a = AdaptiveP(0.5, 0.9)
    cur = cands(LN([0.5, 0.3, 0.2]))
    a.apply(cur, lambda: 0.99)
    assert cur.logits == pytest.approx([5, 5 - 10 * (4 / 9) / (5 / 3), 0], rel=1e-5)
    e = np.exp([5, 5 - 8 / 3, 0])
    assert cur.p == pytest.approx(e / e.sum(), rel=1e-5)
    assert cur.ids[cur.selected] == 1  # cumulative .929, .994 > .99
    a.accept(1)  # EMA takes the original p .3: 0.3 + 0.9 * 5 = 4.8, weight 1 + 0.9 * 10 = 10
    assert (a.weighted_sum, a.total_weight) == (pytest.approx(4.8), pytest.approx(10.0))


def test_top_k_large_vocab_prefilter_selects_the_same(monkeypatch):
    """top_k over a large vocabulary first keeps the logits >= the k-th best block maximum; the
    selection (ties at the cut by lowest id, -inf runs) is the full argpartition path's."""
    import pyllama.sampling.candidates as C
    rng = np.random.default_rng(3)
    for trial in range(60):
        n, k = int(rng.integers(70_000, 300_000)), int(rng.integers(1, 60))
        if trial % 2:
            x = (rng.integers(-50, 50, n) / 4).astype(np.float32)      # many ties
        else:
            x = rng.standard_normal(n).astype(np.float32)
        if trial % 5 == 0:
            x[rng.integers(0, n, n // 3)] = -np.inf
        ids = rng.permutation(n).astype(np.int32) if trial % 3 == 0 else np.arange(n, dtype=np.int32)
        fast = C.top_k_indices(x, ids, k)
        monkeypatch.setattr(C, "_PREFILTER_MIN", 1 << 40)
        full = C.top_k_indices(x, ids, k)
        monkeypatch.setattr(C, "_PREFILTER_MIN", 1 << 16)
        assert np.array_equal(fast, full)
