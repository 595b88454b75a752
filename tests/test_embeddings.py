"""Context(embeddings=True, pooling=...) against llama.cpp 0c1e570's own embeddings of the bundled
models (tests/data/embeddings-llamacpp.npz, recorded by tests/make_embedding_fixture.py), and
pyllama.embedding against common_embd_normalize / common_embd_similarity_cos."""
import json
import os

import numpy as np
import pytest

import pyllama
from pyllama.errors import ContextError

DATA = os.path.join(os.path.dirname(__file__), "data", "embeddings-llamacpp.npz")


@pytest.fixture(scope="module")
def fixture():
    z = np.load(DATA)
    return z, json.loads(bytes(z["meta"]).decode())


def _embed(model, toks, pooling, numerics="llama.cpp"):
    ctx = pyllama.Context(model, n_ctx=512, n_batch=512, n_ubatch=512, embeddings=True,
                          pooling=pooling, numerics=numerics)
    assert ctx.decode(pyllama.Batch(toks, pos=np.arange(len(toks)), seq_ids=[0] * len(toks))) == 0
    if pooling == "none":
        return ctx.get_embeddings()[:len(toks)].copy()
    return ctx.get_embeddings_seq(0).copy()


@pytest.mark.realmodel
@pytest.mark.parametrize("name,fx", [("qwen2.5-coder-0.5b", "qwen_path"),
                                     ("gemma-3-270m", "gemma_path")])
def test_embeddings_equal_llama_cpp(name, fx, request, fixture):
    z, meta = fixture
    model = pyllama.load_model(request.getfixturevalue(fx))
    for k, text in enumerate(meta["prompts"]):
        toks = model.tokenize(text, add_special=True, parse_special=True)
        assert toks == meta["tokens"][f"{name}/{k}"]
        for pool in ("none", "mean", "cls", "last"):
            want = z[f"{name}/{pool}/{k}"]
            got = _embed(model, toks, pool)
            assert got.shape == want.shape
            rel = np.max(np.abs(got - want)) / np.max(np.abs(want))
            assert rel <= 1e-5, (name, pool, k, rel)


def test_pooling_semantics(tiny_model_path):
    """mean = average of the token rows, cls = first, last = last, per sequence of one batch."""
    model = pyllama.load_model(tiny_model_path("llama"))
    ctx = pyllama.Context(model, n_ctx=128, n_seq_max=2, kv_unified=True, embeddings=True,
                          pooling="none")
    toks = [5, 6, 7, 8, 9, 10, 11]
    seqs = [0, 0, 0, 1, 1, 1, 1]
    pos = [0, 1, 2, 0, 1, 2, 3]
    ctx.decode(pyllama.Batch(toks, pos=pos, seq_ids=seqs))
    rows = ctx.get_embeddings().copy()
    assert rows.shape == (7, model.hparams.n_embd)
    np.testing.assert_array_equal(ctx.get_embeddings_ith(-1), rows[6])
    assert ctx.get_embeddings_seq(0) is None          # llama.h: NULL with pooling none
    with pytest.raises(ContextError):
        ctx.get_logits()                              # an embeddings decode has no logits
    for pool, want0, want1 in (("mean", rows[:3].mean(0), rows[3:].mean(0)),
                               ("cls", rows[0], rows[3]), ("last", rows[2], rows[6])):
        c = pyllama.Context(model, n_ctx=128, n_seq_max=2, kv_unified=True, embeddings=True,
                            pooling=pool)
        c.decode(pyllama.Batch(toks, pos=pos, seq_ids=seqs))
        np.testing.assert_allclose(c.get_embeddings_seq(0), want0, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(c.get_embeddings_seq(1), want1, rtol=1e-5, atol=1e-6)
        with pytest.raises(ContextError):
            c.get_embeddings_ith(0)
    c.set_embeddings(False)
    c.memory.clear()
    c.decode(pyllama.Batch(toks[:3], pos=pos[:3], seq_ids=seqs[:3]))
    assert c.get_logits().shape == (1, model.n_vocab)


def test_bad_pooling(tiny_model_path):
    model = pyllama.load_model(tiny_model_path("llama"))
    with pytest.raises(ContextError, match="unknown pooling"):
        pyllama.Context(model, n_ctx=64, embeddings=True, pooling="max")



def test_rank_without_a_head_is_the_pooled_state(tiny_model_path):
    """llama.cpp's build_pooling on a model without cls / cls_out: rank pooling is the row
    llm_graph_input_cls picks (the last token of a causal model), unprojected."""
    model = pyllama.load_model(tiny_model_path("llama"))
    toks = np.array([5, 9, 17, 3], np.int32)
    out = {}
    for pooling in ("rank", "last"):
        c = pyllama.Context(model, n_ctx=64, embeddings=True, pooling=pooling)
        c.decode(pyllama.Batch(toks, pos=np.arange(4, dtype=np.int32),
                               seq_ids=np.zeros(4, np.int32)))
        out[pooling] = np.array(c.get_embeddings_seq(0))
    np.testing.assert_array_equal(out["rank"], out["last"])


def test_normalize_rules():
    from pyllama.embedding import normalize, similarity_cos
    v = np.array([3.0, -4.0, 0.5], np.float32)
    np.testing.assert_array_equal(normalize(v, -1), v)
    e = normalize(v, 2)
    np.testing.assert_allclose(e, v / np.float32(np.sqrt(25.25)), rtol=1e-7)
    np.testing.assert_allclose(normalize(v, 1), v / np.float32(7.5), rtol=1e-7)
    np.testing.assert_allclose(normalize(v, 0), v * np.float32(32760.0 / 4.0), rtol=1e-7)
    np.testing.assert_allclose(normalize(v, 3), v / np.float32((27 + 64 + 0.125) ** (1 / 3)),
                               rtol=1e-6)
    np.testing.assert_array_equal(normalize(np.zeros(3, np.float32), 2), np.zeros(3))
    assert similarity_cos(v, v) == pytest.approx(1.0)
    assert similarity_cos(np.zeros(3), np.zeros(3)) == 1.0
    assert similarity_cos(v, np.zeros(3)) == 0.0
