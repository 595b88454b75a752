"""Bad input gets llama.cpp's error JSON and status, and the server keeps serving after each."""
import json
import signal

import pytest

from server_proc import ServerProc

OK_BODY = {"prompt": "the cat", "n_predict": 2, "temperature": 0}


def check_error(r, code: int, type_: str, message: str | None = None):
    assert r.status_code == code, r.text
    err = r.json()["error"]
    assert err["code"] == code and err["type"] == type_
    if message is not None:
        assert err["message"] == message
    return err


def still_serving(client):
    r = client.post("/completion", json=OK_BODY)
    assert r.status_code == 200 and r.json()["tokens_predicted"] == 2


RAW_CASES = [
    # (path, raw body, code, type, message or None)
    ("/completion", b"{b", 500, "server_error", None),
    ("/completion", b'{"prompt": "a', 500, "server_error", None),
    ("/v1/chat/completions", b"[1, 2", 500, "server_error", None),
    ("/completion", b'{"prompt": "\xc3\x28 bad utf8", "n_predict": 1}', 500, "server_error", None),
    ("/tokenize", b'{"content": "\xff"}', 500, "server_error", None),
    ("/completion", b"", 500, "server_error", None),
]


@pytest.mark.parametrize("path,raw,code,type_,message", RAW_CASES)
def test_malformed_bodies(client, path, raw, code, type_, message):
    r = client.post(path, content=raw, headers={"Content-Type": "application/json"})
    check_error(r, code, type_, message)
    still_serving(client)


JSON_CASES = [
    ("/completion", {"n_predict": 1}, 400, "invalid_request_error",
     "[json.exception.out_of_range.403] key 'prompt' not found"),
    ("/completion", {"prompt": "x", "n_predict": -5}, 400, "invalid_request_error",
     "Field 'n_predict': Value must be between -1 <= value <= 2147483647, but got -5"),
    ("/completion", {"prompt": "x", "n_predict": 2**40}, 400, "invalid_request_error", None),
    ("/completion", {"prompt": "x", "n_predict": "abc"}, 400, "invalid_request_error",
     "Field 'n_predict': [json.exception.type_error.302] type must be number, but is string"),
    ("/completion", {"prompt": "x", "temperature": "hot"}, 400, "invalid_request_error", None),
    ("/completion", {"prompt": "x", "stop": 5}, 400, "invalid_request_error", None),
    ("/completion", {"prompt": "x", "n": 3}, 400, "invalid_request_error",
     "Field 'n': Value must be between 1 <= value <= 2, but got 3"),
    ("/completion", {"prompt": [1, 2, 10**6]}, 400, "invalid_request_error", None),
    ("/completion", {"prompt": ""}, 400, "invalid_request_error", None),
    ("/completion", {"prompt": "x", "id_slot": 7}, 400, "invalid_request_error", None),
    ("/completion", {"prompt": "x", "repeat_last_n": -2}, 400, "invalid_request_error", None),
    ("/completion", {"prompt": "x", "dry_sequence_breakers": []}, 400, "invalid_request_error",
     "Error: dry_sequence_breakers must be a non-empty array of strings"),
    ("/completion", {"prompt": "x", "grammar": "root ::= x"}, 400, "invalid_request_error",
     "Failed to parse grammar: Undefined rule identifier 'x' (line 1, column 10)"),
    ("/completion", {"prompt": "x", "json_schema": {"type": "frob"}}, 400,
     "invalid_request_error", "\"json_schema\": JSON schema conversion failed:\n"
     "JSON schema error at #: unrecognized type frob"),
    ("/v1/chat/completions", {"model": "m"}, 400, "invalid_request_error",
     "'messages' is required"),
    ("/v1/chat/completions", {"messages": "hi"}, 400, "invalid_request_error", None),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "response_format": {"type": "xml"}},
     400, "invalid_request_error",
     "response_format type must be one of \"text\" or \"json_object\", but got: xml"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:"}}]}]}, 500,
     "server_error", "image input is not supported - hint: if this is unexpected, you may need "
     "to provide the mmproj"),    # llama.cpp without --mmproj (tests/vocab/test_template_engine.py)
    ("/v1/embeddings", {"input": "x"}, 501, "not_supported_error",
     "This server does not support embeddings. Start it with `--embeddings`"),
    ("/embedding", {"content": "x"}, 501, "not_supported_error", None),
    ("/v1/rerank", {"query": "x", "documents": ["a"]}, 501, "not_supported_error", None),
    ("/infill", {"input_prefix": "a", "input_suffix": "b"}, 501, "not_supported_error", None),
    ("/detokenize", {"tokens": [-1]}, 400, "invalid_request_error", None),
    ("/slots/0?action=explode", {}, 400, "invalid_request_error", None),
]


