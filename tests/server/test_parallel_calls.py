"""Several tool calls in one reply with parallel_tool_calls false, as llama.cpp 0c1e570 treats
them (tests/data/parallel-calls-llamacpp.json, recorded through its chat parser by
tests/make_parallel_calls_fixture.py): for the per-call `<tool_call>` format (Qwen2.5, Hermes)
the flag changes nothing, every block is a call, and the forced/lazy grammar admits several
blocks. Outputs llama.cpp's parser refuses (text after the calls; Mistral's array of two with
the flag off) are answered 500 there; they are listed, not compared."""
import json
import os

import pytest

from pyllama.grammar import Grammar
from pyllama.server.chat_parse import parse_message
from pyllama.server.structured import tool_call_grammar
from pyllama.server.tool_calls import family

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                    "parallel-calls-llamacpp.json")
FIXTURE = json.load(open(DATA, encoding="utf-8"))
CASES = [(n, i) for n, v in FIXTURE.items() for i, c in enumerate(v["cases"])
         if "error" not in c["expect"]]


@pytest.mark.parametrize("name,i", CASES, ids=[f"{n}-{i}" for n, i in CASES])
def test_same_calls_as_llama_cpp(name, i):
    v = FIXTURE[name]
    c = v["cases"][i]
    msg = parse_message(c["input"], True, "none", False, family(v["template"]))
    want = c["expect"]
    assert msg.content == want["content"]
    assert [(t["function"]["name"], json.loads(t["function"]["arguments"]))
            for t in msg.tool_calls] == \
        [(t["name"], json.loads(t["arguments"])) for t in want["tool_calls"]]


def test_flag_changes_nothing_for_tool_call_blocks():
    for name in ("Qwen-Qwen2.5-7B-Instruct", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use"):
        by_input = {}
        for c in FIXTURE[name]["cases"]:
            by_input.setdefault(c["input"], []).append(c["expect"])
        for off, on in by_input.values():
            assert off == on


def test_refused_by_llama_cpp():
    refused = [(n, c["parallel_tool_calls"]) for n, v in FIXTURE.items() for c in v["cases"]
               if "error" in c["expect"]]
    assert refused == [("Qwen-Qwen2.5-7B-Instruct", False), ("Qwen-Qwen2.5-7B-Instruct", True),
                       ("mistralai-Mistral-Nemo-Instruct-2407", False),
                       ("Mistral-Small-3.2-24B-Instruct-2506", False),
                       ("Mistral-Small-3.2-24B-Instruct-2506", True)]


def test_grammar_admits_several_blocks():
    tools = [t for t in [{"type": "function", "function": {
        "name": n, "parameters": {"type": "object", "properties": {"arg1": {"type": "integer"}},
                                  "required": ["arg1"]}}} for n in ("special_function",
                                                                    "other_function")]]
    g = Grammar.from_gbnf(tool_call_grammar(tools))
    two = FIXTURE["Qwen-Qwen2.5-7B-Instruct"]["cases"][0]["input"]
    assert g.matches(two) and g.matches(two.split("\n<tool_call>")[0])
