"""SamplerChain: chain construction and order, seeded reproducibility, one RNG draw per sample,
explicit uniforms, greedy at temp <= 0, clone/reset, probabilities."""
import math

import numpy as np
import pytest

from pyllama.sampling import SamplerChain, SamplerParams, greedy, softmax_top_n
from pyllama.sampling.rng import Mt19937

LN = np.log


def chain(n_vocab=4, **kw):
    return SamplerChain(SamplerParams(**kw), n_vocab)


def random_logits(n, count, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(n) * 2).astype(np.float32) for _ in range(count)]


def _nth_uniform(seed, n):
    """The uniform llama.cpp's dist would draw after n others with this seed."""
    r = Mt19937(seed)
    for _ in range(n):
        r.random()
    return r.random()


def test_default_chain_matches_llama_cpp():
    c = chain(100, seed=1)
    assert c.describe() == ("logits -> ?penalties -> ?dry -> ?top-n-sigma -> top-k -> ?typical "
                            "-> top-p -> min-p -> ?xtc -> temp-ext -> dist ")
    c = chain(100, seed=1, mirostat=2)
    assert c.describe() == "logits -> temp -> mirostat-v2 "
    c = SamplerChain(SamplerParams(seed=1, ignore_eos=True, penalty_repeat=1.1), 100, eog_ids=[3])
    assert c.describe().startswith("logits -> logit-bias -> penalties -> ?dry")
    c = chain(100, seed=1, samplers=["top_k", "adaptive_p", "temperature"])
    assert c.describe() == "logits -> top-k -> temp-ext -> adaptive-p "


def test_chain_order_matters():
    # p = 0.5 0.3 0.15 0.05, min_p 0.2 (keep p >= 0.1) and temperature 4:
    # min_p first drops id 3; temperature first flattens to p^(1/4) ~ .84 .74 .62 .47: keeps all
    logits = LN([0.5, 0.3, 0.15, 0.05]).astype(np.float32)
    first = chain(seed=1, top_k=0, top_p=1.0, min_p=0.2, temp=4.0, samplers=["min_p", "temperature"])
    second = chain(seed=1, top_k=0, top_p=1.0, min_p=0.2, temp=4.0, samplers=["temperature", "min_p"])
    first.sample(logits)
    second.sample(logits)
    assert sorted(first.last_candidates[0].tolist()) == [0, 1, 2]
    assert sorted(second.last_candidates[0].tolist()) == [0, 1, 2, 3]


def test_explicit_u_walks_the_final_candidates():
    # top_k 2 keeps ids 0 (p .5) and 1 (p .3): renormalised .625 .375 at temp 1
    logits = LN([0.5, 0.3, 0.15, 0.05]).astype(np.float32)
    c = chain(seed=1, top_k=2, top_p=1.0, min_p=0.0, temp=1.0)
    assert c.sample(logits, u=0.6) == 0
    assert c.sample(logits, u=0.63) == 1
    assert c.last_candidates[1] == pytest.approx([0.625, 0.375])


def test_same_seed_same_tokens_and_one_draw_per_sample():
    seq = random_logits(50, 40)
    a, b = chain(50, seed=123), chain(50, seed=123)
    ta = [a.sample(x) for x in seq]
    tb = [b.sample(x) for x in seq]
    assert ta == tb
    # exactly one uniform per sample: the chain's generator is 40 draws in
    assert a.rng.random() == _nth_uniform(123, 40)


def test_different_seeds_differ():
    seq = random_logits(50, 40)
    t1 = [chain(50, seed=1).sample(x) for x in seq]
    c2 = chain(50, seed=2)
    t2 = [c2.sample(x) for x in seq]
    assert t1 != t2


def test_explicit_u_matches_the_rng_path():
    """Sampling with the uniforms the chain would have drawn reproduces plain sampling."""
    seq = random_logits(50, 20)
    plain = chain(50, seed=7)
    want = [plain.sample(x) for x in seq]
    rng = Mt19937(7)
    spec = chain(50, seed=99)
    assert [spec.sample(x, u=rng.random()) for x in seq] == want


def test_xtc_has_its_own_rng():
    seq = random_logits(50, 20)
    c = chain(50, seed=5, xtc_probability=0.5, xtc_threshold=0.05, top_k=0)
    [c.sample(x) for x in seq]
    assert c.rng.random() == _nth_uniform(5, 20)


def test_random_seed_is_resolved():
    seeds = {chain(10).seed for _ in range(5)} | {chain(10, seed=-1).seed for _ in range(5)}
    assert all(0 <= s <= 0xFFFFFFFF for s in seeds) and len(seeds) > 1  # drawn from the OS
    assert chain(10, seed=42).seed == 42


def test_temp_zero_is_greedy_and_still_has_probs():
    for x in random_logits(1000, 10, seed=3):
        c = chain(1000, seed=1, temp=0.0)
        for u in (0.0, 0.5, 0.999999):
            assert c.sample(x, u=u) == greedy(x)
        ids, p = c.last_candidates
        assert ids[0] == greedy(x) and p[0] == 1.0 and 1 < len(ids) <= 40 and p[1:].sum() == 0


def test_temp_zero_tie_takes_lowest_id():
    x = np.zeros(500, np.float32)
    x[[7, 300]] = 1.0
    assert chain(500, seed=1, temp=0.0).sample(x, u=0.9) == 7
    assert chain(500, seed=1, temp=0.0, top_k=0, top_p=1.0, min_p=0.0).sample(x, u=0.9) == 7


def test_penalties_history_via_accept_and_reset():
    x = np.array([5.0, 4.9, 0, 0], np.float32)
    c = chain(seed=1, temp=0.0, penalty_repeat=2.0)
    assert c.sample(x) == 0
    c.accept(0)  # 5 / 2 = 2.5 < 4.9
    assert c.sample(x) == 1
    c.reset()
    assert c.sample(x) == 0


