"""Chat templates: tokenizer.chat_template rendered with jinja2 (docs/architecture.md, "Files and formats").

Mirrors llama.cpp's `--jinja` path (common/chat.cpp + minja): an
ImmutableSandboxedEnvironment with trim_blocks/lstrip_blocks and loop controls, the extras
templates call (raise_exception, strftime_now, a tojson that keeps key order and non-ASCII),
ChatML when the model has no template, tool-call arguments given as JSON strings turned into
objects when the template only renders objects (minja's requires_object_arguments), and
llama.cpp's built-in template names for --chat-template.
"""
from __future__ import annotations

import functools
import json
from datetime import datetime

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import TemplateError

CHATML = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\\n' -}}\n"
    "{%- endif -%}")

# llama.cpp's built-in formats (src/llama-chat.cpp), written as templates
BUILTIN = {
    "chatml": CHATML,
    "llama3": (
        "{%- for m in messages -%}"
        "{{- '<|start_header_id|>' + m.role + '<|end_header_id|>\\n\\n' + m.content | trim"
        " + '<|eot_id|>' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}"
        "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}"),
    "gemma": (
        "{%- set ns = namespace(sys='') -%}"
        "{%- for m in messages -%}"
        "{%- if m.role == 'system' -%}{%- set ns.sys = ns.sys + m.content | trim -%}"
        "{%- else -%}"
        "{%- set role = 'model' if m.role == 'assistant' else m.role -%}"
        "{{- '<start_of_turn>' + role + '\\n' -}}"
        "{%- if ns.sys and role != 'model' -%}{{- ns.sys + '\\n\\n' -}}"
        "{%- set ns.sys = '' -%}{%- endif -%}"
        "{{- m.content | trim + '<end_of_turn>\\n' -}}"
        "{%- endif -%}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<start_of_turn>model\\n' -}}{%- endif -%}"),
    "phi3": (
        "{%- for m in messages -%}"
        "{{- '<|' + m.role + '|>\\n' + m.content + '<|end|>\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"),
    "zephyr": (
        "{%- for m in messages -%}"
        "{{- '<|' + m.role + '|>\\n' + m.content + '<|endoftext|>\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"),
    "phi4": (
        "{%- for m in messages -%}"
        "{{- '<|im_start|>' + m.role + '<|im_sep|>' + m.content + '<|im_end|>' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant<|im_sep|>' -}}{%- endif -%}"),
    "falcon3": (
        "{%- for m in messages -%}{{- '<|' + m.role + '|>\\n' + m.content + '\\n' -}}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- '<|assistant|>\\n' -}}{%- endif -%}"),
    "granite": (
        "{%- for m in messages -%}"
        "{{- '<|start_of_role|>' + m.role + '<|end_of_role|>' + m.content"
        " + '<|end_of_text|>\\n' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}"
        "{{- '<|start_of_role|>assistant<|end_of_role|>' -}}{%- endif -%}"),
    "llama4": (
        "{%- for m in messages -%}"
        "{{- '<|header_start|>' + m.role + '<|header_end|>\\n\\n' + m.content | trim"
        " + '<|eot|>' -}}"
        "{%- endfor -%}"
        "{%- if add_generation_prompt -%}"
        "{{- '<|header_start|>assistant<|header_end|>\\n\\n' -}}{%- endif -%}"),
    "vicuna": (
        "{%- for m in messages -%}"
        "{%- if m.role == 'system' -%}{{- m.content + '\\n' -}}"
        "{%- elif m.role == 'user' -%}{{- 'USER: ' + m.content + '\\n' -}}"
        "{%- elif m.role == 'assistant' -%}{{- 'ASSISTANT: ' + m.content + '</s>\\n' -}}"
        "{%- endif -%}{%- endfor -%}"
        "{%- if add_generation_prompt -%}{{- 'ASSISTANT:' -}}{%- endif -%}"),
}

_NEEDLE = "argument_needle"
_PROBE_ARGS = {_NEEDLE: "print('Hello, World!')"}


def _tojson(value, indent=None, separators=None, sort_keys=False, ensure_ascii=False):
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys,
                      ensure_ascii=ensure_ascii)


def _raise(message):
    raise TemplateError(f"chat template raised: {message}")


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


