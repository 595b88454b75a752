"""Decode replay (pyllama/replay.py): one-token decodes run as a compiled sequence of backend calls
give the logits of the architecture's forward bit for bit, on the bundled models in both numerics
with and without flash attention, on tiny models of every architecture, across sequences, rollbacks
and KV shifts; what it cannot replay it leaves to the normal forward."""
import numpy as np
import pytest

import pyllama
from pyllama import arch as arch_registry
from pyllama.batch import Batch
from pyllama.replay import DecodeReplay
from tiny import random_tokens as tokens

ARCHS = arch_registry.names()
KEY = (1, 1)


def _ctx(model, monkeypatch, replay: bool, **kw):
    monkeypatch.setenv("PYLLAMA_REPLAY", "1" if replay else "0")
    return pyllama.Context(model, **{"n_ctx": 512, "n_batch": 64, "n_ubatch": 64, **kw})


def _one(ctx, tok, pos, seq=0):
    assert ctx.decode(Batch(np.asarray([tok], np.int32), pos=np.asarray([pos], np.int32),
                            seq_ids=[seq], logits=np.ones(1, bool))) == 0
    return ctx.get_logits_ith(-1).copy()


def _greedy(ctx, prompt, n, seq=0):
    """Prefill, then n greedy one-token decodes: the logits of each."""
    assert ctx.decode(Batch(np.asarray(prompt, np.int32), pos=np.arange(len(prompt), dtype=np.int32),
                            seq_ids=[seq] * len(prompt),
                            logits=np.arange(len(prompt)) == len(prompt) - 1)) == 0
    out, t = [], int(np.argmax(ctx.get_logits_ith(-1)))
    for i in range(n):
        out.append(_one(ctx, t, len(prompt) + i, seq))
        t = int(np.argmax(out[-1]))
    return out


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x.view(np.uint32), y.view(np.uint32))
                                    for x, y in zip(a, b))


def _state(ctx):
    st = ctx._replay._state.get(KEY)
    return None if st is None else ("replayed" if st[0] == "plan" and st[2] else st[0])


@pytest.mark.parametrize("numerics,fa", [("llama.cpp", True), ("llama.cpp", False),
                                         ("invariant", False)])
def test_bundled_gemma_bit_identical(gemma_path, monkeypatch, numerics, fa):
    model = pyllama.load_model(gemma_path, n_threads=2)
    prompt = [2, 651, 6037, 576, 9405, 603]
    ref = _greedy(_ctx(model, monkeypatch, False, numerics=numerics, flash_attn=fa), prompt, 8)
    ctx = _ctx(model, monkeypatch, True, numerics=numerics, flash_attn=fa)
    assert _same(_greedy(ctx, prompt, 8), ref)
    assert _state(ctx) == "replayed"           # recorded twice, checked once, then replayed


def test_bundled_qwen_bit_identical(qwen_path, monkeypatch):
    model = pyllama.load_model(qwen_path, n_threads=2)
    prompt = [151644, 8948, 198, 2610, 525]
    ref = _greedy(_ctx(model, monkeypatch, False, numerics="llama.cpp", flash_attn=True), prompt, 6)
    ctx = _ctx(model, monkeypatch, True, numerics="llama.cpp", flash_attn=True)
    assert _same(_greedy(ctx, prompt, 6), ref)
    assert _state(ctx) == "replayed"


@pytest.mark.parametrize("arch", ARCHS)
def test_every_arch_same_logits(arch, tiny_model_path, monkeypatch):
    """Replayed or left to the forward, the logits are the forward's; the common decoder stacks
    are replayed."""
    model = pyllama.load_model(tiny_model_path(arch))
    prompt = [int(t) for t in tokens(5, seed=1, n_vocab=model.n_vocab)]
    for numerics in ("invariant", "llama.cpp"):
        ref = _greedy(_ctx(model, monkeypatch, False, numerics=numerics), prompt, 7)
        ctx = _ctx(model, monkeypatch, True, numerics=numerics)
        assert _same(_greedy(ctx, prompt, 7), ref), (arch, numerics)
        if arch in ("llama", "qwen2", "qwen3", "gemma3", "gemma2"):
            assert _state(ctx) == "replayed", (arch, numerics)


