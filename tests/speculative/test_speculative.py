"""Speculative decoding: greedy speculative == greedy plain (tokens and bit-identical logits) with
and without swa_full on tiny models running past the SWA cache; seeded sampling reproduces plain
sampling; rejection sampling keeps the target distribution; the window survives every rollback."""
import numpy as np
import pytest

import pyllama
from pyllama.generate import generate
from pyllama.sampling import SamplerParams
from pyllama.speculative import (DraftModelDrafter, NgramDrafter, SpecParams, SpecStats,
                                 speculative_generate, truncated_model)
from pyllama.speculative.loop import accept_rejection
from recording_chain import Recording

N_PREDICT = 300          # past the 256-cell SWA cache of the tiny models (n_swa = 16)


def chain(model, **kw):
    return Recording(SamplerParams(**kw), model.n_vocab, eog_ids=())


def prompt(n=20, seed=0):
    return [int(t) for t in np.random.default_rng(seed).integers(0, 270, n)]


@pytest.fixture(scope="module")
def target(tiny_model_path):
    return pyllama.load_model(tiny_model_path("gemma3", embd_std=0.25))


@pytest.fixture(scope="module")
def other_draft(tiny_model_path):
    return pyllama.load_model(tiny_model_path("gemma3", seed=1, embd_std=0.25))


def plain_run(model, n, swa_full=False, **sp):
    ctx = pyllama.Context(model, n_ctx=1024, n_ubatch=64, swa_full=swa_full)
    s = chain(model, **sp)
    toks = list(generate(ctx, prompt(), s, n_predict=n, stop_tokens=()))
    return toks, s.rows


def make_drafter(kind, target, other_draft, swa_full):
    if kind == "ngram":
        return NgramDrafter(size_n=4, size_m=16, min_n=1)
    model = {"self": target, "other": other_draft, "layers": truncated_model(target, 2)}[kind]
    return DraftModelDrafter(pyllama.Context(model, n_ctx=1024, n_ubatch=64, swa_full=swa_full))


def window_checked(ctx, gen):
    """Yield from gen, asserting after every token that the target cache still holds every
    position the next token's window needs."""
    hp = ctx.hp
    for t in gen:
        yield t
        n_past = ctx.memory.seq_pos_max(0) + 1
        assert ctx.memory.seq_pos_min(0) <= max(0, n_past - hp.n_swa + 1)


@pytest.mark.parametrize("swa_full", [False, True])
@pytest.mark.parametrize("kind,n_max", [("self", 4), ("other", 3), ("ngram", 8), ("layers", 2),
                                        ("other", 16), ("self", 1)])
def test_greedy_speculative_equals_plain(target, other_draft, kind, n_max, swa_full):
    ref_toks, ref_rows = plain_run(target, N_PREDICT, swa_full=False, temp=0.0)
    ctx = pyllama.Context(target, n_ctx=1024, n_ubatch=64, swa_full=swa_full)
    s = chain(target, temp=0.0)
    st = SpecStats()
    gen = speculative_generate(ctx, s, prompt(), make_drafter(kind, target, other_draft, swa_full),
                               SpecParams(n_max=n_max), n_predict=N_PREDICT, stop_tokens=(),
                               stats=st)
    toks = list(window_checked(ctx, gen))
    assert toks == ref_toks
    assert len(s.rows) == len(ref_rows)
    assert all(np.array_equal(a, b) for a, b in zip(s.rows, ref_rows))
    if not swa_full:
        assert ctx.memory.seq_pos_min(0) > 0
    if kind == "self":
        assert st.n_accept == st.n_drafted > 0     # the target drafting for itself never misses


def test_seeded_sampling_speculative_equals_plain(target):
    sp = dict(temp=0.8, seed=1234)
    ref_toks, _ = plain_run(target, 120, **sp)
    ctx = pyllama.Context(target, n_ctx=1024, n_ubatch=64)
    drafter = DraftModelDrafter(pyllama.Context(target, n_ctx=1024, n_ubatch=64))
    toks = list(speculative_generate(ctx, chain(target, **sp), prompt(), drafter,
                                     SpecParams(n_max=4), n_predict=120, stop_tokens=()))
    assert toks == ref_toks


