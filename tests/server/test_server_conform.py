"""llama-server behaviours of llama.cpp 0c1e570 that its own server test suite checks (issue 21):
--kv-unified slot contexts, --host a,b, --alias/--tags in /models."""
import socket

import httpx
import pytest

from server_proc import ServerProc


@pytest.fixture(scope="module")
def unified(tiny_llama):
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "4", "--kv-unified", "-t", "1",
                    "--alias", "b-name,a-name", "--tags", "chat,small"]).wait_ready()
    yield s
    assert s.stop() == 0


def test_kv_unified_gives_each_slot_the_whole_context(unified):
    """llama_context: n_ctx_seq = n_ctx with a unified cache, and n_ctx_slot() is that; a slot
    of a 256-token unified cache with 4 slots is not stopped at 256 / 4."""
    with httpx.Client(base_url=unified.url, timeout=120) as c:
        assert c.get("/props").json()["default_generation_settings"]["n_ctx"] == 256
        assert all(s["n_ctx"] == 256 for s in c.get("/slots").json())
        r = c.post("/completion", json={"prompt": "the cat", "n_predict": 120,
                                        "temperature": 0, "ignore_eos": True}).json()
    assert r["tokens_predicted"] == 120


def test_explicit_parallel_without_kv_unified_splits_the_context(tool_config):
    """-np N alone keeps llama.cpp's default (not unified): each slot gets n_ctx / N."""
    assert not tool_config("-np", "2").unified
    assert tool_config().unified                       # -np auto: 4 slots, unified
    assert tool_config("-np", "2", "-kvu").unified


def test_aliases_and_tags(unified):
    m = httpx.get(unified.url + "/models").json()["data"][0]
    assert set(m["aliases"]) == {"a-name", "b-name"} and m["id"] == "a-name"
    assert set(m["tags"]) == {"chat", "small"}


def test_several_listen_addresses(tiny_llama):
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "-t", "1",
                    "--host", "127.0.0.1,::1"])
    try:
        s.wait_ready()
        for host in ("127.0.0.1", "[::1]"):
            assert httpx.get(f"http://{host}:{s.port}/health").status_code == 200
    finally:
        assert s.stop() == 0


@pytest.fixture
def tool_config(tiny_llama):
    from pyllama.tools import _args, server
    return lambda *argv: server.to_config(_args.parse("server", ["-m", tiny_llama, *argv],
                                                      env={}, config=[]))


def test_verbose_field(client):
    """`verbose`: llama.cpp's __verbose (the native result, with the prompt text) in OpenAI
    responses; absent otherwise."""
    msgs = [{"role": "system", "content": "Book"}, {"role": "user", "content": "hi"}]
    r = client.post("/chat/completions", json={"messages": msgs, "max_tokens": 2,
                                               "verbose": True}).json()
    assert "Book" in r["__verbose"]["prompt"] and r["__verbose"]["tokens_predicted"] == 2
    r = client.post("/chat/completions", json={"messages": msgs, "max_tokens": 2}).json()
    assert "__verbose" not in r


def test_ignore_eos_logit_bias_in_generation_settings(client):
    """ignore_eos adds every EOG token at -inf (null) to logit_bias (server-schema.cpp)."""
    body = {"prompt": "the cat", "n_predict": 2, "temperature": 0}
    lb = client.post("/completion", json={**body, "ignore_eos": True}).json()[
        "generation_settings"]["logit_bias"]
    assert lb and all(e["bias"] is None for e in lb)
    assert client.post("/completion", json=body).json()["generation_settings"]["logit_bias"] == []
    lb = client.post("/completion", json={**body, "logit_bias": [[5, 1.5]]}).json()[
        "generation_settings"]["logit_bias"]
    assert lb == [{"bias": 1.5, "token": 5}]


