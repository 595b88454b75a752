"""pytest-benchmark: the tokenizer of each bundled model -- building it (Vocab.from_gguf on an
open reader; there is no tokenizer cache, every build starts from the GGUF arrays), tokenizing
and detokenizing 100 KB of mixed text (code, prose, many scripts). Reports times, asserts
nothing about them. The target is < 0.5 s each. On the shared 2-core box add
--benchmark-timer=time.process_time to see CPU time; bench/vocab_times.py prints the same
figures without pytest.

    PYTHONPATH=. python -m pytest bench/test_bench_vocab.py --benchmark-only \
        --benchmark-columns=min,median,rounds
"""
import json
import os

import pytest

from pyllama.errors import PyllamaError
from pyllama.gguf import GGUFReader
from pyllama.vocab import Vocab

MODELS = ["gemma-3-270m", "qwen2.5-coder-0.5b"]
DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "data")


def model_path(alias):
    from pyllama.models import resolve
    try:
        return resolve(alias, progress=False)
    except PyllamaError as e:
        pytest.skip(f"bundled model {alias} unavailable: {e}")


def text_100k() -> str:
    """The tokenizer reference corpus (edge cases, 20 scripts, code, licence text) repeated."""
    with open(os.path.join(DATA, "tokenize-gemma-3-270m.json"), encoding="utf-8") as f:
        corpus = "\n".join(c["text"] for c in json.load(f)["cases"])
    return (corpus * (100_000 // len(corpus) + 1))[:100_000]


@pytest.fixture(scope="module", params=MODELS)
def vocab_and_path(request):
    path = model_path(request.param)
    return Vocab.from_gguf(GGUFReader(path)), path


def test_build(benchmark, vocab_and_path):
    """Vocab.from_gguf on a freshly opened reader (opening the GGUF is bench_gguf's business)."""
    _, path = vocab_and_path
    v = benchmark.pedantic(Vocab.from_gguf, setup=lambda: ((GGUFReader(path),), {}), rounds=5,
                           iterations=1)
    assert v.n_vocab > 100_000


def test_tokenize_100kb(benchmark, vocab_and_path):
    vocab, _ = vocab_and_path
    text = text_100k()
    ids = benchmark.pedantic(vocab.tokenize, args=(text,), rounds=5, iterations=1)
    benchmark.extra_info["tokens"] = len(ids)


def test_detokenize_100kb(benchmark, vocab_and_path):
    vocab, _ = vocab_and_path
    text = text_100k()
    ids = vocab.tokenize(text, add_special=False)
    out = benchmark.pedantic(vocab.detokenize, args=(ids,), rounds=5, iterations=1)
    assert out == text
