"""Batch invariance of the whole model (docs/architecture.md) on tiny random models of every
architecture: logits are bit-identical across prefill vs token-by-token, ubatch sizes, thread
counts, iSWA vs swa_full, rollbacks within the guarantee, sequences sharing a unified cache, and
speculative (self-drafted) vs plain greedy decoding. The iSWA architectures are those whose tiny()
config has a sliding window.

The SWA models use n_swa = 16 and run past the 256-cell SWA cache so cells really are recycled;
llama4, whose chunk llama.cpp fixes at 8192 positions, runs these past its chunk boundary and its
SWA cache in tests/test_arch_llama4.py."""
import numpy as np
import pytest

import pyllama
from pyllama import arch as arch_registry
from pyllama.generate import generate
from pyllama.sampling import SamplerChain, SamplerParams
from pyllama.speculative import DraftModelDrafter, SpecParams, speculative_generate
from tiny import random_tokens as tokens

ARCHS = arch_registry.names()
SWA_ARCHS = [a for a in ARCHS if "attention.sliding_window" in arch_registry.get(a).tiny()]
N_LONG = 300


@pytest.fixture(scope="module")
def models(tiny_model_path):
    cache = {}

    def get(arch):
        if arch not in cache:
            cache[arch] = pyllama.load_model(tiny_model_path(arch))
        return cache[arch]
    return get


def one_by_one(ctx, toks, seq_id=0):
    return np.concatenate([ctx.eval([t], seq_id=seq_id) for t in toks])


@pytest.mark.parametrize("arch", ARCHS)
def test_prefill_equals_token_by_token(models, arch):
    m = models(arch)
    toks = tokens(40)
    a = pyllama.Context(m, n_ctx=256, n_ubatch=512).eval(toks, logits_all=True)
    b = one_by_one(pyllama.Context(m, n_ctx=256), toks)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("arch", ARCHS)
def test_ubatch_size_does_not_change_logits(models, arch):
    m = models(arch)
    toks = tokens(60, seed=1)
    a = pyllama.Context(m, n_ctx=256, n_ubatch=512).eval(toks, logits_all=True)
    b = pyllama.Context(m, n_ctx=256, n_ubatch=7).eval(toks, logits_all=True)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("arch", SWA_ARCHS)
def test_iswa_equals_swa_full_past_the_swa_cache(models, arch):
    m = models(arch)
    toks = tokens(N_LONG, seed=2)
    small = pyllama.Context(m, n_ctx=512, n_ubatch=32)
    full = pyllama.Context(m, n_ctx=512, n_ubatch=32, swa_full=True)
    a = small.eval(toks, logits_all=True)
    b = full.eval(toks, logits_all=True)
    assert small.memory.seq_pos_min(0) > 0, "SWA cells were never recycled"
    assert np.array_equal(a, b)
    # and generation continues identically one token at a time
    more = tokens(20, seed=3)
    assert np.array_equal(one_by_one(small, more), one_by_one(full, more))


@pytest.mark.parametrize("arch", ARCHS)
def test_rollback_equals_never_decoded(models, arch):
    m = models(arch)
    toks = tokens(N_LONG, seed=4)
    ref = pyllama.Context(m, n_ctx=512, n_ubatch=16)
    ref.eval(toks)
    ctx = pyllama.Context(m, n_ctx=512, n_ubatch=16)
    ctx.eval(toks)
    rng = np.random.default_rng(5)
    for _ in range(4):
        r = int(rng.integers(1, 10))
        junk = tokens(r, seed=int(rng.integers(1 << 30)))
        one_by_one(ctx, junk)
        p = ctx.memory.seq_pos_max(0) + 1 - r
        ctx.memory.seq_rm(0, p, -1)
        nxt = tokens(3, seed=int(rng.integers(1 << 30)))
        assert np.array_equal(one_by_one(ctx, nxt), one_by_one(ref, nxt))
    if arch in SWA_ARCHS:     # (llama4's 8192-position chunks: tests/test_arch_llama4.py)
        assert ctx.memory.seq_pos_min(0) > 0


@pytest.mark.parametrize("arch", ARCHS)
def test_two_sequences_in_unified_cache_equal_each_alone(models, arch):
    m = models(arch)
    ta, tb = tokens(N_LONG, seed=6), tokens(N_LONG, seed=7)
    shared = pyllama.Context(m, n_ctx=1024, n_ubatch=32, n_seq_max=2, kv_unified=True)
    outs = {0: [], 1: []}
    for i in range(0, N_LONG, 50):   # interleave the two prompts chunk by chunk
        outs[0].append(shared.eval(ta[i:i + 50], seq_id=0, logits_all=True))
        outs[1].append(shared.eval(tb[i:i + 50], seq_id=1, logits_all=True))
    alone_a = pyllama.Context(m, n_ctx=512, n_ubatch=32).eval(ta, logits_all=True)
    alone_b = pyllama.Context(m, n_ctx=512, n_ubatch=32).eval(tb, logits_all=True)
    assert np.array_equal(np.concatenate(outs[0]), alone_a)
    assert np.array_equal(np.concatenate(outs[1]), alone_b)