@pytest.mark.parametrize("body", [
    {"add_generation_prompt": True, "continue_final_message": True,
     "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]},
    {"messages": [{"role": "user", "content": "t"}, {"role": "assistant", "content": "a"},
                  {"role": "assistant", "content": "b"}]},
])
def test_continuation_rules_are_400(client, body):
    r = client.post("/chat/completions", json={**body, "max_tokens": 1})
    assert r.status_code == 400 and "error" in r.json()


def test_continue_final_message_prefills(client):
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]
    prompts = [client.post("/apply-template", json={"messages": msgs, **extra}).json()["prompt"]
               for extra in ({}, {"add_generation_prompt": False,
                                  "continue_final_message": True})]
    assert prompts[0] == prompts[1] and prompts[0].endswith("Hel")


def test_multimodal_prompt_on_a_text_model(client):
    r = client.post("/completion", json={"prompt": {"prompt_string": "x <__media__>",
                                                    "multimodal_data": ["AAAA"]}})
    assert r.status_code == 500
    assert "does not support multimodal" in r.json()["error"]["message"]


@pytest.mark.parametrize("jinja", ["--jinja", "--no-jinja"])
def test_chat_template_builtin_name(tiny_llama, jinja):
    """--chat-template NAME: llama.cpp's built-in format (src/llama-chat.cpp), not the name as
    template text; the expected prompt is llama.cpp's server test (test_apply_chat_template)."""
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "-t", "1", "--chat-template",
                    "command-r", jinja]).wait_ready()
    try:
        r = httpx.post(s.url + "/apply-template", json={"messages": [
            {"role": "system", "content": "You are a test."},
            {"role": "user", "content": "Hi there"}]}).json()
    finally:
        assert s.stop() == 0
    assert r["prompt"] == ("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test."
                           "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there"
                           "<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>")


def test_gcp_vertex_predict(tiny_llama):
    """AIP_MODE=PREDICTION: POST /predict runs each instance's @requestFormat route (llama.cpp's
    register_gcp_compat), answers in order; the port is AIP_HTTP_PORT."""
    from server_proc import free_port
    port = free_port()
    s = ServerProc(["-m", tiny_llama, "-c", "512", "-np", "2", "-t", "1"],
                   env={"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": str(port),
                        "AIP_HEALTH_ROUTE": "healthz"})
    s.port, s.url = port, f"http://127.0.0.1:{port}"
    try:
        s.wait_ready()
        assert httpx.get(s.url + "/healthz").json() == {"status": "ok"}
        r = httpx.post(s.url + "/predict", json={"instances": [
            {"@requestFormat": "chatCompletions", "max_tokens": 2,
             "messages": [{"role": "user", "content": "hi"}]},
            {"@requestFormat": "/completion", "prompt": "the cat", "n_predict": 2},
            {"@requestFormat": "nope"}, 5]}, timeout=120).json()["predictions"]
    finally:
        assert s.stop() == 0
    assert r[0]["choices"][0]["message"]["role"] == "assistant"
    assert r[1]["tokens_predicted"] == 2
    assert r[2]["error"]["message"] == "no handler registered for @requestFormat: nope"
    assert r[3]["error"]["message"] == "each instance must be a JSON object"


def test_progress_timings_and_idle_slot_budget(client):
    """return_progress + timings_per_token: each progress chunk has timings, the first (sent
    before any prompt token is decoded) all zero; an idle slot reports n_remain -1, n_decoded 0
    (llama.cpp's tests/unit/test_metrics.py cases)."""
    import json
    body = {"prompt": "the cat sat on the mat " * 40, "n_predict": 2, "stream": True,
            "return_progress": True, "timings_per_token": True, "cache_prompt": False}
    with client.stream("POST", "/completion", json=body) as r:
        events = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: ")]
    prog = [e for e in events if "prompt_progress" in e]
    assert len(prog) > 1 and all("timings" in e for e in prog)
    first = prog[0]["timings"]
    assert first["prompt_n"] == 0 and first["prompt_ms"] == 0.0 and first["predicted_n"] == 0
    ms = [e["timings"]["prompt_ms"] for e in prog]
    assert ms == sorted(ms) and ms[-1] > 0
    for s in client.get("/slots").json():
        if "next_token" in s:
            assert s["next_token"][0]["n_remain"] == -1 and s["next_token"][0]["n_decoded"] == 0
