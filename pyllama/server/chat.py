"""OpenAI chat requests → prompt text, and Qwen2.5/Hermes `<tool_call>{json}</tool_call>` output →
OpenAI tool_calls. No I/O. llama.cpp counterpart: oaicompat_chat_params_parse (server-common.cpp)
and the Hermes 2 Pro parser of common/chat.cpp.
"""
from __future__ import annotations

import json
import random
import re
import string

from .schemas import ServerError, invalid

# oaicompat_content_load_media's part types and the media they name
MEDIA = {"image_url": "image", "input_audio": "audio", "input_video": "video",
         "video_url": "video"}


def no_projector(kind: str) -> ServerError:
    """A media part without a multimodal projector (pyllama has none): llama.cpp's
    runtime_error in oaicompat_content_load_media / tokenize_oai_content_array, a 500."""
    return ServerError(500, f"{MEDIA[kind]} input is not supported - hint: if this is "
                            "unexpected, you may need to provide the mmproj")

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"
_TOOL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)


def normalize_messages(messages) -> list[dict]:
    """Check the messages array as llama.cpp does; flatten text content parts; parse the JSON
    `arguments` strings of assistant tool calls into objects (templates expect objects)."""
    if messages is None or messages is ...:
        raise invalid("'messages' is required")
    if not isinstance(messages, list):
        raise invalid("Expected 'messages' to be an array")
    out = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise invalid("Missing 'role' in message")
        m = dict(m)
        if m["role"] == "assistant":
            if m.get("content") is None and not m.get("tool_calls"):
                raise invalid("Expected 'content' or 'tool_calls' in assistant message")
            m["tool_calls"] = [_parse_call_args(c) for c in m.get("tool_calls") or []] or None
            if m["tool_calls"] is None:
                m.pop("tool_calls")
        elif "content" not in m:
            raise invalid("Missing 'content'")
        check_parts(m.get("content"))
        m["content"] = _flatten(m.get("content"))
        out.append(m)
    return out


def check_parts(content) -> None:
    """oaicompat_content_load_media (and tokenize_oai_content_array), in part order: a media part needs a projector
    (no_projector, 500), any other part but text is a 400 "unsupported content[].type"."""
    if not isinstance(content, list):
        return
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in MEDIA:
            raise no_projector(kind)
        if kind != "text":
            raise invalid("unsupported content[].type")


