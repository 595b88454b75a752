"""Anthropic Messages: `/v1/messages` (+ streaming events) and `/v1/messages/count_tokens`, mapped
onto the chat completion path as llama.cpp does.

llama.cpp counterpart: server_chat_convert_anthropic_to_oai (server-chat.cpp),
server_task_result_cmpl_final::to_json_anthropic / _stream and
server_task_result_cmpl_partial::to_json_anthropic (server-task.cpp), format_anthropic_sse
(server-common.cpp). Errors keep llama.cpp's `{"error": {code, message, type}}` body (a stream
error is an `event: error` whose data is that inner object).
"""
from __future__ import annotations

import json

import msgspec

from . import schemas as S
from .chat_parse import ChatMsg
from .schemas import ServerError


def _str(d, key, default=""):
    v = d.get(key) if isinstance(d, dict) else None
    return v if isinstance(v, str) else default


def _billing(text: str) -> str:
    """normalize_anthropic_billing_header: the 5-character `cch=` stamp of Claude Code's
    billing line changes on every request and would defeat the prompt cache; llama.cpp writes
    'fffff' over it (only when a ';' follows the 5 characters)."""
    head = "x-anthropic-billing-header:"
    if not text.startswith(head):
        return text
    i = text.find("cch=", len(head))
    if i < 0:
        return text
    j = i + 4
    if j + 5 < len(text) and text[j + 5] == ";":
        return text[:j] + "fffff" + text[j + 5:]
    return text


def _image_part(source) -> dict | None:
    kind = _str(source, "type")
    if kind == "base64":
        return {"type": "image_url", "image_url": {
            "url": f"data:{_str(source, 'media_type', 'image/jpeg')};base64,"
                   f"{_str(source, 'data')}"}}
    if kind == "url":
        return {"type": "image_url", "image_url": {"url": _str(source, "url")}}
    return None


def _tool_result(block) -> dict:
    tid = _str(block, "tool_use_id")
    rc = block.get("content") if isinstance(block, dict) else None
    if isinstance(rc, str):
        return {"role": "tool", "tool_call_id": tid, "content": rc}
    if isinstance(rc, list):
        text, parts, images = "", [], False
        for c in rc:
            t = _str(c, "type")
            if t == "text":
                text += _str(c, "text")
                parts.append({"type": "text", "text": _str(c, "text")})
            elif t == "image":
                images = True
                part = _image_part(c.get("source") if isinstance(c, dict) else None)
                if part:
                    parts.append(part)
        return {"role": "tool", "tool_call_id": tid, "content": parts if images else text}
    return {"role": "tool", "tool_call_id": tid, "content": ""}


def to_oai(body) -> dict:
    """server_chat_convert_anthropic_to_oai: an Anthropic request -> an OpenAI chat request."""
    if not isinstance(body, dict):
        body = {}
    msgs = []
    system = body.get("system")
    if system is not None:
        text = ""
        if isinstance(system, str):
            text = _billing(system)
        elif isinstance(system, list):
            text = "".join(_billing(_str(b, "text")) for b in system if _str(b, "type") == "text")
        msgs.append({"role": "system", "content": text})
    if "messages" not in body:
        raise ServerError(500, "'messages' is required")
    for m in body["messages"] if isinstance(body["messages"], list) else []:
        role = _str(m, "role")
        if not isinstance(m, dict) or "content" not in m:
            if role != "assistant":
                msgs.append(m)
            continue
        content = m["content"]
        if not isinstance(content, list):
            msgs.append(m)
            continue
        calls, parts, results, reasoning = [], [], [], ""
        for block in content:
            t = _str(block, "type")
            if t == "text":
                parts.append(block)
            elif t == "thinking":
                reasoning += _str(block, "thinking")
            elif t == "image":
                part = _image_part(block.get("source"))
                if part:
                    parts.append(part)
            elif t == "tool_use":
                args = block.get("input") if isinstance(block.get("input"), dict) else {}
                calls.append({"id": _str(block, "id"), "type": "function", "function": {
                    "name": _str(block, "name"),
                    "arguments": json.dumps(args, separators=(",", ":"), ensure_ascii=False)}})
            elif t == "tool_result":
                results.append(_tool_result(block))
        if parts or calls or reasoning:
            new = {"role": role, "content": parts if parts else ""}
            if calls:
                new["tool_calls"] = calls
            if reasoning:
                new["reasoning_content"] = reasoning
            msgs.append(new)
        msgs.extend(results)
    out: dict = {"messages": msgs}
    tools = body.get("tools")
    if isinstance(tools, list):
        out["tools"] = [{"type": "function", "function": {
            "name": _str(t, "name"), "description": _str(t, "description"),
            "parameters": t.get("input_schema", {}) if isinstance(t, dict) else {}}}
            for t in tools]
    tc = body.get("tool_choice")
    if isinstance(tc, dict):
        kind = _str(tc, "type")
        if kind == "auto":
            out["tool_choice"] = "auto"
        elif kind in ("any", "tool"):
            out["tool_choice"] = "required"
    if "stop_sequences" in body:
        out["stop"] = body["stop_sequences"]
    out["max_tokens"] = body.get("max_tokens", 4096)
    for key in ("temperature", "top_p", "top_k", "stream", "chat_template_kwargs"):
        if key in body:
            out[key] = body[key]
    thinking = body.get("thinking")
    if "thinking" in body and _str(thinking, "type") == "enabled":
        n = thinking.get("budget_tokens", 10000)
        out["thinking_budget_tokens"] = n if isinstance(n, int) else 10000
    return out


