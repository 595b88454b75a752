"""Rank pooling and /rerank against llama.cpp 0c1e570 on a random-weight qwen3 reranker with a
cls.output head (tests/data/rerank-qwen3.gguf and rerank-llamacpp.json, written and scored by
tests/make_rerank_fixture.py): the scores, format_prompt_rerank's tokens, the Jina and TEI
response shapes, top_n and the request errors."""
import json
import os

import httpx
import numpy as np
import pytest

from server_proc import ServerProc

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")
MODEL = os.path.join(DATA, "rerank-qwen3.gguf")
FX = json.load(open(os.path.join(DATA, "rerank-llamacpp.json")))


def test_rank_pooling_equals_llama_cpp():
    import pyllama
    m = pyllama.load_model(MODEL)
    ctx = pyllama.Context(m, n_ctx=256, embeddings=True, numerics="llama.cpp")
    assert ctx.pooling == "rank"                      # the model's pooling_type
    for toks, want in zip(FX["prompts"], FX["scores"]):
        ctx.memory.clear()
        ctx.decode(pyllama.Batch(toks, pos=np.arange(len(toks)), seq_ids=[0] * len(toks)))
        np.testing.assert_allclose(ctx.get_embeddings_seq(0), want, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def rerank_server():
    s = ServerProc(["-m", MODEL, "-c", "256", "-np", "1", "-t", "1", "--rerank",
                    "--numerics", "llama.cpp", "-fa", "off"]).wait_ready()
    yield s
    assert s.stop() == 0, s.output()


def test_rerank_jina_and_tei(rerank_server):
    url = rerank_server.url
    r = httpx.post(url + "/v1/rerank", json={"query": FX["query"], "documents": FX["documents"],
                                             "model": "rr"}, timeout=60).json()
    want = sorted(((i, s[0]) for i, s in enumerate(FX["scores"])), key=lambda x: -x[1])
    assert r["model"] == "rr" and r["object"] == "list"
    n = sum(len(p) for p in FX["prompts"])
    assert r["usage"] == {"prompt_tokens": n, "total_tokens": n}
    assert [x["index"] for x in r["results"]] == [i for i, _ in want]
    for x, (_, s) in zip(r["results"], want):
        assert set(x) == {"index", "relevance_score"}
        assert x["relevance_score"] == pytest.approx(s, rel=1e-5)
    top = httpx.post(url + "/rerank", json={"query": FX["query"], "documents": FX["documents"],
                                            "top_n": 2}).json()["results"]
    assert [x["index"] for x in top] == [i for i, _ in want[:2]]
    tei = httpx.post(url + "/reranking", json={"query": FX["query"], "texts": FX["documents"],
                                               "return_text": True}).json()
    assert isinstance(tei, list) and tei[0]["text"] == FX["documents"][tei[0]["index"]]
    assert set(tei[0]) == {"index", "score", "text"}


@pytest.mark.parametrize("body,message", [
    ({"documents": ["a"]}, "\"query\" must be provided"),
    ({"query": 1, "documents": ["a"]}, "\"query\" must be a string"),
    ({"query": "q", "documents": []}, "\"documents\" must be a non-empty string array"),
    ({"query": "q", "documents": [1, 2]}, "\"documents\" must be a non-empty string array"),
])
def test_rerank_bad_input(rerank_server, body, message):
    r = httpx.post(rerank_server.url + "/v1/rerank", json=body)
    assert r.status_code == 400 and r.json()["error"]["message"] == message

