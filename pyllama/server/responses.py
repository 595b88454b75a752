"""OpenAI Responses: `/v1/responses` and `/responses` (+ streaming events) and
`/v1/responses/input_tokens`, mapped onto the chat completion path as llama.cpp does.

llama.cpp counterpart: server_chat_convert_responses_to_chatcmpl (server-chat.cpp),
server_task_result_cmpl_final::to_json_oaicompat_resp[_stream] and
server_task_result_cmpl_partial::to_json_oaicompat_resp (server-task.cpp), format_oai_resp_sse.
"""
from __future__ import annotations

import random
import string
import time

import msgspec

from . import schemas as S
from .chat_parse import ChatMsg
from .schemas import ServerError, invalid


def random_string(n: int = 32) -> str:
    return "".join(random.choices(string.ascii_letters + string.digits, k=n))


def _is_str(d, key) -> bool:
    return isinstance(d, dict) and isinstance(d.get(key), str)


def _is_list(d, key) -> bool:
    return isinstance(d, dict) and isinstance(d.get(key), list)


def _input_message(item: dict) -> dict:
    parts = []
    for p in item["content"]:
        kind = p.get("type", "") if isinstance(p, dict) else ""
        if kind == "input_text":
            if "text" not in p:
                raise invalid("'Input text' requires 'text'")
            parts.append({"text": p["text"], "type": "text"})
        elif kind == "input_image":
            if "image_url" not in p:
                raise invalid("'image_url' is required")
            parts.append({"image_url": {"url": p["image_url"]}, "type": "image_url"})
        elif kind == "input_file":
            raise invalid("'input_file' is not supported by llamacpp at this moment")
        else:
            raise invalid("'type' must be one of 'input_text', 'input_image', or 'input_file'")
    msg = {k: v for k, v in item.items() if k not in ("type", "status")}
    msg["content"] = parts
    return msg


def _output_parts(item: dict) -> list:
    parts = []
    if isinstance(item.get("content"), str):
        parts.append({"text": item["content"], "type": "text"})
    elif isinstance(item.get("content"), list):
        for p in item["content"]:
            kind = p.get("type", "") if isinstance(p, dict) else ""
            if kind in ("output_text", "input_text"):
                if not _is_str(p, "text"):
                    raise invalid("'Output text' requires 'text'")
                parts.append({"text": p["text"], "type": "text"})
            elif kind == "refusal":
                if not _is_str(p, "refusal"):
                    raise invalid("'Refusal' requires 'refusal'")
                parts.append({"refusal": p["refusal"], "type": "refusal"})
            else:
                raise invalid("'type' must be one of 'output_text' or 'refusal'")
    return parts


def _tool_output(item: dict) -> dict:
    out = item["output"]
    if isinstance(out, str):
        return {"content": out, "role": "tool", "tool_call_id": item["call_id"]}
    parts = []
    for p in out:
        if not isinstance(p, dict) or "type" not in p:
            raise invalid("Output of tool call missing 'type' field")
        p = dict(p)
        if p["type"] not in ("input_text", "input_image"):
            raise invalid("Output of tool call should be 'Input text' or 'Input image'")
        if p["type"] == "input_text":
            p["type"] = "text"
        else:
            if "image_url" not in p:
                raise invalid("'image_url' is required")
            p["type"], p["image_url"] = "image_url", {"url": p["image_url"]}
        parts.append(p)
    return {"content": parts, "role": "tool", "tool_call_id": item["call_id"]}