def test_clone_carries_rng_and_history():
    seq = random_logits(50, 30)
    c = chain(50, seed=11, penalty_repeat=1.3, penalty_present=0.5)
    for x in seq[:10]:
        c.accept(c.sample(x))
    d = c.clone()
    rest_c, rest_d = [], []
    for x in seq[10:]:
        t = c.sample(x)
        c.accept(t)
        rest_c.append(t)
        t = d.sample(x)
        d.accept(t)
        rest_d.append(t)
    assert rest_c == rest_d


def test_reset_replays_the_seed():
    seq = random_logits(50, 10)
    c = chain(50, seed=3)
    first = [c.sample(x) for x in seq]
    c.reset()
    assert [c.sample(x) for x in seq] == first


def test_probs_post_and_pre_sampling():
    logits = LN([0.5, 0.3, 0.15, 0.05]).astype(np.float32)
    c = chain(seed=1, top_k=2, top_p=1.0, min_p=0.0, temp=1.0)
    post = c.probs(logits, 3)
    assert [t for t, _ in post] == [0, 1] and [p for _, p in post] == pytest.approx([0.625, 0.375])
    pre = c.probs(logits, 3, post_sampling=False)
    assert [t for t, _ in pre] == [0, 1, 2] and [p for _, p in pre] == pytest.approx([0.5, 0.3, 0.15])
    assert c.rng.random() == Mt19937(1).random()  # probs() drew nothing


def test_probs_full_is_the_final_distribution():
    x = random_logits(300, 1, seed=4)[0]
    c = chain(300, seed=1)
    full = c.probs_full(x)
    assert full.shape == (300,) and full.sum() == pytest.approx(1.0, abs=1e-6)
    assert np.count_nonzero(full) <= 40
    c.sample(x)
    ids, p = c.last_candidates
    assert full[ids] == pytest.approx(p)


def test_softmax_top_n():
    top = softmax_top_n(np.array([0.0, math.log(3.0)], np.float32), 1)
    assert top[0][0] == 1 and top[0][1] == pytest.approx(0.75)


def test_mirostat_chain_draws_once():
    seq = random_logits(100, 10)
    c = chain(100, seed=9, mirostat=1)
    toks = [c.sample(x) for x in seq]
    assert c.rng.random() == _nth_uniform(9, 10) and all(0 <= t < 100 for t in toks)


def test_dry_in_the_chain_needs_pieces():
    with pytest.raises(ValueError):
        chain(5, seed=1, dry_multiplier=0.8)
    pieces = ["a", "b", "c", ":", "d"]
    c = SamplerChain(SamplerParams(seed=1, dry_multiplier=1.0, temp=0.0), 5,
                     token_pieces=pieces.__getitem__)
    for t in (0, 1, 2, 0, 1):
        c.accept(t)
    x = np.array([0, 0, 0.5, 0, 0], np.float32)  # c (0.5) loses 1.0 to DRY: a (id 0) wins
    assert c.sample(x) == 0


def test_ignore_eos():
    x = np.array([0, 0, 5.0, 0], np.float32)
    c = SamplerChain(SamplerParams(seed=1, temp=0.0, ignore_eos=True), 4, eog_ids=[2])
    assert c.sample(x) != 2
    assert c.probs_full(x)[2] == 0
    c = SamplerChain(SamplerParams(seed=1, temp=0.0), 4, suppress_ids=[2])  # vocab suppress tokens
    assert c.sample(x) != 2 and c.describe().startswith("logits -> logit-bias ->")


def test_default_chain_speed_large_vocab():
    import time
    x = random_logits(262144, 1)[0]
    c = chain(262144, seed=1)
    c.sample(x)
    t0 = time.perf_counter()
    for _ in range(20):
        c.sample(x)
    per = (time.perf_counter() - t0) / 20
    assert per < 0.02  # budget 2 ms; loose here because the test machine is shared


def test_rejection_sampling_emits_the_target_distribution():
    from pyllama.sampling.rejection import accept_draft, residual, sample_probs
    p = np.array([0.5, 0.3, 0.2, 0.0])  # target
    q = np.array([0.2, 0.2, 0.3, 0.3])  # draft
    # exact: P(t) = q(t) min(1, p/q) + (1 - sum_s q(s) min(1, p(s)/q(s))) * residual(t)
    acc = q * np.minimum(1, p / q)
    assert acc + (1 - acc.sum()) * residual(p, q) == pytest.approx(p)
    # the same through the functions, with seeded uniforms (10k rounds)
    rng, r = np.random.default_rng(0), residual(p, q)
    counts = np.zeros(4)
    for u in rng.random((10000, 3)):
        t = sample_probs(q, u[0])
        if not accept_draft(p, q, t, u[1]):
            t = sample_probs(r, u[2])
        counts[t] += 1
    assert counts / counts.sum() == pytest.approx(p, abs=0.02) and counts[3] == 0


def test_chain_probs_full_drives_rejection_sampling():
    from pyllama.sampling.rejection import accept_draft
    x = random_logits(200, 1, seed=8)[0]
    target = chain(200, seed=1, temp=0.7)
    p = target.probs_full(x)
    assert accept_draft(p, p, int(np.argmax(p)), 0.999)  # identical models always accept


def test_token_pieces_as_a_list():
    pieces = ["a", "b", "c", ":", "d"]
    c = SamplerChain(SamplerParams(seed=1, dry_multiplier=1.0, temp=0.0), 5, token_pieces=pieces)
    for t in (0, 1, 2, 0, 1):
        c.accept(t)
    assert c.sample(np.array([0, 0, 0.5, 0, 0], np.float32)) == 0
