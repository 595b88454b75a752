"""Chat output parsers of the tool-call template families other than Hermes / Qwen `<tool_call>`
(chat.parse_tool_calls): Mistral `[TOOL_CALLS]` (JSON list, `name[ARGS]{...}`,
`name[CALL_ID]id[ARGS]{...}`) with `[THINK]` reasoning, Llama 3.x JSON calls
(`{"name": ..., "parameters": {...}}`), Functionary v3.2 (`all\n<text>` / `<name>\n<args>` after
the prompt's `>>>`, server/functionary.py), gpt-oss channels (`<|channel|>analysis|commentary|final`,
`to=functions.NAME` recipients, `<|constrain|>`), DeepSeek R1 (`<｜tool▁calls▁begin｜>`).
The family is recognised from the chat template's source, as llama.cpp's template analysis
picks a parser (common/chat.cpp, chat-auto-parser-*.cpp; cases: tests/test-chat.cpp).
"""
from __future__ import annotations

import json
import re

from . import functionary as F
from .chat import new_call_id

HERMES, MISTRAL, LLAMA3, GPT_OSS, DEEPSEEK = "hermes", "mistral", "llama3", "gpt-oss", "deepseek"
FUNCTIONARY = F.FAMILY
MARKERS = {
    MISTRAL: ("[TOOL_CALLS]", "[THINK]", "[/THINK]"),
    GPT_OSS: ("<|start|>assistant", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>"),
    DEEPSEEK: ("<｜tool▁calls▁begin｜>", "</think>"),
    LLAMA3: ("<|python_tag|>",),
}
DS_CALLS = ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>")
DS_CALL = ("<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>")


def family(template) -> str:
    """The parser family of a chat template (a ChatTemplate or its source text)."""
    src = template if isinstance(template, str) else (getattr(template, "source", "") or "")
    if "<|channel|>" in src and "<|message|>" in src:
        return GPT_OSS
    if F.is_template(src):
        return FUNCTIONARY
    if "[TOOL_CALLS]" in src:
        return MISTRAL
    if "tool▁calls▁begin" in src:
        return DEEPSEEK
    if "<tool_call>" in src:
        return HERMES
    if "<|python_tag|>" in src or "<|eom_id|>" in src or "Environment: ipython" in src or \
            '"parameters": dictionary of argument name' in src:
        return LLAMA3
    return HERMES


def _call(name: str, args, cid: str = "") -> dict:
    if not isinstance(args, str):
        args = json.dumps(args, ensure_ascii=False)
    return {"type": "function", "id": cid or new_call_id(),
            "function": {"name": name, "arguments": args}}


def _json_prefix(text: str, i: int):
    """(value, end) of the JSON value at text[i] (after blanks), or (None, i)."""
    try:
        j = len(text) - len(text[i:].lstrip())
        return json.JSONDecoder().raw_decode(text, j)
    except ValueError:
        return None, i


def _hold(text: str, markers) -> str:
    """Drop a trailing proper prefix of any marker (it may still become one)."""
    cut = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(text)), cut, -1):
            if text.endswith(m[:k]):
                cut = k
                break
    return text[:len(text) - cut] if cut else text


# ----------------------------------------------------------------------------- families
def parse_mistral(text: str, tools: bool, reasoning: str, partial: bool):
    content, thoughts, calls = text, "", []
    if reasoning != "none" and text.lstrip().startswith("[THINK]"):
        body = text.lstrip()[len("[THINK]"):]
        end = body.find("[/THINK]")
        if end < 0:
            return "", body, []
        thoughts, content = body[:end], body[end + len("[/THINK]"):]
    if tools:
        i = content.find("[TOOL_CALLS]")
        if i >= 0:
            rest, content = content[i:], content[:i]
            for part in rest.split("[TOOL_CALLS]")[1:]:
                calls += _mistral_part(part)
    if partial:
        content = _hold(content, MARKERS[MISTRAL])
    return content, thoughts, calls


def _mistral_part(part: str) -> list[dict]:
    if part.lstrip().startswith("["):
        value, _ = _json_prefix(part, 0)
        out = []
        for c in value if isinstance(value, list) else []:
            if isinstance(c, dict) and isinstance(c.get("name"), str):
                out.append(_call(c["name"], c.get("arguments", {}), str(c.get("id", "") or "")))
        return out
    m = re.match(r"\s*([^\[\s]+)(?:\[CALL_ID\]([^\[]*))?\[ARGS\]", part)
    if not m:
        return []
    value, _ = _json_prefix(part, m.end())
    args = value if value is not None else part[m.end():]
    return [_call(m.group(1), args, m.group(2) or "")]


