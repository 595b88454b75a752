"""Speculative decoding with a grammar: the grammar constrains verification (the target's
sampler, grammar included, samples every verified row), so the output equals plain decoding
with the same grammar and seed (tiny models: n-gram and draft-model drafters)."""
import json
import os

import pytest

import pyllama
from pyllama.generate import generate
from pyllama.grammar import Grammar
from pyllama.sampling import SamplerChain, SamplerParams
from pyllama.speculative import DraftModelDrafter, NgramDrafter, SpecParams, SpecStats
from pyllama.speculative.loop import speculative_generate

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "grammar", "llamacpp-cases.json")
JSON_GBNF = json.load(open(DATA, encoding="utf-8"))["grammars"]["json.gbnf"]
GRAMMARS = {"json": JSON_GBNF, "letters": 'root ::= ("ab" | [c-f]+ | " ")+ "."'}


@pytest.fixture(scope="module")
def target(tiny_model_path):
    return pyllama.load_model(tiny_model_path("gemma3", seed=1, embd_std=0.05))


def _sampler(model, grammar, temp, seed=7):
    p = SamplerParams(temp=temp, seed=seed, grammar=grammar)
    return SamplerChain(p, model.n_vocab, eog_ids=tuple(model.vocab.eog_ids), vocab=model.vocab)


def _ctx(model):
    return pyllama.Context(model, n_ctx=512, n_ubatch=64)


PROMPT = [10, 20, 30, 40, 10, 20, 30, 40, 50]


@pytest.mark.parametrize("gname", sorted(GRAMMARS))
@pytest.mark.parametrize("temp", [0.0, 0.9])
@pytest.mark.parametrize("drafter", ["ngram", "self"])
def test_speculative_with_grammar_equals_plain(target, gname, temp, drafter):
    n = 32
    g = GRAMMARS[gname]
    ref = list(generate(_ctx(target), PROMPT, _sampler(target, g, temp), n_predict=n))
    text = b"".join(target.vocab.token_to_piece(t, True) for t in ref
                    if t not in target.vocab.eog_ids).decode("utf-8", "replace")
    gram = Grammar.from_gbnf(g)
    if ref[-1] in target.vocab.eog_ids:
        assert gram.matches(text), text          # ended where the grammar may end
    d = NgramDrafter(size_n=4, size_m=16, min_n=1) if drafter == "ngram" else \
        DraftModelDrafter(_ctx(target))
    st = SpecStats()
    out = list(speculative_generate(_ctx(target), _sampler(target, g, temp), PROMPT, d,
                                    SpecParams(n_max=6), n_predict=n, stats=st))
    assert out == ref
    if drafter == "self":
        assert st.n_drafted > 0
