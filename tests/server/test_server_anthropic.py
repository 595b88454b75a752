"""/v1/messages and /v1/messages/count_tokens as llama.cpp 0c1e570 maps them onto chat completion
(server_chat_convert_anthropic_to_oai, to_json_anthropic[_stream]); the official `anthropic`
client against the bundled Qwen (plain, streaming, tools, count_tokens)."""
import json

import httpx
import pytest

from server_proc import ServerProc

from pyllama.server.anthropic import to_oai

TOOLS = [{"name": "get_weather", "description": "Get the weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                           "required": ["city"]}}]
ASK = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]


def test_conversion_to_oai():
    body = {"system": [{"type": "text", "text": "Be brief."}, {"type": "other"}],
            "max_tokens": 10, "stop_sequences": ["\n"], "temperature": 0.5, "top_k": 3,
            "tool_choice": {"type": "any"}, "tools": TOOLS, "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm"},
                    {"type": "tool_use", "id": "t1", "name": "get_weather",
                     "input": {"city": "Paris"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1",
                     "content": [{"type": "text", "text": "sunny"}]}]},
                {"role": "assistant"}]}
    assert to_oai(body) == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {"role": "assistant", "content": "", "reasoning_content": "hmm", "tool_calls": [
                {"id": "t1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather for a city",
            "parameters": TOOLS[0]["input_schema"]}}],
        "tool_choice": "required", "stop": ["\n"], "max_tokens": 10, "temperature": 0.5,
        "top_k": 3}
    assert to_oai({"messages": []})["max_tokens"] == 4096     # permissive default
    billing = "x-anthropic-billing-header: cc_version=2.1; cch=a5145;You are Claude Code."
    assert to_oai({"system": billing, "messages": []})["messages"][0]["content"] == \
        "x-anthropic-billing-header: cc_version=2.1; cch=fffff;You are Claude Code."


@pytest.fixture(scope="module")
def qwen_server(qwen_path):
    s = ServerProc(["-m", qwen_path, "-c", "2048", "-np", "1", "-t", "2", "--temp", "0"]
                   ).wait_ready()
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def client(qwen_server):
    anthropic = pytest.importorskip("anthropic")
    return anthropic.Anthropic(base_url=qwen_server.url, api_key="none")


@pytest.mark.realmodel
def test_plain_and_stream(client, qwen_server):
    hi = [{"role": "user", "content": "Say hello"}]
    m = client.messages.create(model="x", max_tokens=8, messages=hi, system="Be friendly.")
    assert m.type == "message" and m.role == "assistant" and m.id.startswith("chatcmpl-")
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 8
    assert [b.type for b in m.content] == ["text"] and m.content[0].text
    n = client.messages.count_tokens(model="x", messages=hi, system="Be friendly.").input_tokens
    assert m.usage.input_tokens + m.usage.cache_read_input_tokens == n
    with client.messages.stream(model="x", max_tokens=8, messages=hi,
                                system="Be friendly.") as st:
        kinds = [ev.type for ev in st]
        final = st.get_final_message()
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert "content_block_start" in kinds and "content_block_stop" in kinds
    assert final.content[0].text == m.content[0].text          # greedy: same text
    # raw events: llama.cpp's names and data
    with httpx.stream("POST", qwen_server.url + "/v1/messages", timeout=60, json={
            "max_tokens": 3, "stream": True, "messages": hi,
            "stop_sequences": ["zzz"]}) as r:
        lines = [ln for ln in r.iter_lines() if ln]
    names = [ln[7:] for ln in lines if ln.startswith("event: ")]
    datas = [json.loads(ln[6:]) for ln in lines if ln.startswith("data: ")]
    assert names == [d["type"] for d in datas]
    assert datas[1] == {"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}}
    assert datas[-2]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert datas[-2]["usage"] == {"output_tokens": 3}


@pytest.mark.realmodel
def test_stop_sequence(client):
    m = client.messages.create(model="x", max_tokens=20, stop_sequences=["!"],
                               messages=[{"role": "user", "content": "Say hello"}])
    assert m.stop_reason == "end_turn" and m.stop_sequence == "!"
    assert "!" not in m.content[0].text


@pytest.mark.realmodel
def test_tools(client):
    """Qwen2.5-Coder writes the call's JSON without <tool_call> tags: text, as llama.cpp's server
    answers (tests/data/server-api-llamacpp.json); tool_use parsing: test_chat_parse.py."""
    m = client.messages.create(model="x", max_tokens=32, tools=TOOLS, messages=ASK)
    assert m.stop_reason == "end_turn" and [b.type for b in m.content] == ["text"]
    assert json.loads(m.content[0].text) == {"name": "get_weather",
                                             "arguments": {"city": "Paris"}}
    # a tool_use / tool_result exchange goes back in as assistant tool_calls and a tool message
    follow = ASK + [{"role": "assistant", "content": [
        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1",
                                      "content": "sunny, 24 C"}]}]
    n_more = client.messages.count_tokens(model="x", messages=follow, tools=TOOLS).input_tokens
    n_ask = client.messages.count_tokens(model="x", messages=ASK, tools=TOOLS).input_tokens
    assert n_more > n_ask + 10
    with client.messages.stream(model="x", max_tokens=12, tools=TOOLS, messages=follow) as st:
        kinds = [ev.type for ev in st]
        final = st.get_final_message()
    assert kinds[0] == "message_start" and final.content and final.content[0].type == "text"


@pytest.mark.parametrize("body,code,message", [
    ({"max_tokens": 5}, 500, "'messages' is required"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}, 400,
     "Field 'max_tokens': [json.exception.type_error.302] type must be number, but is string"),
])
def test_bad_input(server, body, code, message):
    r = httpx.post(server.url + "/v1/messages", json=body, timeout=30)
    assert r.status_code == code
    err = r.json()["error"]
    assert err["code"] == code and set(err) >= {"code", "message", "type"}
    if message:
        assert err["message"] == message
    r = httpx.post(server.url + "/v1/messages/count_tokens", json=body, timeout=30)
    assert r.status_code == code
    assert httpx.get(server.url + "/health").status_code == 200
