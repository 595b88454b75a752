"""Fast checks of the headline claims in the default run, against figures llama.cpp 0c1e570
itself produced (tests/data/headline-fast-llamacpp.json, recorded by
tests/make_fast_headline_fixture.py): llama-perplexity's estimate of one 128-token chunk per
bundled model, with f16 and q8_0 K/V, digit for digit, and 16 greedy tokens with flash
attention. The long versions (-c 512 / 1024, 4 chunks) are the slow tests of
tests/tools/test_realmodel_tools.py."""
import json
import os
import subprocess
import sys

import pytest

import pyllama
from pyllama.generate import generate
from pyllama.sampling import SamplerChain, SamplerParams

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GPL3 = os.path.join(HERE, "data", "tools", "gpl3-head.txt")
pytestmark = pytest.mark.realmodel
MODELS = [("gemma_path", "gemma-3-270m"), ("qwen_path", "qwen2.5-coder-0.5b")]


def figures():
    with open(os.path.join(HERE, "data", "headline-fast-llamacpp.json"), encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("fixture,name", MODELS)
@pytest.mark.parametrize("kv", ["f16", "q8_0"])
def test_one_chunk_perplexity_is_llama_cpps(fixture, name, kv, request):
    path = request.getfixturevalue(fixture)
    flags = [] if kv == "f16" else ["-ctk", kv, "-ctv", kv]
    if kv != "f16" and name.startswith("qwen"):
        flags += ["--kv-k-center", "off"]       # llama.cpp's cache bytes
    r = subprocess.run([sys.executable, "-m", "pyllama", "perplexity", "-m", path, "-f", GPL3,
                        "-c", "128", "--chunks", "1", "-t", "2", *flags],
                       capture_output=True, text=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    want = figures()["perplexity_c128"][name][kv]
    assert f"Final estimate: PPL = {want}" in r.stderr, r.stderr[-600:]


@pytest.mark.parametrize("fixture,name", MODELS)
def test_flash_attention_greedy_is_llama_cpps(fixture, name, request):
    """numerics="llama.cpp" with flash attention, one token per decode after the prompt: the
    tokens llama.cpp computes with flash_attn_type enabled."""
    ref = figures()["greedy_fa"][name]
    with open(os.path.join(HERE, "data", f"logits-{name}.json"), encoding="utf-8") as f:
        case = next(c for c in json.load(f)["cases"] if c["id"] == ref["case"])
    model = pyllama.load_model(request.getfixturevalue(fixture))
    ctx = pyllama.Context(model, n_ctx=2048, numerics="llama.cpp", flash_attn=True,
                          n_threads=2)
    chain = SamplerChain(SamplerParams(temp=0.0), model.n_vocab)
    out = list(generate(ctx, case["ids"], chain, n_predict=len(ref["tokens"]),
                        stop_tokens=()))
    assert out == ref["tokens"]
