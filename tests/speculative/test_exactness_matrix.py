"""Issue 18's exactness matrix: greedy speculation with every model-free drafter as the tools build
it (`--spec-type <drafter>` / `--spec-default`, llama.cpp's default settings where they draft on a
short run, small ones where they would not) x the cost-aware policy on and off x both numerics
modes (llama.cpp: one-row verification) x generation past the SWA cache without swa_full x one or
two sequences in one unified cache equals plain greedy decoding of the same setup, token for token
and logit for logit, on a tiny Gemma 3 (n_swa 16: a 256-cell SWA ring, 40 prompt + 300 generated
tokens wrap it). The tiny model's greedy output soon repeats itself, so every honest draft would be
accepted: each drafter runs behind a wrapper that alters the last token of every third draft
of two or more tokens, so that rounds are also rejected and rolled back. Each case checks that
drafts were accepted and some rejected. ngram-cache drafts from a dynamic lookup cache of an
earlier generation (as llama-lookup -lcd saves it): its context cache alone proposes nothing on
the short prompt."""
import numpy as np
import pytest

import pyllama
from pyllama.generate import decode_tokens, generate
from pyllama.sampling import SamplerParams
from pyllama.speculative import SpecParams, SpecStats, drafter_chain, speculative_generate, \
    with_policy
from recording_chain import Recording

N_PREDICT = 300

# (--spec-type values, settings): the n-gram sizes of the tools' defaults where a 340-token run
# drafts with them; ngram-mod's --spec-default (n_min 48) never drafts on it, so smaller ones
DRAFTERS = {
    "ngram-simple": (["ngram-simple"], {}),
    "ngram-map-k": (["ngram-map-k"], dict(ngram_map_k_size_n=2, ngram_map_k_size_m=8)),
    "ngram-map-k4v": (["ngram-map-k4v"], dict(ngram_map_k4v_size_n=2, ngram_map_k4v_size_m=4)),
    "ngram-mod": (["ngram-mod"], dict(ngram_mod_n_match=3, ngram_mod_n_min=1, ngram_mod_n_max=8)),
    "ngram-cache": (["ngram-cache"], {}),
    "combined": (["ngram-simple", "ngram-map-k4v", "ngram-mod"],
                 dict(ngram_simple_size_n=3, ngram_simple_size_m=6, ngram_map_k4v_size_n=2,
                      ngram_map_k4v_size_m=4, ngram_mod_n_match=2, ngram_mod_n_min=1,
                      ngram_mod_n_max=8)),
}


class Spoiled:
    """A drafter whose every third draft of >= 2 tokens has its last token changed."""

    def __init__(self, inner):
        self.inner, self.name, self.n = inner, inner.name, 0

    def begin(self, tokens):
        self.inner.begin(tokens)

    def rollback(self, n_keep):
        self.inner.rollback(n_keep)

    def accept(self, n_accepted, n_drafted=None):
        self.inner.accept(n_accepted, n_drafted)

    def draft(self, history, n_max):
        out = list(self.inner.draft(history, n_max))
        if len(out) >= 2:
            self.n += 1
            if self.n % 3 == 0:
                out[-1] = (out[-1] + 1) % 270
        return out


@pytest.fixture(scope="module")
def target(tiny_model_path):
    return pyllama.load_model(tiny_model_path("gemma3", embd_std=0.25))


def _prompt():
    return [int(t) for t in np.random.default_rng(0).integers(0, 270, 20)] * 2


def _ctx(model, numerics, n_seq):
    ctx = pyllama.Context(model, n_ctx=1024 * n_seq, n_ubatch=64, n_seq_max=n_seq,
                          kv_unified=n_seq > 1, numerics=numerics)
    assert ctx.memory.swa.n_cells < len(_prompt()) + N_PREDICT
    if n_seq > 1:     # another slot's prompt shares the cache
        decode_tokens(ctx, [int(t) for t in np.random.default_rng(1).integers(0, 270, 100)],
                      seq_id=1)
    return ctx


_PLAIN: dict = {}


def _plain(model, numerics, n_seq):
    key = (numerics, n_seq)
    if key not in _PLAIN:
        s = Recording(SamplerParams(temp=0.0), model.n_vocab, eog_ids=())
        toks = list(generate(_ctx(model, numerics, n_seq), _prompt(), s, n_predict=N_PREDICT,
                             stop_tokens=()))
        _PLAIN[key] = (toks, s.rows)
    return _PLAIN[key]


@pytest.mark.parametrize("n_seq", [1, 2])
@pytest.mark.parametrize("numerics", ["invariant", "llama.cpp"])
@pytest.mark.parametrize("policy", ["fixed", "cost"])
@pytest.mark.parametrize("drafter", list(DRAFTERS))
def test_speculative_equals_plain(target, drafter, policy, numerics, n_seq):
    types, settings = DRAFTERS[drafter]
    ref_toks, ref_rows = _plain(target, numerics, n_seq)
    lookup = ({}, {})
    if drafter == "ngram-cache":
        from pyllama.speculative.ngram_cache import cache_update
        corpus = _prompt() + ref_toks
        cache_update(lookup[1], 1, 4, corpus, len(corpus))
    d, n_max = drafter_chain(types, settings, lookup=lookup)
    if policy == "cost":
        d = with_policy(d)
    d = Spoiled(d)
    ctx = _ctx(target, numerics, n_seq)
    s = Recording(SamplerParams(temp=0.0), target.n_vocab, eog_ids=())
    st = SpecStats()
    toks = list(speculative_generate(ctx, s, _prompt(), d, SpecParams(n_max=n_max),
                                     n_predict=N_PREDICT, stop_tokens=(), stats=st))
    assert toks == ref_toks
    assert 0 < st.n_accept < st.n_drafted           # accepted and rejected drafts
    assert ctx.memory.seq_pos_min(0) > 0            # the SWA ring wrapped
    # every row plain decoding sampled from appears, in order, among the verified rows
    got = iter(s.rows)
    for r in ref_rows:
        assert any(np.array_equal(r, g) for g in got)
