"""Functionary v3.2's tool calls (`all\\n<text>` / `<name>\\n<JSON>` after the prompt's `>>>`) as
llama.cpp 0c1e570 handles them (tests/data/functionary-llamacpp.json, recorded through its chat
parameters, chat parser and grammar engine by tests/make_functionary_fixture.py): the template
is recognised, the parser gives llama.cpp's message for whole and partial outputs (and refuses
what it refuses), a stream adds up to the same message, and the grammar is llama.cpp's (its rules
reachable from the root, the generation prompt's literal left out) and accepts and rejects the
same outputs."""
import json
import os
import re

import pytest

from pyllama.grammar import Grammar
from pyllama.server import functionary as F
from pyllama.server import schemas as S
from pyllama.server.chat_parse import MsgStream, parse_message
from pyllama.server.tool_calls import FUNCTIONARY, family

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                    "functionary-llamacpp.json")
FIXTURE = json.load(open(DATA, encoding="utf-8"))
CASES = FIXTURE["cases"]
IDS = list(range(len(CASES)))
GRAMMARS = [i for i, c in enumerate(CASES) if c["expect"]["grammar"]]


def _spec(c):
    names = tuple(t["function"]["name"] for t in c["tools"])
    return names, c["tool_choice"], c["parallel_tool_calls"]


def _label(c) -> str:
    names = "+".join(t["function"]["name"] for t in c["tools"]) or "no-tools"
    return f"{names}-{c['tool_choice']}-{'par' if c['parallel_tool_calls'] else 'one'}"


def _calls(msg_calls):
    return [[t["function"]["name"], t["function"]["arguments"]] for t in msg_calls]


def test_family_and_generation_prompt():
    from pyllama.vocab.chat import ChatTemplate
    assert family(FIXTURE["template"]) == FUNCTIONARY
    gp = {c["expect"]["generation_prompt"] for c in CASES}
    assert gp == {"<|start_header_id|>assistant<|end_header_id|>\n\n>>>"}
    text = ChatTemplate(FIXTURE["template"]).apply([{"role": "user", "content": "hi"}],
                                                  add_generation_prompt=True)
    assert text.endswith(gp.pop())
    assert {c["expect"]["format"] for c in CASES} == {"peg-native"}


@pytest.mark.parametrize("i", IDS, ids=[_label(CASES[i]) for i in IDS])
def test_parse_as_llama_cpp(i):
    c = CASES[i]
    names, choice, parallel = _spec(c)
    for k, text in enumerate(c["outputs"]):
        for partial, want in ((False, c["expect"]["parses"][k]),
                              (True, c["expect"]["partial_parses"][k])):
            content, calls, ok = F.parse(text, names, choice, parallel, partial)
            if "error" in want:
                assert not ok and not partial and want["error"] == F.PARSE_ERROR, text
                continue
            assert ok, text
            assert (content, [list(x) for x in calls]) == \
                (want["content"], [[t["name"], t["arguments"]] for t in want["tool_calls"]]), \
                (text, partial)


@pytest.mark.parametrize("i", IDS, ids=[_label(CASES[i]) for i in IDS])
def test_message_and_stream(i):
    """The server's parse (chat_parse) and a stream of 3-character deltas: the final message is
    llama.cpp's, the content deltas add up to it, the calls come once, at the end."""
    c = CASES[i]
    tools = bool(c["tools"]) and c["tool_choice"] != "none"
    spec = _spec(c)
    for text, want in zip(c["outputs"], c["expect"]["parses"]):
        msg = parse_message(text, tools, "none", False, FUNCTIONARY, spec)
        s = MsgStream(tools, "none", False, family=FUNCTIONARY, spec=spec)
        diffs = [d for j in range(0, len(text), 3) for d in s.push(text[j:j + 3])]
        more, final = s.finish()
        diffs += more
        assert (final.content, _calls(final.tool_calls)) == \
            (msg.content, _calls(msg.tool_calls)), text
        assert "".join(d.get("content", "") for d in diffs) == final.content, text
        assert [d["tool_call"][1] for d in diffs if "tool_call" in d] == final.tool_calls
        if "error" in want:    # llama.cpp answers 500; here the text is kept as content
            assert not msg.tool_calls and msg.content in (text, text[4:]), text
            continue
        assert msg.content == want["content"] and msg.reasoning_content == "", text
        assert _calls(msg.tool_calls) == \
            [[t["name"], t["arguments"]] for t in want["tool_calls"]], text