def test_sequences_rollback_and_swa(tiny_model_path, monkeypatch):
    """Two sequences decoded in turn, a rollback (seq_rm) and a run past the 16-token sliding
    window of the tiny Gemma 3: every step equals the forward's."""
    model = pyllama.load_model(tiny_model_path("gemma3"))

    def script(ctx):
        out = []
        out += _greedy(ctx, [5, 6, 7], 4, seq=0)
        out += _greedy(ctx, [9, 10], 4, seq=1)
        for i in range(30):                   # alternate, past the window
            out.append(_one(ctx, 20 + i % 7, 7 + i, seq=0))
            out.append(_one(ctx, 30 + i % 5, 6 + i, seq=1))
        ctx.memory.seq_rm(0, 30, -1)
        out += [_one(ctx, 11 + i, 30 + i, seq=0) for i in range(5)]
        return out
    ref = script(_ctx(model, monkeypatch, False, n_seq_max=2))
    ctx = _ctx(model, monkeypatch, True, n_seq_max=2)
    assert _same(script(ctx), ref)
    assert _state(ctx) == "replayed"


def test_several_sequences_per_step(tiny_model_path, monkeypatch):
    """Decode steps of 3 sequences at once (the server's continuous batching) and of 2 after
    one finishes: replayed per shape, the forward's bits."""
    model = pyllama.load_model(tiny_model_path("qwen2"))

    def script(ctx):
        out = []
        for s in range(3):
            _greedy(ctx, [5 + s, 6, 7 + s], 0, seq=s)
        toks, pos = [10, 11, 12], [3, 3, 3]
        for i in range(8):
            n = 3 if i < 5 else 2
            assert ctx.decode(Batch(np.asarray(toks[:n], np.int32), pos=np.asarray(pos[:n], np.int32),
                                    seq_ids=list(range(n)), logits=np.ones(n, bool))) == 0
            lg = [ctx.get_logits_ith(j).copy() for j in range(n)]
            out += lg
            toks = [int(np.argmax(x)) for x in lg] + toks[n:]
            pos = [p + 1 for p in pos[:n]] + pos[n:]
        return out
    ref = script(_ctx(model, monkeypatch, False, n_seq_max=3))
    ctx = _ctx(model, monkeypatch, True, n_seq_max=3)
    assert _same(script(ctx), ref)
    st = ctx._replay._state
    assert st[(3, 3)][0] == "plan" and st[(3, 3)][2]      # 5 steps: replayed
    assert (2, 2) in st


def test_replaced_kv_buffer_turns_replay_off(tiny_model_path, monkeypatch):
    """A plan refers to the KV buffers it was recorded with: when the memory's buffer objects
    change, the forward runs again (same logits)."""
    model = pyllama.load_model(tiny_model_path("llama"))
    ref_ctx, ctx = (_ctx(model, monkeypatch, False), _ctx(model, monkeypatch, True))
    ref, out = _greedy(ref_ctx, [5, 6], 6), _greedy(ctx, [5, 6], 6)
    assert _state(ctx) == "replayed"
    ctx.memory.k[0] = ctx.memory.k[0].copy()          # same contents, another object
    ref += [_one(ref_ctx, 9, 8 + i) for i in range(3)]
    out += [_one(ctx, 9, 8 + i) for i in range(3)]
    assert _same(out, ref)
    assert _state(ctx) == "off"


def test_not_replayed_for_embeddings(tiny_model_path, monkeypatch):
    model = pyllama.load_model(tiny_model_path("llama"))
    ctx = _ctx(model, monkeypatch, True, embeddings=True, pooling="none")
    for i in range(5):
        assert ctx.decode(Batch(np.asarray([7 + i], np.int32), pos=np.asarray([i], np.int32),
                                seq_ids=[0], logits=np.ones(1, bool))) == 0
        assert ctx.get_embeddings_ith(-1).shape == (ctx.hp.n_embd,)
    assert _state(ctx) is None                 # embeddings: always the forward


def test_unreplayable_forward_falls_back():
    """A forward that hands the backend an array it computed itself (not a backend result, not a
    ubatch input) cannot be replayed: the replay turns itself off and the forward runs."""
    class Be:
        def twice(self, x):
            return x * 2

    class Mem:
        def apply_ubatch(self, ub):
            pass

    class G:
        def __init__(self, be, ub):
            self.be, self._ubatch, self.pos, self.tokens, self.out_idx = be, ub, ub.pos, ub.tokens, 0
            self._views = {}

    def forward(g):
        return g.be.twice(np.asarray(g._ubatch.tokens, np.float32) + 1), g   # numpy in between

    class UB:
        def __init__(self, t):
            self.tokens, self.pos = np.array([t], np.int32), np.array([t], np.int32)

    r = DecodeReplay(Be(), Mem(), forward, n_layer=0)
    for t in range(4):
        out = r.run(KEY, lambda be, t=t: G(be, UB(t)), UB(t))
        assert out.tolist() == [2.0 * (t + 1)]
    assert r._state[KEY] == ("off",)
    assert not r.ready(KEY)
