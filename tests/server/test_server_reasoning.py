"""Reasoning: --reasoning-format / per-request reasoning_format, reasoning_content in responses and
stream deltas, chat_template_kwargs.enable_thinking, --reasoning-budget (llama.cpp's
reasoning-budget sampler), on a template with thinking blocks; the parser and the budget state
machine on their own."""
import json

import httpx
import pytest

from server_proc import ServerProc

from pyllama.server.chat_parse import MsgStream, ReasoningBudget, parse_message

THINK_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n"
    "{% else %}<think>{% endif %}{% endif %}")


@pytest.mark.parametrize("fmt,content,reasoning", [
    ("auto", "The answer is 4.", "Let me add 2 and 2."),
    ("deepseek", "The answer is 4.", "Let me add 2 and 2."),
    ("deepseek-legacy", "<think>Let me add 2 and 2.</think>The answer is 4.",
     "Let me add 2 and 2."),
    ("none", "<think>Let me add 2 and 2.</think>\n\nThe answer is 4.", ""),
])
def test_parse_think_block(fmt, content, reasoning):
    text = "<think>Let me add 2 and 2.</think>\n\nThe answer is 4."
    m = parse_message(text, reasoning=fmt)
    assert (m.content.replace("\n\n", "") if fmt == "deepseek-legacy" else m.content,
            m.reasoning_content) == (content, reasoning)
    # streamed one character at a time: the deltas add up to the same message
    s = MsgStream(reasoning=fmt)
    diffs = [d for ch in text for d in s.push(ch)]
    diffs += s.finish()[0]
    assert "".join(d.get("reasoning_content", "") for d in diffs).strip() == reasoning
    if fmt in ("auto", "deepseek"):
        assert "".join(d.get("content", "") for d in diffs) == content


def test_parse_forced_open_and_unclosed():
    m = parse_message("thinking...</think>done", reasoning="auto", open_think=True)
    assert (m.reasoning_content, m.content) == ("thinking...", "done")
    m = parse_message("still thinking", reasoning="auto", open_think=True)
    assert (m.reasoning_content, m.content) == ("still thinking", "")
    m = parse_message("no think block", reasoning="auto")
    assert (m.reasoning_content, m.content) == ("", "no think block")


def test_budget_state_machine():
    b = ReasoningBudget([7, 8], [9], 2)
    for t in (1, 7, 8):               # the start tag in the prompt arms it
        b.accept(t)
    assert b.state == "counting" and b.forced() is None
    b.accept(3)
    assert b.forced() is None
    b.accept(4)                       # budget spent: the end tag is forced
    assert b.forced() == 9
    b.accept(9)
    assert b.state == "done" and b.forced() is None
    b.accept(7)
    b.accept(8)                       # a new start tag re-arms it
    assert b.state == "counting"
    b0 = ReasoningBudget([7], [9, 10], 0)
    b0.accept(7)
    assert b0.forced() == 9
    b0.accept(9)
    assert b0.forced() == 10
    n = ReasoningBudget([7], [9], 5)
    n.accept(7)
    n.accept(9)                       # a natural end
    assert n.state == "done"


@pytest.fixture(scope="module")
def think_server(tiny_llama):
    s = ServerProc(["-m", tiny_llama, "-c", "512", "-np", "1", "-t", "1", "--temp", "0",
                    "--chat-template", THINK_TEMPLATE]).wait_ready()
    yield s
    assert s.stop() == 0, s.output()


def _chat(url, **kw):
    body = {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 12, **kw}
    return httpx.post(url + "/v1/chat/completions", json=body, timeout=60).json()