def _rules(text: str) -> dict:
    out = {}
    for line in text.strip().splitlines():
        name, _, rhs = line.partition(" ::= ")
        out[name] = rhs
    return out


def _reachable(rules: dict, root: str = "root") -> set:
    seen, todo = set(), [root]
    while todo:
        r = todo.pop()
        if r in seen or r not in rules:
            continue
        seen.add(r)
        rhs = re.sub(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]', " ", rules[r])
        todo += re.findall(r"[A-Za-z0-9_-]+", rhs)
    return seen


@pytest.mark.parametrize("i", GRAMMARS, ids=[_label(CASES[i]) for i in GRAMMARS])
def test_grammar_is_llama_cpps(i):
    c, want = CASES[i], CASES[i]["expect"]
    text, lazy, triggers = F.grammar(c["tools"], c["tool_choice"], c["parallel_tool_calls"])
    assert lazy == want["grammar_lazy"]
    assert [{"type": 2, "value": v} for _, v in triggers] == want["grammar_triggers"]
    theirs = _rules(want["grammar"])
    gp = json.dumps(want["generation_prompt"])
    if not lazy:    # llama.cpp's root starts with the generation prompt, prefilled at run time
        assert theirs["root"].startswith(gp + " ")
        theirs["root"] = theirs["root"][len(gp) + 1:]
    ours = _rules(text)
    assert ours == {r: theirs[r] for r in _reachable(theirs)}


@pytest.mark.parametrize("i", GRAMMARS, ids=[_label(CASES[i]) for i in GRAMMARS])
def test_grammar_accepts_what_llama_cpp_accepts(i):
    c, want = CASES[i], CASES[i]["expect"]
    g = Grammar.from_gbnf(F.grammar(c["tools"], c["tool_choice"], c["parallel_tool_calls"])[0])
    assert [g.matches(s) for s in c["matches"]] == want["matches"]
    # and llama.cpp's own grammar text in pyllama's engine: the same answers
    prefix = "" if want["grammar_lazy"] else want["generation_prompt"]
    theirs = Grammar.from_gbnf(want["grammar"])
    assert [theirs.matches(prefix + s) for s in c["matches"]] == want["matches"]


def test_named_tool_choice_forces_that_function():
    from pyllama.server.tool_calls import call_spec
    tools = CASES[0]["tools"]
    text, lazy, _ = F.grammar(tools, "required", False, only="python")
    g = Grammar.from_gbnf(text)
    assert not lazy and g.matches('python\n{"code": "1"}')
    assert not g.matches('test\n{"success": true}')

    class Body:
        tool_choice = {"type": "function", "function": {"name": "python"}}
        parallel_tool_calls = False
    Body.tools = tools
    assert call_spec(Body) == (("python",), "required", False)


def test_finish_reason_and_empty_content_with_calls():
    """to_json_oaicompat_chat: "tool_calls" only for a stopped generation; a call cut by the
    token limit is "length"; the content of a message with calls is "" (not null)."""
    call = {"type": "function", "id": "x", "function": {"name": "test", "arguments": "{"}}
    for stop, finish in (("limit", "length"), ("eos", "tool_calls"), ("word", "tool_calls")):
        f = S.Final(index=0, text="", tokens=[], stop_type=stop, stopping_word="", n_prompt=1,
                    n_decoded=1, n_cached=0, timings=S.Timings(), probs=[], id_slot=0)
        c = S.chat_completion([(f, "", [call])], "m", "id", 0)["choices"][0]
        assert c["finish_reason"] == finish
        assert c["message"] == {"role": "assistant", "content": "", "tool_calls": [call]}