@pytest.mark.parametrize("path,body,code,type_,message", JSON_CASES)
def test_bad_requests(client, path, body, code, type_, message):
    check_error(client.post(path, json=body), code, type_, message)
    still_serving(client)


def test_prompt_longer_than_slot_context(client):
    prompt = "the cat " * 400
    for stream in (False, True):
        r = client.post("/completion", json={"prompt": prompt, "stream": stream})
        err = check_error(r, 400, "exceed_context_size_error")
        assert err["n_ctx"] == 512 and err["n_prompt_tokens"] > 512
        assert err["message"] == (f"request ({err['n_prompt_tokens']} tokens) exceeds the "
                                  f"available context size (512 tokens), try increasing it")
    still_serving(client)


def test_generation_stops_at_the_slot_context(client):
    n_prompt = len(client.post("/tokenize", json={"content": "the cat " * 100}).json()["tokens"])
    r = client.post("/completion", json={"prompt": "the cat " * 100, "temperature": 0,
                                         "n_predict": -1, "ignore_eos": True}).json()
    assert r["stop_type"] == "limit" and r["truncated"] is True
    assert n_prompt + r["tokens_predicted"] == 512
    still_serving(client)


@pytest.mark.parametrize("method,path", [("GET", "/nope"), ("POST", "/v2/whatever"),
                                         ("GET", "/completion"), ("POST", "/health")])
def test_unknown_route_or_method_is_404(client, method, path):
    r = client.request(method, path)
    check_error(r, 404, "not_found_error", "File Not Found")
    still_serving(client)


def test_cors(client):
    r = client.options("/v1/chat/completions", headers={"Origin": "http://example.com"})
    assert r.status_code == 200 and r.text == ""
    assert r.headers["access-control-allow-origin"] == "http://example.com"
    assert r.headers["access-control-allow-credentials"] == "true"
    assert r.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    assert r.headers["access-control-allow-headers"] == "*"
    r = client.get("/health", headers={"Origin": "http://a.b"})
    assert r.headers["access-control-allow-origin"] == "http://a.b"
    assert client.get("/health").headers["access-control-allow-origin"] == ""


def test_web_page(client):
    r = client.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="app.js">' in r.text
    r = client.get("/app.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    assert "v1/chat/completions" in r.text
    assert client.get("/style.css").headers["content-type"].startswith("text/css")
    check_error(client.get("/nope.js"), 404, "not_found_error", "File Not Found")


def test_web_page_script_streams_a_chat(client, server, tmp_path):
    """The page's own SSE reader (api.js), run by node against the server, assembles the same
    reply."""
    import shutil
    import subprocess
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    (tmp_path / "api.mjs").write_text(client.get("/api.js").text)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6, "temperature": 0}
    prog = f"""import {{ events }} from "./api.mjs";
const r = await fetch("{server.url}/v1/chat/completions", {{method: "POST",
  headers: {{"Content-Type": "application/json"}},
  body: JSON.stringify({json.dumps({**body, "stream": True})})}});
let text = "";
for await (const ev of events(r))
  for (const c of ev.choices || []) if (c.delta && c.delta.content) text += c.delta.content;
console.log(JSON.stringify(text));
"""
    (tmp_path / "run.mjs").write_text(prog)
    out = subprocess.run([node, str(tmp_path / "run.mjs")], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    ref = client.post("/v1/chat/completions", json=body).json()
    assert json.loads(out.stdout) == (ref["choices"][0]["message"]["content"] or "")


@pytest.fixture(scope="module")
def keyed_server(tiny_llama):
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "--api-key", "k1,k2",
                    "-a", "zeta,alpha", "--temp", "0.25", "-n", "3"]).wait_ready()
    yield s
    assert s.stop() == 0


def test_api_key(keyed_server):
    import httpx
    with httpx.Client(base_url=keyed_server.url, timeout=60) as c:
        assert c.get("/health").status_code == 200
        for headers in ({}, {"Authorization": "Bearer bad"}, {"X-Api-Key": "k3"}):
            check_error(c.get("/props", headers=headers), 401, "authentication_error",
                        "Invalid API Key")
        check_error(c.get("/nope"), 401, "authentication_error")  # key check before routing
        for headers in ({"Authorization": "Bearer k2"}, {"Authorization": "k1"},
                        {"X-Api-Key": "k1"}):
            assert c.get("/props", headers=headers).status_code == 200
        assert c.options("/props").status_code == 200
        r = c.post("/completion", json=OK_BODY, headers={"Authorization": "Bearer k1"})
        assert r.status_code == 200
        # command-line sampling / -n values are the request defaults
        r = c.post("/completion", json={"prompt": "a"}, headers={"X-Api-Key": "k1"}).json()
        assert r["generation_settings"]["temperature"] == 0.25 and r["tokens_predicted"] == 3
        props = c.get("/props", headers={"X-Api-Key": "k1"}).json()
        assert props["default_generation_settings"]["params"]["temperature"] == 0.25
    import openai
    oai = openai.OpenAI(base_url=keyed_server.url + "/v1", api_key="k2", max_retries=0)
    assert oai.models.list().data[0].id == "alpha"  # first alias in sorted order
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=keyed_server.url + "/v1", api_key="bad",
                      max_retries=0).models.list()