def _flatten(content):
    """The text parts (checked by check_parts) joined by newlines."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid("Invalid 'content' type")
    return "\n".join(str(part.get("text", "")) for part in content)


def _parse_call_args(call):
    if not isinstance(call, dict):
        raise invalid("Invalid 'tool_calls' entry")
    call = dict(call)
    fn = dict(call.get("function") or {})
    args = fn.get("arguments")
    if isinstance(args, str):
        try:
            fn["arguments"] = json.loads(args)
        except ValueError:
            pass
    call["function"] = fn
    return call


def template_tools(tools: list) -> list:
    """The tools as the template sees them: llama.cpp parses them into (name, description,
    parameters) and writes {type, function: {name, description, parameters}} back
    (common_chat_tools_parse_oaicompat / _to_json_oaicompat): other fields (e.g. `strict`)
    are dropped, a missing description is ""."""
    out = []
    for t in tools:
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict):
            out.append(t)
            continue
        out.append({"type": "function", "function": {
            "name": fn.get("name"), "description": fn.get("description", ""),
            "parameters": fn.get("parameters", {})}})
    return out


def render_chat(template, body, kwargs: dict, strip_bos: str | None,
                prefill_assistant: bool = True) -> str:
    """Render the conversation with the model's chat template (pyllama.vocab.chat.ChatTemplate),
    continuing a final message as oaicompat_chat_params_parse decides: `continue_final_message`
    (true, "content" or "reasoning_content"), else with --prefill-assistant (the default) a
    trailing assistant message; continuing excludes `add_generation_prompt: true`."""
    from pyllama.errors import TemplateError
    raw_last = body.messages[-1] if isinstance(body.messages, list) and body.messages else None
    messages = normalize_messages(body.messages)
    tools = template_tools(body.tools) if body.tools and body.tool_choice != "none" else None
    extra = {**kwargs, **(body.chat_template_kwargs or {})}
    override = extra.pop("messages", None)   # llama.cpp: template kwargs replace its variables
    if override is not None and not isinstance(override, (list, dict)):
        raise invalid("chat template error: Expected iterable or object type in for loop: "
                      "messages")     # llama.cpp's jinja iterates no strings
    add_gen = True if body.add_generation_prompt is None else body.add_generation_prompt
    cont = body.continue_final_message
    cont = cont is True or cont in ("content", "reasoning_content")
    last_is_assistant = _is_role(messages, -1, "assistant")
    if not cont and prefill_assistant and last_is_assistant:
        if _is_role(messages, -2, "assistant"):
            raise invalid("Cannot have 2 or more assistant messages at the end of the list.")
        cont, add_gen = True, False
    if cont and add_gen:
        raise invalid("Cannot set both add_generation_prompt and continue_final_message to true.")
    if cont and last_is_assistant and messages[-1].get("tool_calls"):
        raise invalid("Cannot continue an assistant message that contains tool calls.")
    try:
        if override is not None:
            text = template.apply(override, add_generation_prompt=add_gen, tools=tools, **extra)
        elif cont and last_is_assistant:
            text = _render_prefilled(template, messages, tools, extra, raw_last)
        else:
            text = template.apply(messages, add_generation_prompt=add_gen, tools=tools, **extra)
    except TemplateError as e:     # llama.cpp: a template that fails on the request is a 400
        raise ServerError(400, str(e))
    if strip_bos and text.startswith(strip_bos):
        text = text[len(strip_bos):]
    return text


def generation_prompt(template, body, kwargs: dict) -> str:
    """common_chat_template_generation_prompt_impl: what add_generation_prompt appends to the
    request's conversation (the text after the longest common prefix of the two renderings,
    continuation off; a continued final message is left out). "" when the template fails."""
    messages = normalize_messages(body.messages)
    if _is_role(messages, -1, "assistant") and body.add_generation_prompt is not True:
        messages = messages[:-1]
    tools = template_tools(body.tools) if body.tools and body.tool_choice != "none" else None
    extra = {**kwargs, **(body.chat_template_kwargs or {})}
    extra.pop("messages", None)
    try:
        off = template.apply(messages, add_generation_prompt=False, tools=tools, **extra)
        on = template.apply(messages, add_generation_prompt=True, tools=tools, **extra)
    except Exception:  # noqa: BLE001 - only reported in generation_settings
        return ""
    n = 0
    while n < min(len(on), len(off)) and on[n] == off[n]:
        n += 1
    return on[n:]


def _is_role(messages: list, i: int, role: str) -> bool:
    return len(messages) >= abs(i) and messages[i]["role"] == role


def _render_prefilled(template, messages, tools, extra, raw_last) -> str:
    """Continue a trailing assistant message: render the rest with a generation prompt, then
    append the partial assistant content (text parts joined by a blank line, as
    common_chat_msg::render_content)."""
    content = raw_last.get("content") if isinstance(raw_last, dict) else None
    if isinstance(content, list):
        content = "\n\n".join(str(p.get("text", "")) for p in content
                              if isinstance(p, dict) and p.get("type") == "text")
    head = template.apply(messages[:-1], add_generation_prompt=True, tools=tools, **extra)
    return head + (content or "")


def new_call_id() -> str:
    return "".join(random.choices(string.ascii_letters + string.digits, k=32))


def _call(obj) -> dict | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", {})
    return {"type": "function", "id": new_call_id(), "function": {
        "name": obj["name"],
        "arguments": args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)}}


def parse_tool_calls(text: str) -> tuple[str, list[dict]]:
    """Split model output into (content, tool_calls) in OpenAI's format; a block whose body is
    not `{"name": ..., "arguments": ...}` JSON stays in the content."""
    calls, spans = [], []
    for m in _TOOL_RE.finditer(text):
        try:
            call = _call(json.loads(m.group(1)))
        except ValueError:
            continue
        if call is not None:
            calls.append(call)
            spans.append(m.span())
    if not calls:      # llama.cpp 0c1e570's parser takes no bare JSON without the tags
        return text, []
    content = text[:spans[0][0]]
    for (_, e), (s, _) in zip(spans, spans[1:] + [(len(text), 0)]):
        content += text[e:s]
    return content.strip(), calls


class ToolCallStream:
    """Streams content deltas while holding back anything that may be a `<tool_call>` block;
    the tool calls themselves are parsed once at the end."""

    def __init__(self):
        self.text, self.n_sent, self.in_call = "", 0, False

    def push(self, delta: str) -> str:
        self.text += delta
        if self.in_call:
            return ""
        i = self.text.find(TOOL_OPEN, self.n_sent)
        if i >= 0:
            self.in_call = True
            return self._emit(i)
        hold = 0
        for k in range(min(len(TOOL_OPEN) - 1, len(self.text)), 0, -1):
            if self.text.endswith(TOOL_OPEN[:k]):
                hold = k
                break
        return self._emit(len(self.text) - hold)

    def _emit(self, end: int) -> str:
        out = self.text[self.n_sent:end] if end > self.n_sent else ""
        self.n_sent = max(self.n_sent, end)
        return out

    def finish(self) -> tuple[str, list[dict]]:
        """(unsent content, tool calls) at the end of the stream."""
        content, calls = parse_tool_calls(self.text)
        if not calls:
            return self._emit(len(self.text)), []
        if self.n_sent == 0:
            return content, calls
        rest = content[self.n_sent:] if content.startswith(self.text[:self.n_sent]) else ""
        return rest, calls
