"""Tool-call and reasoning parsing of the template families, on llama.cpp's own templates and the
cases of its tests/test-chat.cpp (tests/data/chat-parse-llamacpp.json, extracted by
tests/make_chat_parse_fixture.py): whole messages and the same output streamed in pieces."""
import json
import os

import pytest

from pyllama.server.chat_parse import MsgStream, forced_open, parse_message
from pyllama.server.tool_calls import family

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                    "chat-parse-llamacpp.json")
FIXTURE = json.load(open(DATA, encoding="utf-8"))
CASES = [(name, i) for name, v in FIXTURE.items() for i in range(len(v["cases"]))]
FAMILIES = {"Qwen-Qwen2.5-7B-Instruct": "hermes",
            "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes",
            "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
            "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
            "unsloth-mistral-Devstral-Small-2507": "mistral",
            "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",
            "meta-llama-Llama-3.1-8B-Instruct": "llama3",
            "meta-llama-Llama-3.2-3B-Instruct": "llama3",
            "meta-llama-Llama-3.3-70B-Instruct": "llama3",
            "openai-gpt-oss-120b": "gpt-oss",
            "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek"}


def _open_think(source: str) -> bool:
    from pyllama.vocab.chat import ChatTemplate
    try:
        text = ChatTemplate(source).apply([{"role": "user", "content": "x"}],
                                          add_generation_prompt=True, enable_thinking=True)
    except Exception:  # noqa: BLE001 - a template this renderer does not run
        return False
    return forced_open(text)


def _check(msg, want):
    if want["content"] is not None:
        assert msg.content == want["content"]
    if want["reasoning_content"] is not None:
        assert msg.reasoning_content == want["reasoning_content"]
    if want["tool_calls"] is not None:
        got = [(c["function"]["name"], json.loads(c["function"]["arguments"]), c["id"])
               for c in msg.tool_calls]
        assert [(n, a) for n, a, _ in got] == \
            [(c["name"], json.loads(c["arguments"])) for c in want["tool_calls"]]
        for (_, _, gid), c in zip(got, want["tool_calls"]):
            if c["id"]:
                assert gid == c["id"]


def test_families():
    for name, v in FIXTURE.items():
        assert family(v["template"]) == FAMILIES[name], name


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_case(name, i):
    v = FIXTURE[name]
    c = v["cases"][i]
    fam, tools, fmt = family(v["template"]), bool(c["tools"]), c["reasoning_format"]
    open_think = fmt != "none" and _open_think(v["template"])
    msg = parse_message(c["output"], tools, fmt, open_think, fam)
    _check(msg, c["expect"])
    # streamed in 3-character pieces: the deltas add up, the final message is the same
    s = MsgStream(tools, fmt, open_think, family=fam)
    text = c["output"]
    diffs = [d for k in range(0, len(text), 3) for d in s.push(text[k:k + 3])]
    more, final = s.finish()
    _check(final, c["expect"])
    diffs += more
    if c["expect"]["content"] is not None and fam != "hermes":
        assert "".join(d.get("content", "") for d in diffs) == final.content
    assert [d["tool_call"][1] for d in diffs if "tool_call" in d] == final.tool_calls