def test_two_sequences_share_a_cache(target):
    """Two speculative streams interleaved in one unified cache (swa_extra >= draft length)
    equal each one run alone."""
    n_max = 4
    ctx = pyllama.Context(target, n_ctx=2048, n_ubatch=64, n_seq_max=2, kv_unified=True,
                          swa_extra=n_max)
    gens = []
    for sid in (0, 1):
        d = NgramDrafter(size_n=4, size_m=16, min_n=1)
        gens.append(speculative_generate(ctx, chain(target, temp=0.0), prompt(seed=sid), d,
                                         SpecParams(n_max=n_max), n_predict=N_PREDICT,
                                         seq_id=sid, stop_tokens=()))
    outs = [[], []]
    for _ in range(N_PREDICT):
        for sid in (0, 1):
            t = next(gens[sid], None)
            if t is not None:
                outs[sid].append(t)
    for sid in (0, 1):
        alone = pyllama.Context(target, n_ctx=1024, n_ubatch=64)
        ref = list(generate(alone, prompt(seed=sid), chain(target, temp=0.0),
                            n_predict=N_PREDICT, stop_tokens=()))
        assert outs[sid] == ref


def test_rejection_sampling_keeps_the_target_distribution():
    """Chi-square over many runs of one round with a tiny vocabulary: the first emitted token
    is distributed as p, whatever the draft distribution q."""
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.2, 0.2, 0.1, 0.0])
    q = np.array([0.1, 0.1, 0.3, 0.3, 0.2])
    counts = np.zeros(5)
    n = 20000
    for _ in range(n):
        d = int(rng.choice(5, p=q))
        out = accept_rejection([p, p], [q], [d], rng.random)
        counts[out[0]] += 1
    assert counts[4] == 0
    expected = p[:4] * n
    stat = float(((counts[:4] - expected) ** 2 / expected).sum())
    assert stat < 16.27, (counts, stat)       # chi-square, 3 d.o.f., p = 0.001


def test_ngram_drafter_proposes_the_continuation_of_the_last_match():
    d = NgramDrafter(size_n=3, size_m=4, min_n=1)
    h = [1, 2, 3, 4, 5, 6, 9, 9, 1, 2, 3]
    assert d.draft(h, 10) == [4, 5, 6, 9]
    assert d.draft(h, 2) == [4, 5]
    assert d.draft([7, 8], 4) == []


def test_rejection_mode_with_the_target_as_draft_accepts_everything(target):
    """p == q exactly (logits do not depend on the batch shape), so min(1, p/q) = 1 always."""
    ctx = pyllama.Context(target, n_ctx=1024, n_ubatch=64)
    drafter = DraftModelDrafter(pyllama.Context(target, n_ctx=1024, n_ubatch=64))
    st = SpecStats()
    toks = list(speculative_generate(ctx, chain(target, temp=0.9, seed=7), prompt(), drafter,
                                     SpecParams(n_max=4, mode="rejection"), n_predict=60,
                                     stop_tokens=(), stats=st))
    assert len(toks) == 60
    assert st.n_drafted > 0 and st.n_accept == st.n_drafted


def test_rejection_mode_with_another_draft_runs_and_rejects(target, other_draft):
    ctx = pyllama.Context(target, n_ctx=1024, n_ubatch=64)
    drafter = DraftModelDrafter(pyllama.Context(other_draft, n_ctx=1024, n_ubatch=64))
    st = SpecStats()
    toks = list(speculative_generate(ctx, chain(target, temp=0.9, seed=7), prompt(), drafter,
                                     SpecParams(n_max=4, mode="rejection"), n_predict=60,
                                     stop_tokens=(), stats=st))
    assert len(toks) == 60 and all(0 <= t < target.n_vocab for t in toks)
    assert st.n_accept < st.n_drafted