def to_chat(body) -> dict:
    """server_chat_convert_responses_to_chatcmpl: a Responses request -> a chat request."""
    if not isinstance(body, dict) or "input" not in body:
        raise invalid("'input' is required")
    prev = body.get("previous_response_id")
    if isinstance(prev, str) and prev:
        raise invalid("llama.cpp does not support 'previous_response_id'.")
    value = body["input"]
    out = {k: v for k, v in body.items() if k not in ("input", "instructions")}
    msgs: list[dict] = []
    if "instructions" in body:
        ins = body["instructions"]
        msgs.append({"role": "system", "content": ins if isinstance(ins, str) else ""})
    if isinstance(value, str):
        msgs.append({"role": "user", "content": value})
    elif isinstance(value, list):
        for item in value:
            item = dict(item) if isinstance(item, dict) else {}
            merge = bool(msgs) and msgs[-1].get("role") == "assistant"
            if _is_str(item, "content"):
                item["content"] = [{"text": item["content"], "type": "input_text"}]
            if _is_list(item, "content") and item.get("role") in ("user", "system", "developer"):
                msgs.append(_input_message(item))
            elif item.get("role") == "assistant" and item.get("type") == "message":
                parts = _output_parts(item)
                if merge:
                    prev_msg = msgs[-1]
                    if not isinstance(prev_msg.get("content"), list):
                        prev_msg["content"] = []
                    prev_msg["content"] += parts
                else:
                    msg = {k: v for k, v in item.items() if k not in ("type", "status")}
                    msg["content"] = parts
                    msgs.append(msg)
            elif all(_is_str(item, k) for k in ("arguments", "call_id", "name", "type")) and \
                    item["type"] == "function_call":
                call = {"function": {"arguments": item["arguments"], "name": item["name"]},
                        "id": item["call_id"], "type": "function"}
                if merge:
                    msgs[-1].setdefault("tool_calls", []).append(call)
                else:
                    msgs.append({"role": "assistant", "tool_calls": [call]})
            elif _is_str(item, "call_id") and (_is_str(item, "output") or
                                               _is_list(item, "output")) and \
                    item.get("type") == "function_call_output":
                msgs.append(_tool_output(item))
            elif _is_list(item, "summary") and item.get("type") == "reasoning":
                content = item.get("content")
                if not isinstance(content, list):
                    raise invalid("item['content'] is not an array")
                if not content:
                    raise invalid("item['content'] is empty")
                if not _is_str(content[0], "text"):
                    raise invalid("item['content']['text'] is not a string")
                if merge:
                    msgs[-1]["reasoning_content"] = content[0]["text"]
                else:
                    msgs.append({"role": "assistant", "content": [],
                                 "reasoning_content": content[0]["text"]})
            else:
                raise invalid("Cannot determine type of 'item'")
    else:
        raise invalid("'input' must be a string or array of objects")
    out["messages"] = msgs
    if "tools" in body:
        if not isinstance(body["tools"], list):
            raise invalid("'tools' must be an array of objects")
        tools = []
        for t in body["tools"]:
            if not isinstance(t, dict) or t.get("type") != "function":
                continue          # non-function Responses tools have no chat equivalent
            fn = {k: v for k, v in t.items() if k != "type"}
            fn.setdefault("strict", True)
            tools.append({"type": "function", "function": fn})
        out.pop("tools")
        if tools:
            out["tools"] = tools
    if "max_output_tokens" in body:
        out.pop("max_output_tokens")
        out["max_tokens"] = body["max_output_tokens"]
    if "reasoning" in body:
        r = body["reasoning"]
        if isinstance(r, dict) and "effort" in r:
            out["reasoning_effort"] = r["effort"]
        out.pop("reasoning")
    return out


def chat_body(raw: bytes):
    chat = to_chat(S.decode_body(raw, object))
    chat.pop("reasoning_effort", None)
    try:
        return msgspec.convert(chat, S.ChatBody)
    except msgspec.ValidationError as e:
        raise invalid(S._validation_message(e))


async def create(server, request):
    return await server._complete(request, "responses", body=chat_body(await request.body()))


async def input_tokens(server, request):
    from .app import json_response
    body = chat_body(await request.body())
    return json_response({"input_tokens": len(server.tokenize(server._render(body))),
                          "object": "response.input_tokens"})


# ----------------------------------------------------------------------------- results
def _usage(f: S.Final) -> dict:
    return {"input_tokens": f.n_prompt, "output_tokens": f.n_decoded,
            "total_tokens": f.n_decoded + f.n_prompt,
            "input_tokens_details": {"cached_tokens": f.timings.cache_n}}


def _call_item(call: dict, status: str = "completed", args: str | None = None) -> dict:
    fn = call["function"]
    return {"id": "fc_" + call["id"], "type": "function_call", "status": status,
            "arguments": fn["arguments"] if args is None else args,
            "call_id": "call_" + call["id"], "name": fn["name"]}


def _reasoning_item(rid: str, text: str) -> dict:
    return {"id": rid, "summary": [], "type": "reasoning",
            "content": [{"text": text, "type": "reasoning_text"}], "encrypted_content": ""}


def _text_part(text: str) -> dict:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def final_body(r, f: S.Final, msg: ChatMsg) -> dict:
    """to_json_oaicompat_resp: reasoning, message and function_call output items."""
    output = []
    if msg.reasoning_content:
        output.append({**_reasoning_item("rs_" + random_string(), msg.reasoning_content),
                       "status": "completed"})
    if msg.content:
        output.append({"content": [_text_part(msg.content)], "id": "msg_" + random_string(),
                       "role": "assistant", "status": "completed", "type": "message"})
    output += [_call_item(c) for c in msg.tool_calls]
    t = int(time.time())
    return {"completed_at": t, "created_at": t, "id": r.resp_id, "model": r.model,
            "object": "response", "output": output, "status": "completed", "usage": _usage(f)}


def sse_event(name: str, data) -> bytes:
    return f"event: {name}\ndata: ".encode() + msgspec.json.encode(data) + b"\n\n"


