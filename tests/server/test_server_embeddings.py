"""/embedding, /embeddings, /v1/embeddings (and the official openai client) on the bundled Qwen,
against llama.cpp 0c1e570's embeddings (tests/data/embeddings-llamacpp.npz, recorded by
tests/make_embedding_fixture.py) and llama.cpp's request handling (handle_embeddings_impl)."""
import base64
import json
import os

import httpx
import numpy as np
import pytest

from server_proc import ServerProc

from pyllama.embedding import normalize

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                    "embeddings-llamacpp.npz")
NAME = "qwen2.5-coder-0.5b"
pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def fixture():
    z = np.load(DATA)
    return z, json.loads(bytes(z["meta"]).decode())


def _server(qwen_path, pooling):
    return ServerProc(["-m", qwen_path, "-c", "1024", "-np", "2", "--embeddings", "--pooling",
                       pooling, "--numerics", "llama.cpp", "-fa", "off", "-t", "2", "--no-warmup"]
                      ).wait_ready()


@pytest.fixture(scope="module")
def mean_server(qwen_path):
    s = _server(qwen_path, "mean")
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def none_server(qwen_path):
    s = _server(qwen_path, "none")
    yield s
    assert s.stop() == 0, s.output()


def _close(got, want):
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == want.shape
    assert np.max(np.abs(got - want)) <= 1e-5 * np.max(np.abs(want))


def test_oai_embeddings_equal_llama_cpp(mean_server, fixture):
    z, meta = fixture
    r = httpx.post(mean_server.url + "/v1/embeddings", json={"input": meta["prompts"]},
                   timeout=60)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list" and body["model"] == "qwen2.5-coder-0.5b-instruct.gguf"
    n = sum(len(meta["tokens"][f"{NAME}/{k}"]) for k in range(len(meta["prompts"])))
    assert body["usage"] == {"prompt_tokens": n, "total_tokens": n}
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    for k, d in enumerate(body["data"]):
        assert d["object"] == "embedding" and set(d) == {"embedding", "index", "object"}
        _close(d["embedding"], normalize(z[f"{NAME}/mean/{k}"], 2))


def test_token_ids_base64_normalize_and_model(mean_server, fixture):
    z, meta = fixture
    toks = meta["tokens"][f"{NAME}/0"]
    r = httpx.post(mean_server.url + "/v1/embeddings", timeout=60, json={
        "input": toks, "encoding_format": "base64", "model": "my-model", "embd_normalize": -1})
    body = r.json()
    assert body["model"] == "my-model" and len(body["data"]) == 1
    d = body["data"][0]
    assert d["encoding_format"] == "base64"
    _close(np.frombuffer(base64.b64decode(d["embedding"]), "<f4"), z[f"{NAME}/mean/0"])
    # non-OAI: a list of {index, embedding: [vector]}; "content" is the non-OAI field
    r = httpx.post(mean_server.url + "/embeddings", json={"content": [toks, toks]}, timeout=60)
    out = r.json()
    assert [e["index"] for e in out] == [0, 1] and len(out[1]["embedding"]) == 1
    _close(out[1]["embedding"][0], normalize(z[f"{NAME}/mean/0"], 2))


def test_openai_client_embeddings(mean_server, fixture):
    openai = pytest.importorskip("openai")
    z, meta = fixture
    c = openai.OpenAI(base_url=mean_server.url + "/v1", api_key="none")
    res = c.embeddings.create(model="x", input=meta["prompts"][1])
    _close(res.data[0].embedding, normalize(z[f"{NAME}/mean/1"], 2))
    assert res.usage.prompt_tokens == len(meta["tokens"][f"{NAME}/1"])
    # the client asks for base64 by default when numpy is present and decodes it itself
    res = c.embeddings.create(model="x", input=[meta["prompts"][2]], encoding_format="base64")
    assert isinstance(res.data[0].embedding, (str, list))


def test_pooling_none_token_embeddings(none_server, fixture):
    z, meta = fixture
    r = httpx.post(none_server.url + "/embedding", json={"content": meta["prompts"][0]},
                   timeout=60)
    out = r.json()
    assert len(out) == 1 and out[0]["index"] == 0
    _close(out[0]["embedding"], z[f"{NAME}/none/0"])     # per token, unnormalised
    r = httpx.post(none_server.url + "/v1/embeddings", json={"input": "x"}, timeout=60)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == ("Pooling type 'none' is not OAI compatible. Please "
                                           "use a different pooling type")


@pytest.mark.parametrize("body,code,message", [
    ({}, 400, "\"input\" or \"content\" must be provided"),
    ({"input": ""}, 400, "Input content cannot be empty"),
    ({"input": []}, 400, "\"input\" must not be empty"),
    ({"input": ["a", ""]}, 400, "Input content cannot be empty"),
    ({"input": "a", "encoding_format": "hex"}, 400,
     "The format to return the embeddings in. Can be either float or base64"),
    ({"input": [1, 10**9]}, 400, "Prompt contains invalid tokens"),
    ({"input": {"x": 1}}, 500, "\"prompt\" elements must be a string, a list of tokens, a JSON "
     "object containing a prompt string, or a list of mixed strings & tokens."),
    ({"input": "a", "encoding_format": 3}, 500,
     "[json.exception.type_error.302] type must be string, but is number"),
    ({"input": [5] * 600}, 500, "input (600 tokens) is too large to process. increase the "
     "physical batch size (current batch size: 512)"),
])
def test_bad_input(mean_server, body, code, message):
    r = httpx.post(mean_server.url + "/v1/embeddings", json=body, timeout=60)
    assert r.status_code == code
    err = r.json()["error"]
    assert err["message"] == message and err["code"] == code
    assert err["type"] == ("invalid_request_error" if code == 400 else "server_error")
    assert httpx.get(mean_server.url + "/health").status_code == 200


def test_disabled_without_flag(server):
    """The tiny server of conftest has no --embeddings: llama.cpp's 501."""
    for path in ("/embedding", "/embeddings", "/v1/embeddings"):
        r = httpx.post(server.url + path, json={"input": "x"})
        assert r.status_code == 501
        assert r.json()["error"] == {
            "code": 501, "type": "not_supported_error",
            "message": "This server does not support embeddings. Start it with `--embeddings`"}
    r = httpx.post(server.url + "/rerank", json={"query": "x", "documents": ["y"]})
    assert r.status_code == 501


def test_content_part_entries(mean_server):
    """An entry {"content": [{"type": "text", ...}, ...]} is its concatenated text
    (tokenize_oai_content_array); media parts need a projector (500), other shapes are 400."""
    url = mean_server.url + "/v1/embeddings"
    r = httpx.post(url, timeout=60, json={"input": ["hello world", {"content": [
        {"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]}]})
    d = r.json()["data"]
    assert d[0]["embedding"] == d[1]["embedding"]
    for entry, code, msg in [
            ({"content": "string"}, 400, "\"content\" must be an array"),
            ({"content": [{"type": "unknown"}]}, 400, "unsupported content[].type"),
            ({"content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}, 500,
             "image input is not supported - hint: if this is unexpected, you may need to "
             "provide the mmproj")]:
        r = httpx.post(url, json={"input": [entry]}, timeout=60)
        assert (r.status_code, r.json()["error"]["message"]) == (code, msg)
