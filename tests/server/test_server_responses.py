"""/v1/responses (/responses) and /v1/responses/input_tokens as llama.cpp 0c1e570 maps them onto
chat completion (server_chat_convert_responses_to_chatcmpl, to_json_oaicompat_resp[_stream]);
the official `openai` client's responses.create (streaming and not) on the bundled Qwen."""
import json

import httpx
import pytest

from server_proc import ServerProc

from pyllama.server.responses import to_chat

TOOLS = [{"type": "function", "name": "get_weather", "description": "Get the weather for a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}]
ASK = "What is the weather in Paris? Use the tool."


def test_conversion_to_chat():
    body = {"instructions": "Be brief.", "max_output_tokens": 7, "temperature": 0.2,
            "reasoning": {"effort": "low"}, "tools": TOOLS + [{"type": "web_search"}],
            "input": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "type": "message", "status": "completed",
                 "content": [{"type": "output_text", "text": "hello"}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather",
                 "arguments": '{"city":"Paris"}'},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]}
    assert to_chat(body) == {
        "temperature": 0.2, "max_tokens": 7, "reasoning_effort": "low",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": [{"text": "hi", "type": "text"}]},
            {"role": "assistant", "content": [{"text": "hello", "type": "text"}],
             "tool_calls": [{"function": {"arguments": '{"city":"Paris"}',
                                          "name": "get_weather"},
                             "id": "c1", "type": "function"}]},
            {"content": "sunny", "role": "tool", "tool_call_id": "c1"}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "Get the weather for a city",
            "parameters": TOOLS[0]["parameters"], "strict": True}}]}


@pytest.fixture(scope="module")
def qwen_server(qwen_path):
    s = ServerProc(["-m", qwen_path, "-c", "2048", "-np", "1", "-t", "2", "--temp", "0"]
                   ).wait_ready()
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture(scope="module")
def client(qwen_server):
    openai = pytest.importorskip("openai")
    return openai.OpenAI(base_url=qwen_server.url + "/v1", api_key="none")


@pytest.mark.realmodel
def test_create_and_stream(client, qwen_server):
    r = client.responses.create(model="x", input="Say hello", max_output_tokens=8,
                                instructions="Be brief.")
    assert r.object == "response" and r.status == "completed" and r.id.startswith("resp_")
    assert r.usage.output_tokens == 8 and r.output[0].type == "message"
    assert r.output[0].id.startswith("msg_") and r.output_text
    n = httpx.post(qwen_server.url + "/v1/responses/input_tokens", json={
        "input": "Say hello", "instructions": "Be brief."}).json()
    assert n == {"input_tokens": r.usage.input_tokens, "object": "response.input_tokens"}
    events = list(client.responses.create(model="x", input="Say hello", max_output_tokens=8,
                                          instructions="Be brief.", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == r.output_text == events[-4].text
    assert events[-1].response.output[0].content[0].text == text
    # /responses without v1 answers the same
    r2 = httpx.post(qwen_server.url + "/responses", json={
        "input": "Say hello", "instructions": "Be brief.", "max_output_tokens": 8}).json()
    assert r2["output"][0]["content"][0]["text"] == text


@pytest.mark.realmodel
def test_function_call_items(client):
    """Qwen2.5-Coder writes the call's JSON without <tool_call> tags: a message item, as
    llama.cpp's server answers (tests/data/server-api-llamacpp.json)."""
    r = client.responses.create(model="x", input=ASK, tools=TOOLS, max_output_tokens=32)
    assert [o.type for o in r.output] == ["message"]
    assert json.loads(r.output_text) == {"name": "get_weather", "arguments": {"city": "Paris"}}
    # function_call / function_call_output items go back in as a chat exchange
    follow = [{"role": "user", "content": ASK},
              {"type": "function_call", "call_id": "call_1", "name": "get_weather",
               "arguments": '{"city": "Paris"}'},
              {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 24 C"}]
    events = list(client.responses.create(model="x", input=follow, tools=TOOLS,
                                          max_output_tokens=12, stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[-1].response.output[0].type == "message"


@pytest.mark.parametrize("body,message", [
    ({}, "'input' is required"),
    ({"input": 3}, "'input' must be a string or array of objects"),
    ({"input": [{"foo": 1}]}, "Cannot determine type of 'item'"),
    ({"input": "x", "previous_response_id": "resp_1"},
     "llama.cpp does not support 'previous_response_id'."),
    ({"input": [{"role": "user", "content": [{"type": "input_file"}]}]},
     "'input_file' is not supported by llamacpp at this moment"),
    ({"input": "x", "tools": {}}, "'tools' must be an array of objects"),
])
def test_bad_input(server, body, message):
    for path in ("/v1/responses", "/v1/responses/input_tokens"):
        r = httpx.post(server.url + path, json=body, timeout=30)
        assert r.status_code == 400
        assert r.json()["error"] == {"code": 400, "message": message,
                                     "type": "invalid_request_error"}
    assert httpx.get(server.url + "/health").status_code == 200


def test_stream_progress_and_timings(server):
    """return_progress: response.in_progress events carry prompt_progress (the opening pair
    the first time); timings_per_token: the last event of each partial result carries
    timings, as llama.cpp's to_json_oaicompat_resp puts them."""
    r = httpx.post(server.url + "/responses", timeout=60, json={
        "input": "This is a test" * 10, "max_output_tokens": 4, "stream": True,
        "timings_per_token": True, "return_progress": True})
    events = [json.loads(line[6:]) for line in r.text.splitlines() if line.startswith("data: ")]
    prog = [e for e in events if "prompt_progress" in e]
    assert prog and all(e["type"] == "response.in_progress" for e in prog)
    assert events[0]["type"] == "response.created" and "prompt_progress" not in events[0]
    assert all(e["prompt_progress"]["total"] > 0 for e in prog)
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert deltas and all("predicted_per_second" in e["timings"] for e in deltas)
    assert events[-1]["type"] == "response.completed" and "timings" in events[-1]