def test_disabled_endpoints_and_load_failure(tmp_path, tiny_llama):
    import httpx
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "--no-slots", "-sp"]).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            eos = c.post("/tokenize", json={"content": "<|im_end|>"}).json()["tokens"]
            r = c.post("/completion", json={"prompt": "a", "temperature": 0,
                                            "logit_bias": [[eos[0], 100.0]]}).json()
            assert r["content"] == "<|im_end|>" and r["stop_type"] == "eos"  # -sp
            check_error(c.get("/metrics"), 501, "not_supported_error",
                        "This server does not support metrics endpoint. Start it with "
                        "`--metrics`")
            check_error(c.get("/slots"), 501, "not_supported_error")
            check_error(c.post("/slots/0?action=save", json={"filename": "a"}), 501,
                        "not_supported_error")
            check_error(c.post("/props", json={}), 501, "not_supported_error")
    finally:
        assert s.stop(signal.SIGINT) == 0
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 64)
    s = ServerProc(["-m", str(bad)])
    rc = s.proc.wait(60)
    assert rc == 1
    assert "exiting due to model loading error" in s.output()


def test_loading_returns_503():
    """While the engine has not loaded the model every route but the web page answers 503."""
    from starlette.testclient import TestClient

    from pyllama.server import ServerConfig
    from pyllama.server.app import create_app
    from pyllama.server.engine import Engine
    cfg = ServerConfig(model="unused.gguf")
    with TestClient(create_app(cfg, Engine(cfg))) as c:
        for path in ("/health", "/v1/models", "/nope"):
            check_error(c.get(path), 503, "unavailable_error", "Loading model")
        assert c.get("/").status_code == 200


def test_json_error_shape_is_exact(client):
    r = client.get("/nope")
    assert json.loads(r.content) == {"error": {"code": 404, "message": "File Not Found",
                                               "type": "not_found_error"}}


def test_n_keep_not_below_the_slot_context_is_400(client):
    """n_keep at or past the slot context (512) can never be kept: 400 (llama.cpp clamps it
    silently to n_ctx - 4); -1 (the whole prompt) and smaller values are served."""
    for n_keep in (512, 10 ** 6):
        check_error(client.post("/completion", json={**OK_BODY, "n_keep": n_keep}), 400,
                    "invalid_request_error", f"n_keep ({n_keep}) must be smaller than the slot "
                    "context size (512)")
        still_serving(client)
    for n_keep in (-1, 511):
        assert client.post("/completion", json={**OK_BODY, "n_keep": n_keep}).status_code == 200


def test_server_keep_flag_past_the_slot_context(tiny_llama):
    """--keep as large: every request gets the 400, the server stays up."""
    from server_proc import ServerProc
    import httpx
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "-t", "1", "--keep", "300"]
                   ).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            check_error(c.post("/completion", json=OK_BODY), 400, "invalid_request_error",
                        "n_keep (300) must be smaller than the slot context size (256)")
            assert c.get("/health").status_code == 200
    finally:
        assert s.stop() == 0


def test_stream_stops_with_length_at_the_slot_context(client):
    """llama.cpp's test_ctx_shift_disabled_stream: no context shift, the stream's last chunk
    says finish_reason "length" once the slot context is full."""
    with client.stream("POST", "/v1/completions", json={
            "prompt": "the cat " * 100, "n_predict": 1000, "temperature": 0,
            "ignore_eos": True, "stream": True}) as r:
        assert r.status_code == 200
        chunks = [json.loads(ln[6:]) for ln in r.iter_lines()
                  if ln.startswith("data: ") and ln != "data: [DONE]"]
    reasons = [c["choices"][0]["finish_reason"] for c in chunks if c.get("choices")]
    assert reasons[-1] == "length" and all(x is None for x in reasons[:-1])
    assert "".join(c["choices"][0]["text"] for c in chunks if c.get("choices"))
    still_serving(client)