@pytest.mark.parametrize("arch", SWA_ARCHS)
def test_swa_extra_makes_rollback_exact_beside_a_long_prompt(models, arch):
    """Sequence A decodes, B's long prompt recycles cells in the shared SWA cache, then A rolls
    back N tokens: exact with swa_extra = N."""
    m = models(arch)
    n_back = 6
    ta, tb = tokens(200, seed=8), tokens(400, seed=9)
    ctx = pyllama.Context(m, n_ctx=1024, n_ubatch=64, n_seq_max=2, kv_unified=True,
                          swa_extra=n_back)
    ctx.eval(ta, seq_id=0)
    ctx.eval(tb, seq_id=1)
    assert ctx.memory.seq_pos_min(0) > 0 or ctx.memory.seq_pos_min(1) > 0
    p = ctx.memory.seq_pos_max(0) + 1 - n_back
    ctx.memory.seq_rm(0, p, -1)
    nxt = tokens(5, seed=10)
    ref = pyllama.Context(m, n_ctx=512, n_ubatch=64, swa_full=True)
    ref.eval(ta[:p])
    assert np.array_equal(one_by_one(ctx, nxt), one_by_one(ref, nxt))


def test_bad_batches_return_minus_one_and_leave_memory(models):
    m = models("llama")
    ctx = pyllama.Context(m, n_ctx=256)
    ctx.eval(tokens(5))
    before = (ctx.memory.seq_pos_min(0), ctx.memory.seq_pos_max(0))
    bad = [
        pyllama.Batch([10**6], pos=[5], seq_ids=[0]),            # unknown token id
        pyllama.Batch([1], pos=[7], seq_ids=[0]),                # position gap
        pyllama.Batch([1], pos=[5], seq_ids=[3]),                # seq id out of range
    ]
    for b in bad:
        assert ctx.decode(b) == -1
        assert (ctx.memory.seq_pos_min(0), ctx.memory.seq_pos_max(0)) == before


def test_full_cache_returns_one_and_leaves_memory(models):
    m = models("llama")
    ctx = pyllama.Context(m, n_ctx=256, n_batch=512)
    ctx.eval(tokens(250))
    rc = ctx.decode(pyllama.Batch(tokens(10), pos=np.arange(250, 260), seq_ids=[0] * 10))
    assert rc == 1
    assert ctx.memory.seq_pos_max(0) == 249


@pytest.mark.parametrize("arch", ARCHS)
def test_thread_count_does_not_change_logits(models, arch):
    m = models(arch)
    toks = tokens(40, seed=11)
    try:
        m.backend.set_threads(1)
        a = pyllama.Context(m, n_ctx=256, n_ubatch=16).eval(toks, logits_all=True)
        m.backend.set_threads(2)
        b = pyllama.Context(m, n_ctx=256, n_ubatch=16).eval(toks, logits_all=True)
    finally:
        m.backend.set_threads(None)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_speculative_equals_plain(models, arch):
    """Self-drafting (the model drafts for itself, 4 tokens a round): every sampled row equals
    plain decoding's, bit for bit."""
    class Recording(SamplerChain):
        def __init__(self):
            super().__init__(SamplerParams(temp=0.0), m.n_vocab, eog_ids=())
            self.rows = []

        def sample(self, logits, u=None):
            self.rows.append(np.array(logits, copy=True))
            return super().sample(logits, u)

    m = models(arch)
    prompt = [int(t) for t in tokens(20, seed=12)]
    plain = Recording()
    ref = list(generate(pyllama.Context(m, n_ctx=512, n_ubatch=64), prompt, plain,
                        n_predict=40, stop_tokens=()))
    spec = Recording()
    drafter = DraftModelDrafter(pyllama.Context(m, n_ctx=512, n_ubatch=64))
    got = list(speculative_generate(pyllama.Context(m, n_ctx=512, n_ubatch=64), spec, prompt,
                                    drafter, SpecParams(n_max=4), n_predict=40, stop_tokens=()))
    assert got == ref
    assert all(np.array_equal(a, b) for a, b in zip(spec.rows, plain.rows))
