"""pytest-benchmark: the grammar-constrained sampler on the real vocabularies (Qwen 151936,
Gemma 262144 tokens): the sample-first check of one token, a sample whose token the grammar
rejects (mask from the cache, resample), and a cold full-vocabulary mask (the Cython trie walk
with its transition tables empty). Reports times, asserts nothing about them.

    PYTHONPATH=. python -m pytest bench/test_bench_grammar.py --benchmark-only
"""
import json
import os

import numpy as np
import pytest

from pyllama.gguf import GGUFReader
from pyllama.grammar.filter import TokenFilter, VocabIndex
from pyllama.grammar.sampler import GrammarSampler
from pyllama.models import resolve
from pyllama.sampling import SamplerChain, SamplerParams
from pyllama.vocab import Vocab

JSON_GBNF = json.load(open(os.path.join(os.path.dirname(__file__), "..", "tests", "data",
                                        "grammar", "llamacpp-cases.json")))["grammars"]["json.gbnf"]


@pytest.fixture(scope="module", params=["qwen2.5-coder-0.5b", "gemma-3-270m"])
def vocab(request):
    try:
        v = Vocab.from_gguf(GGUFReader(resolve(request.param, progress=False)))
    except Exception as e:  # noqa: BLE001 - bundled model missing
        pytest.skip(str(e))
    VocabIndex.of(v)
    return v


def _in_string(v):
    """A json.gbnf sampler inside a string value: most tokens are allowed."""
    gs = GrammarSampler(JSON_GBNF, v)
    for text in ('{"', "a"):
        gs.accept(v.tokenize(text, False, False)[0])
    return gs


def test_sample_first_allowed(benchmark, vocab):
    chain = SamplerChain(SamplerParams(temp=0.0, grammar=JSON_GBNF), vocab.n_vocab,
                         eog_ids=tuple(vocab.eog_ids), vocab=vocab)
    chain.grammar = _in_string(vocab)
    x = (np.random.default_rng(0).standard_normal(vocab.n_vocab) * 3).astype(np.float32)
    x[vocab.tokenize("b", False, False)[0]] = 50.0      # the best token is allowed
    benchmark(chain.sample, x)


def test_sample_rejected_then_resampled(benchmark, vocab):
    chain = SamplerChain(SamplerParams(temp=0.0, grammar=JSON_GBNF), vocab.n_vocab,
                         eog_ids=tuple(vocab.eog_ids), vocab=vocab)
    x = (np.random.default_rng(0).standard_normal(vocab.n_vocab) * 3).astype(np.float32)
    x[vocab.tokenize("hello", False, False)[0]] = 50.0  # rejected at the start of a document
    benchmark(chain.sample, x)


def test_cold_mask(benchmark, vocab):
    gs = _in_string(vocab)
    ix = VocabIndex.of(vocab)

    def cold():
        f = TokenFilter(gs.filter.c, ix)
        return f.mask(f.start_state(gs.stacks, (0, 0)))

    benchmark.pedantic(cold, rounds=3, iterations=1)