def chat_body(raw: bytes):
    """The converted request as a ChatBody (field types checked as for /v1/chat/completions)."""
    oai = to_oai(S.decode_body(raw, object))
    try:
        return msgspec.convert(oai, S.ChatBody)
    except msgspec.ValidationError as e:
        raise S.invalid(S._validation_message(e))


async def messages(server, request):
    return await server._complete(request, "anthropic", body=chat_body(await request.body()))


async def count_tokens(server, request):
    """handle_count_tokens(ANTHROPIC): {"input_tokens": n} of the rendered prompt."""
    from .app import json_response
    body = chat_body(await request.body())
    return json_response({"input_tokens": len(server.tokenize(server._render(body)))})


# ----------------------------------------------------------------------------- responses
def _stop_reason(f: S.Final, msg: ChatMsg) -> str:
    if f.stop_type in ("word", "eos"):
        return "tool_use" if msg.tool_calls else "end_turn"
    return "max_tokens"


def _usage(f: S.Final, output: int) -> dict:
    cached = f.timings.cache_n
    return {"cache_read_input_tokens": cached, "input_tokens": f.n_prompt - cached,
            "output_tokens": output}


def _tool_use(call: dict) -> dict:
    fn = call["function"]
    try:
        args = json.loads(fn["arguments"])
    except ValueError:
        args = {}
    return {"type": "tool_use", "id": call["id"], "name": fn["name"],
            "input": args if isinstance(args, dict) else {}}


def final_body(r, f: S.Final, msg: ChatMsg) -> dict:
    """to_json_anthropic: thinking, text and tool_use blocks."""
    blocks = []
    if msg.reasoning_content:
        blocks.append({"type": "thinking", "thinking": msg.reasoning_content, "signature": ""})
    if msg.content:
        blocks.append({"type": "text", "text": msg.content})
    blocks += [_tool_use(c) for c in msg.tool_calls]
    return {"id": r.cid, "type": "message", "role": "assistant", "content": blocks,
            "model": r.model, "stop_reason": _stop_reason(f, msg),
            "stop_sequence": f.stopping_word or None, "usage": _usage(f, f.n_decoded)}


def sse_event(name: str, data) -> bytes:
    return (f"event: {name}\ndata: ".encode() + msgspec.json.encode(data) + b"\n\n")


class EventStream:
    """The Anthropic events of one streamed generation (content block indices: thinking 0,
    then text, then one block per tool call)."""

    def __init__(self, r):
        self.r = r
        self.started = False
        self.thinking = self.text = False

    def _start(self, n_prompt: int, n_cached: int) -> list[bytes]:
        if self.started:
            return []
        self.started = True
        return [sse_event("message_start", {"type": "message_start", "message": {
            "id": self.r.cid, "type": "message", "role": "assistant", "content": [],
            "model": self.r.model, "stop_reason": None, "stop_sequence": None,
            "usage": {"cache_read_input_tokens": n_cached, "input_tokens": n_prompt - n_cached,
                      "output_tokens": 0}}})]

    def _text_index(self) -> int:
        return 1 if self.thinking else 0

    def diffs(self, diffs: list[dict]) -> list[bytes]:
        out = []
        for d in diffs:
            if "reasoning_content" in d:
                if not self.thinking:
                    self.thinking = True
                    out.append(sse_event("content_block_start", {
                        "type": "content_block_start", "index": 0,
                        "content_block": {"type": "thinking", "thinking": ""}}))
                out.append(sse_event("content_block_delta", {
                    "type": "content_block_delta", "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": d["reasoning_content"]}}))
            elif "content" in d:
                if not self.text:
                    self.text = True
                    out.append(sse_event("content_block_start", {
                        "type": "content_block_start", "index": self._text_index(),
                        "content_block": {"type": "text", "text": ""}}))
                out.append(sse_event("content_block_delta", {
                    "type": "content_block_delta", "index": self._text_index(),
                    "delta": {"type": "text_delta", "text": d["content"]}}))
            elif "tool_call" in d:
                i, call = d["tool_call"]
                idx = int(self.thinking) + int(self.text) + i
                out.append(sse_event("content_block_start", {
                    "type": "content_block_start", "index": idx, "content_block": {
                        "type": "tool_use", "id": call["id"],
                        "name": call["function"]["name"]}}))
                if call["function"]["arguments"]:
                    out.append(sse_event("content_block_delta", {
                        "type": "content_block_delta", "index": idx, "delta": {
                            "type": "input_json_delta",
                            "partial_json": call["function"]["arguments"]}}))
        return out

    def partial(self, p: S.Partial, diffs: list[dict]) -> list[bytes]:
        return self._start(p.n_prompt, p.n_cached) + self.diffs(diffs)

    def final(self, f: S.Final, diffs: list[dict], msg: ChatMsg) -> list[bytes]:
        out = self._start(f.n_prompt, f.timings.cache_n) + self.diffs(diffs)
        if self.thinking:
            out.append(sse_event("content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "signature_delta", "signature": ""}}))
            out.append(sse_event("content_block_stop", {"type": "content_block_stop",
                                                        "index": 0}))
        if self.text:
            out.append(sse_event("content_block_stop", {"type": "content_block_stop",
                                                        "index": self._text_index()}))
        for i in range(len(msg.tool_calls)):
            out.append(sse_event("content_block_stop", {
                "type": "content_block_stop", "index": int(self.thinking) + int(self.text) + i}))
        out.append(sse_event("message_delta", {
            "type": "message_delta", "delta": {"stop_reason": _stop_reason(f, msg),
                                               "stop_sequence": f.stopping_word or None},
            "usage": {"output_tokens": f.n_decoded}}))
        out.append(sse_event("message_stop", {"type": "message_stop"}))
        return out


def error_event(err: ServerError) -> bytes:
    return sse_event("error", err.body()["error"])