def _as_string(value) -> str:
    """llama.cpp's value::as_string for the scalars (common/jinja/value.h): a float is "%f"
    without its trailing zeros (one kept after the point), a bool True/False."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, float):
        out = ("%f" % value).rstrip("0")
        return out + "0" if out.endswith(".") else out
    if isinstance(value, (int, str)):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not a string value")


def _add(left, right):
    """`+` as llama.cpp's jinja runtime does it (common/jinja/runtime.cpp,
    binary_expression::execute_impl): an undefined or none operand beside a string is the empty
    string (its concat workaround), beside anything else an error; numbers and lists add as in
    Python; a string beside a number or bool concatenates its as_string."""
    l_null = left is None or isinstance(left, jinja2.Undefined)
    r_null = right is None or isinstance(right, jinja2.Undefined)
    if l_null or r_null:
        if (l_null and isinstance(right, str)) or (r_null and isinstance(left, str)):
            return ("" if l_null else left) + ("" if r_null else right)
        what = "undefined values" if isinstance(left, jinja2.Undefined) \
            or isinstance(right, jinja2.Undefined) else "null values"
        raise TypeError(f"Cannot perform operation + on {what}")
    if isinstance(left, str) != isinstance(right, str):
        return _as_string(left) + _as_string(right)
    return left + right


def _listing(fn):
    @functools.wraps(fn)      # keeps jinja_pass_arg (the filter's context/environment argument)
    def listing(*args, **kwargs):
        return list(fn(*args, **kwargs))
    return listing


class ChatEnvironment(ImmutableSandboxedEnvironment):
    """jinja2 with llama.cpp's `+` (see _add); template_caps' probe environment extends it."""
    intercepted_binops = frozenset(["+"])

    def call_binop(self, context, operator, left, right):
        if operator == "+":
            return _add(left, right)
        return super().call_binop(context, operator, left, right)


def _environment() -> ImmutableSandboxedEnvironment:
    # ChainableUndefined: `messages[0]['role']` on an empty list is undefined, not an error, as
    # in llama.cpp's jinja runtime (common/jinja: a missing item or attribute is undefined)
    env = ChatEnvironment(trim_blocks=True, lstrip_blocks=True,
                          extensions=["jinja2.ext.loopcontrols"],
                          undefined=jinja2.ChainableUndefined)
    env.filters["tojson"] = _tojson
    # llama.cpp's map/select/reject/selectattr/rejectattr give arrays, jinja2's generators
    # (which tojson cannot serialise and which print as "<generator ...>")
    for name in ("map", "select", "reject", "selectattr", "rejectattr"):
        env.filters[name] = _listing(env.filters[name])
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled chat template. `source=None` gives llama.cpp's fallback (ChatML)."""

    def __init__(self, source: str | None, bos_token: str = "", eos_token: str = ""):
        self.source = CHATML if source is None else source
        self.bos_token, self.eos_token = bos_token, eos_token
        try:
            self._template = _environment().from_string(self.source)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"chat template syntax error, line {e.lineno}: {e.message}") \
                from None
        self.requires_object_arguments = self._probe_object_arguments()

    @classmethod
    def for_model(cls, vocab, override: str | None = None, jinja: bool = True):
        """The model's template, or `override`: a built-in NAME or jinja source. Without jinja
        (llama.cpp's --no-jinja) the format is llama.cpp's built-in one named by `override` or
        detected from the template's source (llm_chat_detect_template), ChatML when none is
        (pyllama.vocab.chat_builtin). A built-in name other than those in BUILTIN uses that
        format with jinja too."""
        from .chat_builtin import FORMATS, BuiltinTemplate, detect
        if not jinja:
            name = detect(override if override is not None else (vocab.chat_template or ""))
            return BuiltinTemplate(name if name in FORMATS else "chatml")
        if override is not None and override not in BUILTIN and override in FORMATS:
            return BuiltinTemplate(override)
        source = vocab.chat_template if override is None else BUILTIN.get(override, override)
        return cls(source, _text(vocab, vocab.bos), _text(vocab, vocab.eos))

    def apply(self, messages: list[dict], add_generation_prompt: bool = True, tools=None,
              **kwargs) -> str:
        """Render a conversation (OpenAI-style message dicts) to the prompt text. Extra
        variables (kwargs) override the built-in ones, as llama.cpp's extra_context does
        (common/chat.cpp: common_chat_template_direct_apply_impl); a requested generation prompt
        stays on."""
        if self.requires_object_arguments and isinstance(messages, list):
            messages = [_object_arguments(m) if isinstance(m, dict) else m for m in messages]
        ctx = dict(messages=messages, bos_token=self.bos_token, eos_token=self.eos_token)
        if tools:
            ctx["tools"] = tools
        ctx["add_generation_prompt"] = False
        ctx.update(kwargs)
        if add_generation_prompt:
            ctx["add_generation_prompt"] = True
        return self._render(ctx)

    def _render(self, ctx: dict) -> str:
        try:
            return self._template.render(**ctx)
        except TemplateError:
            raise
        except jinja2.TemplateError as e:
            raise TemplateError(f"chat template error: {type(e).__name__}: {e}") from None
        except Exception as e:  # templates can fail in any way (bad types in messages...)
            raise TemplateError(f"chat template failed: {type(e).__name__}: {e}") from None

    def _probe_object_arguments(self) -> bool:
        """minja's capability probe: tool-call arguments render only when given as objects."""
        def render(args) -> str:
            call = {"id": "call_1___", "type": "function",
                    "function": {"arguments": args, "name": "ipython"}}
            msgs = [{"role": "user", "content": "Hey"},
                    {"role": "assistant", "content": None, "tool_calls": [call]}]
            try:
                return self._template.render(messages=msgs, add_generation_prompt=False,
                                             bos_token="", eos_token="")
            except Exception:
                return ""

        def shows(out: str) -> bool:
            return f'"{_NEEDLE}":' in out or f"'{_NEEDLE}':" in out

        return not shows(render(json.dumps(_PROBE_ARGS))) and shows(render(_PROBE_ARGS))


def _text(vocab, id: int) -> str:
    return vocab.token_text(id) if id is not None and id >= 0 else ""


def _object_arguments(message: dict) -> dict:
    calls = message.get("tool_calls")
    if not calls:
        return message
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(args, str):
            try:
                call = {**call, "function": {**fn, "arguments": json.loads(args)}}
            except ValueError:
                pass
        out.append(call)
    return {**message, "tool_calls": out}
