"""Token equality with llama.cpp under a grammar (numerics="llama.cpp"), greedy and seeded, on
both bundled models: the tokens recorded by make_llamacpp_tokens.py with llama.cpp 0c1e570's
common_sampler order (sample first, the grammar only on rejection)."""
import json
import os

import pytest

import pyllama
from pyllama.generate import generate
from pyllama.sampling import SamplerChain, SamplerParams

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]
DATA = os.path.join(os.path.dirname(__file__), "..", "data", "grammar", "llamacpp-tokens.json")
REC = json.load(open(DATA)) if os.path.exists(DATA) else {"cases": [], "grammars": {}}
_MODELS = {}


def _model(alias):
    if alias not in _MODELS:
        from pyllama.models import resolve
        try:
            _MODELS[alias] = pyllama.load_model(resolve(alias, progress=False))
        except pyllama.PyllamaError as e:
            pytest.skip(f"bundled model {alias} unavailable: {e}")
    return _MODELS[alias]


@pytest.mark.parametrize("case", REC["cases"],
                         ids=[f'{c["model"]}-{c["grammar"]}-{c["mode"]}' for c in REC["cases"]])
def test_tokens_equal_llamacpp(case):
    model = _model(case["model"])
    assert model.tokenize(case["prompt"], True, False) == case["prompt_ids"]
    # llama.cpp's default context: -fa auto, which is flash attention on the CPU
    ctx = pyllama.Context(model, n_ctx=512, n_batch=512, n_ubatch=512, numerics="llama.cpp",
                          flash_attn=True)
    p = SamplerParams(temp=case["temp"], seed=case["seed"],
                      grammar=REC["grammars"][case["grammar"]])
    sampler = SamplerChain(p, model.n_vocab, eog_ids=tuple(model.vocab.eog_ids),
                           vocab=model.vocab)
    got = list(generate(ctx, case["prompt_ids"], sampler, n_predict=REC["n_predict"]))
    assert got == case["tokens"]