class EventStream:
    """The Responses events of one streamed generation."""

    def __init__(self, r):
        self.r = r
        self.created = self.thinking = self.text = False
        self.rs_id, self.msg_id = "rs_" + random_string(), "msg_" + random_string()

    def _resp(self, status: str) -> dict:
        return {"id": self.r.resp_id, "object": "response", "status": status}

    def _open(self) -> list[tuple]:
        if self.created:
            return []
        self.created = True
        return [("response.created", {"type": "response.created",
                                      "response": self._resp("in_progress")}),
                ("response.in_progress", {"type": "response.in_progress",
                                          "response": self._resp("in_progress")})]

    @staticmethod
    def _encode(events: list[tuple], timings=None, progress=None) -> list[bytes]:
        """llama.cpp puts a partial result's `timings` (timings_per_token) and
        `prompt_progress` (return_progress) on the data of its last event."""
        if events and timings is not None:
            events[-1][1]["timings"] = timings.to_json()
        if events and progress is not None:
            events[-1][1]["prompt_progress"] = progress.to_json()
        return [sse_event(n, d) for n, d in events]

    def progress(self, p: S.Progress) -> list[bytes]:
        """A prompt-progress result: the opening events the first time, then
        response.in_progress, carrying prompt_progress."""
        events = self._open() or [("response.in_progress", {
            "type": "response.in_progress", "response": self._resp("in_progress")})]
        return self._encode(events, p.timings, p)

    def diffs(self, diffs: list[dict]) -> list[tuple]:
        out = []
        for d in diffs:
            if "reasoning_content" in d:
                if not self.thinking:
                    self.thinking = True
                    out.append(("response.output_item.added", {
                        "type": "response.output_item.added", "item": {
                            "id": self.rs_id, "summary": [], "type": "reasoning",
                            "content": [], "encrypted_content": "", "status": "in_progress"}}))
                out.append(("response.reasoning_text.delta", {
                    "type": "response.reasoning_text.delta", "delta": d["reasoning_content"],
                    "item_id": self.rs_id}))
            elif "content" in d:
                if not self.text:
                    self.text = True
                    out.append(("response.output_item.added", {
                        "type": "response.output_item.added", "item": {
                            "content": [], "id": self.msg_id, "role": "assistant",
                            "status": "in_progress", "type": "message"}}))
                    out.append(("response.content_part.added", {
                        "type": "response.content_part.added", "item_id": self.msg_id,
                        "part": {"type": "output_text", "text": ""}}))
                out.append(("response.output_text.delta", {
                    "type": "response.output_text.delta", "item_id": self.msg_id,
                    "delta": d["content"]}))
            elif "tool_call" in d:
                _, call = d["tool_call"]
                out.append(("response.output_item.added", {
                    "type": "response.output_item.added",
                    "item": _call_item(call, "in_progress", "")}))
                if call["function"]["arguments"]:
                    out.append(("response.function_call_arguments.delta", {
                        "type": "response.function_call_arguments.delta",
                        "delta": call["function"]["arguments"], "item_id": "fc_" + call["id"]}))
        return out

    def partial(self, p: S.Partial, diffs: list[dict]) -> list[bytes]:
        return self._encode(self._open() + self.diffs(diffs), p.timings)

    def final(self, f: S.Final, diffs: list[dict], msg: ChatMsg) -> list[bytes]:
        out = [sse_event(n, d) for n, d in self._open() + self.diffs(diffs)]
        output = []
        if msg.reasoning_content:
            item = _reasoning_item(self.rs_id, msg.reasoning_content)
            out.append(sse_event("response.output_item.done", {
                "type": "response.output_item.done", "item": item}))
            output.append(item)
        if msg.content:
            out.append(sse_event("response.output_text.done", {
                "type": "response.output_text.done", "item_id": self.msg_id,
                "text": msg.content}))
            part = _text_part(msg.content)
            out.append(sse_event("response.content_part.done", {
                "type": "response.content_part.done", "item_id": self.msg_id, "part": part}))
            item = {"type": "message", "status": "completed", "id": self.msg_id,
                    "content": [part], "role": "assistant"}
            out.append(sse_event("response.output_item.done", {
                "type": "response.output_item.done", "item": item}))
            output.append(item)
        for c in msg.tool_calls:
            item = _call_item(c)
            out.append(sse_event("response.output_item.done", {
                "type": "response.output_item.done", "item": item}))
            output.append(item)
        out.append(sse_event("response.completed", {
            "type": "response.completed", "response": {
                "id": self.r.resp_id, "object": "response", "created_at": int(time.time()),
                "status": "completed", "model": self.r.model, "output": output,
                "usage": _usage(f)}, "timings": f.timings.to_json()}))
        return out


def error_event(err: ServerError) -> bytes:
    """A stream error: llama.cpp sends `data: {"error": ...}` (format_oai_sse)."""
    return b"data: " + msgspec.json.encode(err.body()) + b"\n\n"
