"""/infill on the bundled Qwen2.5-Coder against llama.cpp 0c1e570 (tests/data/infill-llamacpp.json,
recorded by tests/make_infill_fixture.py): format_prompt_infill's tokens and the greedy
continuation; llama.cpp's request errors."""
import json
import os
from types import SimpleNamespace

import httpx
import pytest

from server_proc import ServerProc

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "infill-llamacpp.json")
CASES = json.load(open(DATA))
pytestmark = pytest.mark.realmodel


@pytest.fixture(scope="module")
def qwen_vocab_server(qwen_path):
    """Just enough of app.Server for format_infill: the tokenizer and the vocabulary."""
    import pyllama
    from pyllama.server.app import Server
    m = pyllama.load_model(qwen_path, vocab_only=True)
    s = Server.__new__(Server)
    s.engine = SimpleNamespace(vocab=m.vocab, model=m)
    return s


@pytest.mark.parametrize("case", range(len(CASES)))
def test_prompt_tokens_equal_llama_cpp(qwen_vocab_server, case):
    from pyllama.server.infill import format_infill
    c = CASES[case]
    prompt = qwen_vocab_server.tokenize(c["prompt"], False, True)
    got = format_infill(qwen_vocab_server, c["input_prefix"], c["input_suffix"], c["input_extra"],
                        c["n_batch"], c["n_predict"], c["n_ctx"], c["spm"], prompt)
    assert got == c["prompt_tokens"]


def _server(qwen_path, *extra):
    return ServerProc(["-m", qwen_path, "-c", "2048", "-np", "1", "--numerics", "llama.cpp",
                       "-fa", "off", "-t", "2", "--no-warmup", *extra]).wait_ready()


def _infill(url, c, **kw):
    body = {k: c[k] for k in ("input_prefix", "input_suffix", "input_extra", "prompt")}
    return httpx.post(url + "/infill", json={**body, "n_predict": len(c["completion_tokens"]),
                                             "temperature": 0, "return_tokens": True, **kw},
                      timeout=120)


@pytest.fixture(scope="module")
def psm_server(qwen_path):
    s = _server(qwen_path)
    yield s
    assert s.stop() == 0, s.output()


def test_greedy_completion_equals_llama_cpp(psm_server):
    c = CASES[0]
    r = _infill(psm_server.url, c)
    assert r.status_code == 200
    out = r.json()
    assert out["tokens"] == c["completion_tokens"]
    assert out["tokens_evaluated"] == len(c["prompt_tokens"])
    assert out["stop"] is True and out["stop_type"] == "limit"
    assert out["content"] == "if n <= 1:\n        return n\n    else:\n        return fibonacci"


def test_streaming_infill(psm_server):
    c = CASES[0]
    body = {k: c[k] for k in ("input_prefix", "input_suffix", "input_extra", "prompt")}
    with httpx.stream("POST", psm_server.url + "/infill", timeout=120,
                      json={**body, "n_predict": 8, "temperature": 0, "stream": True}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1]["stop"] is True
    text = "".join(e["content"] for e in events)
    assert text == "if n <= 1:\n        return"


def test_spm_infill_equals_llama_cpp(qwen_path):
    c = CASES[2]
    s = _server(qwen_path, "--spm-infill")
    try:
        out = _infill(s.url, c).json()
        assert out["tokens"] == c["completion_tokens"]
        assert out["tokens_evaluated"] == len(c["prompt_tokens"])
    finally:
        assert s.stop() == 0


@pytest.mark.parametrize("body,code,message", [
    ({}, 500, "[json.exception.out_of_range.403] key 'input_prefix' not found"),
    ({"input_prefix": "a"}, 500, "[json.exception.out_of_range.403] key 'input_suffix' not found"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": {}}, 400,
     "\"input_extra\" must be an array of {\"filename\": string, \"text\": string}"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"filename": "x"}]}, 400,
     "extra_context chunk must contain a \"text\" field with a string value"),
    ({"input_prefix": "a", "input_suffix": "b", "input_extra": [{"text": "t", "filename": 1}]},
     400, "extra_context chunk's \"filename\" field must be a string"),
    ({"input_prefix": 1, "input_suffix": "b"}, 500,
     "[json.exception.type_error.302] type must be string, but is number"),
])
def test_bad_input(psm_server, body, code, message):
    r = httpx.post(psm_server.url + "/infill", json=body, timeout=60)
    assert r.status_code == code
    assert r.json()["error"]["message"] == message
    assert httpx.get(psm_server.url + "/health").status_code == 200


def test_model_without_fim_tokens(server):
    """The tiny model has no FIM tokens: llama.cpp's 501."""
    r = httpx.post(server.url + "/infill", json={"input_prefix": "a", "input_suffix": "b"})
    assert r.status_code == 501
    assert r.json()["error"]["message"] == (
        "Infill is not supported by this model: prefix token is missing. suffix token is "
        "missing. middle token is missing. ")