def test_reasoning_content_in_response_and_stream(think_server):
    url = think_server.url
    msg = _chat(url)["choices"][0]["message"]
    assert msg["reasoning_content"] and not msg.get("content")   # the think block never closed
    raw = _chat(url, reasoning_format="none")["choices"][0]["message"]
    assert "reasoning_content" not in raw and raw["content"].strip() == msg["reasoning_content"]
    with httpx.stream("POST", url + "/v1/chat/completions", timeout=60, json={
            "messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 12,
            "stream": True}) as r:
        chunks = [json.loads(ln[6:]) for ln in r.iter_lines()
                  if ln.startswith("data: ") and ln != "data: [DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning_content", "") for d in deltas).strip() == \
        msg["reasoning_content"]
    assert not "".join(d.get("content") or "" for d in deltas)
    # enable_thinking=false: the template closes the block, everything is content
    off = _chat(url, chat_template_kwargs={"enable_thinking": False})["choices"][0]["message"]
    assert "reasoning_content" not in off and off["content"]


def test_reasoning_budget(think_server):
    url = think_server.url
    free = _chat(url, max_tokens=20)["choices"][0]["message"]
    capped = _chat(url, max_tokens=20, reasoning_budget_tokens=3)["choices"][0]["message"]
    assert capped["reasoning_content"] and free["reasoning_content"].startswith(
        capped["reasoning_content"])
    assert len(capped["reasoning_content"]) < len(free["reasoning_content"])
    assert capped.get("content")            # after the forced </think>, the answer
    # Anthropic's thinking.budget_tokens and a Responses reasoning item carry the same
    a = httpx.post(url + "/v1/messages", timeout=60, json={
        "max_tokens": 20, "messages": [{"role": "user", "content": "What is 2+2?"}],
        "thinking": {"type": "enabled", "budget_tokens": 3}}).json()
    assert a["content"][0] == {"type": "thinking", "thinking": capped["reasoning_content"],
                               "signature": ""}
    r = httpx.post(url + "/v1/responses", timeout=60, json={
        "input": "What is 2+2?", "max_output_tokens": 12}).json()
    assert r["output"][0]["type"] == "reasoning"
    assert r["output"][0]["content"][0]["text"] == msg_reasoning(url)


def msg_reasoning(url):
    return _chat(url)["choices"][0]["message"]["reasoning_content"]


def test_reasoning_control_ends_thinking(think_server):
    url = think_server.url
    body = {"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 300,
            "stream": True, "reasoning_control": True}
    control = None
    deltas = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        for ln in r.iter_lines():
            if not ln.startswith("data: ") or ln == "data: [DONE]":
                continue
            c = json.loads(ln[6:])
            if c["choices"]:
                deltas.append(c["choices"][0]["delta"])
            if control is None and any("reasoning_content" in d for d in deltas):
                control = httpx.post(url + "/v1/chat/completions/control", timeout=30,
                                     json={"id": c["id"], "action": "reasoning_end"}).json()
    assert control == {"success": True}
    assert "".join(d.get("content") or "" for d in deltas)     # answered after the forced end
    r = httpx.post(url + "/v1/chat/completions/control",
                   json={"id": "chatcmpl-gone", "action": "reasoning_end"}).json()
    assert r == {"success": False, "message": "no active completion for this id"}


@pytest.mark.parametrize("path,body,code,message", [
    ("/v1/chat/completions/control", {"action": "reasoning_end"}, 400,
     "missing completion id"),
    ("/v1/chat/completions/control", {"id": "x", "action": "pause"}, 400,
     "unknown control action"),
    ("/lora-adapters", {"id": 0}, 400, "Request body must be an array"),
    ("/v1/audio/transcriptions", {}, 501, "The current model does not support audio input."),
])
def test_small_routes_errors(server, path, body, code, message):
    r = httpx.post(server.url + path, json=body)
    assert r.status_code == code and r.json()["error"]["message"] == message


def test_lora_adapters_none_loaded(server):
    assert httpx.get(server.url + "/lora-adapters").json() == []
    assert httpx.post(server.url + "/lora-adapters", json=[{"id": 0, "scale": 1.0}]).json() == \
        {"success": True}