def parse_llama3(text: str, tools: bool, reasoning: str, partial: bool):
    if tools:
        body = text.strip()
        if body.startswith("<|python_tag|>"):
            body = body[len("<|python_tag|>"):]
        if body.startswith("{"):
            value, end = _json_prefix(body, 0)
            if isinstance(value, dict) and isinstance(value.get("name"), str) and \
                    ("parameters" in value or "arguments" in value) and not body[end:].strip():
                args = value.get("parameters", value.get("arguments", {}))
                return "", "", [_call(value["name"], args)]
            if partial:
                return "", "", []          # may still become a call
    return (_hold(text, MARKERS[LLAMA3]) if partial else text), "", []


_GPT_HEADER = re.compile(r"(?:\s*to=(\S+))?(?:<\|channel\|>(\w+)(?:\s+to=(\S+?))?)*"
                         r"(?:\s*<\|constrain\|>\S+?)?\s*<\|message\|>")


def parse_gpt_oss(text: str, tools: bool, reasoning: str, partial: bool):
    """Messages separated by `<|start|>assistant`; each: header (recipient, channel), then
    `<|message|>` body until `<|end|>` / `<|call|>` / `<|return|>`."""
    content, thoughts, calls = "", "", []
    for k, msg in enumerate(text.split("<|start|>assistant")):
        if not msg:
            continue
        j = msg.find("<|message|>")
        if j < 0:
            if not partial and k == 0 and "<|channel|>" not in msg:
                content += msg             # plain text without a channel
            continue
        header, body = msg[:j], msg[j + len("<|message|>"):]
        ends = [(body.find(t), t) for t in ("<|end|>", "<|call|>", "<|return|>") if t in body]
        end, tag = min(ends) if ends else (len(body), "")
        raw_body, body = body[:end + len(tag)], body[:end]
        recipients = re.findall(r"to=([^\s<]+)", header)
        channels = re.findall(r"<\|channel\|>(\w+)", header)
        channel = channels[-1] if channels else "final"
        to = next((r for r in recipients if r not in ("assistant", "user")), None)
        if to is not None:
            if to.startswith("functions.") and tools:
                value, _ = _json_prefix(body, 0)
                calls.append(_call(to[len("functions."):],
                                   value if value is not None else body.strip()))
            continue
        if channel == "analysis":
            if reasoning == "none":
                content += header + "<|message|>" + raw_body
            else:
                thoughts += body
            continue
        content += body
    if partial:
        content = _hold(content, MARKERS[GPT_OSS])
    return content, thoughts, calls


def parse_deepseek(text: str, tools: bool, reasoning: str, partial: bool):
    content, calls = text, []
    i = content.find(DS_CALLS[0])
    if i >= 0 and tools:
        section, content = content[i + len(DS_CALLS[0]):], content[:i]
        for chunk in section.split(DS_CALL[0])[1:]:
            if DS_CALL[1] not in chunk:
                continue
            _, rest = chunk.split(DS_CALL[1], 1)
            rest = rest.split(DS_CALL[2], 1)[0]
            name, _, body = rest.partition("\n")
            m = re.search(r"```(?:json)?\s*(.*?)\s*(?:```|$)", body, re.S)
            args = m.group(1) if m else body.strip()
            value, _ = _json_prefix(args, 0)
            calls.append(_call(name.strip(), value if value is not None else args))
    if partial:
        content = _hold(content, MARKERS[DEEPSEEK])
    return content, "", calls


def parse_functionary(text: str, tools: bool, reasoning: str, partial: bool, spec=None):
    """Functionary v3.2 (server/functionary.py); `spec`: the request's call_spec."""
    names, choice, parallel = spec or ((), "auto", False)
    content, calls, _ = F.parse(text, names if tools else (), choice, parallel, partial)
    return content, "", [_call(n, a) for n, a in calls]


def call_spec(body) -> tuple:
    """(tool names, "auto" | "required" | "none", parallel) of a chat request: what the
    parsers that depend on the request's tools read (Functionary's names are literals). A
    named tool_choice forces that function (structured.constrain)."""
    tools = getattr(body, "tools", None) or []
    choice = getattr(body, "tool_choice", None)
    names = []
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.append(fn["name"])
    if isinstance(choice, dict):
        only = (choice.get("function") or {}).get("name")
        names, choice = [n for n in names if n == only], "required"
    elif choice not in ("required", "none"):
        choice = "auto"
    return tuple(names), choice, getattr(body, "parallel_tool_calls", None) is True


PARSERS = {MISTRAL: parse_mistral, LLAMA3: parse_llama3, GPT_OSS: parse_gpt_oss,
           DEEPSEEK: parse_deepseek, FUNCTIONARY: parse_functionary}


def parse(text: str, fam: str, tools: bool, reasoning: str, partial: bool = False, spec=None):
    """(content, reasoning_content, tool calls) of one output of a non-Hermes family; `spec`:
    call_spec of the request (used by the families whose parser depends on the tools)."""
    if fam == FUNCTIONARY:
        return parse_functionary(text, tools, reasoning, partial, spec)
    content, thoughts, calls = PARSERS[fam](text, tools, reasoning, partial)
    return content, thoughts, calls
