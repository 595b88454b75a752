"""Chat formats and handlers of llama-cpp-python 0.3.36 (llama_cpp/llama_chat_format.py).

A *chat formatter* turns OpenAI messages into a prompt (ChatFormatterResponse); a *chat
completion handler* runs it through `Llama.create_completion` and converts the completion (or
its stream chunks) into a chat completion. `Llama` uses, in order: its `chat_handler`, a handler
built from the GGUF's `tokenizer.chat_template*` (Jinja2ChatFormatter, rendered with jinja2 the
way llama-cpp-python renders it: sandboxed, trim/lstrip blocks, loop controls, `{% generation %}`
ignored, a tojson that keeps non-ASCII), or a registered format by name (`chat_format=`).

Registered here: llama-2, llama-3, alpaca, qwen, vicuna, chatml, mistral-instruct, zephyr,
gemma, openchat. llama-cpp-python's model-specific tool-calling handlers (functionary,
chatml-function-calling) and its multimodal handlers (llava, MTMD) are not provided: asking for
them raises LlamaChatCompletionHandlerNotFoundException with that reason.
"""
from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

from . import llama_grammar

# Templates whose exact text makes llama-cpp-python pick a built-in format instead of rendering the
# GGUF template (guess_chat_format_from_gguf_metadata).
CHATML_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}")
_MISTRAL_HEAD = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}")
_MISTRAL_TAIL = ("{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}"
                 "{% endif %}{% endfor %}")
MISTRAL_INSTRUCT_CHAT_TEMPLATE = (_MISTRAL_HEAD + "{{ message['content'] + eos_token + ' ' }}"
                                  + _MISTRAL_TAIL)
MIXTRAL_INSTRUCT_CHAT_TEMPLATE = (_MISTRAL_HEAD + "{{ message['content'] + eos_token}}"
                                  + _MISTRAL_TAIL)
LLAMA3_INSTRUCT_CHAT_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")


class LlamaChatCompletionHandlerNotFoundException(Exception):
    pass


class LlamaChatCompletionHandlerRegistry:
    """name -> handler (one registry per process, like llama-cpp-python's singleton)."""
    _instance = None

    def __new__(cls):
        if cls._instance is None:
            cls._instance = super().__new__(cls)
            cls._instance._handlers = {}
        return cls._instance

    def register_chat_completion_handler(self, name: str, handler, overwrite: bool = False):
        if not overwrite and name in self._handlers:
            raise ValueError(f"Formatter with name '{name}' is already registered. "
                             "Use `overwrite=True` to overwrite it.")
        self._handlers[name] = handler

    def unregister_chat_handler(self, name: str):
        if name not in self._handlers:
            raise ValueError(f"No formatter registered under the name '{name}'.")
        del self._handlers[name]

    def get_chat_completion_handler_by_name(self, name: str):
        try:
            return self._handlers[name]
        except KeyError:
            why = _NOT_PROVIDED.get(name)
            raise LlamaChatCompletionHandlerNotFoundException(
                f"Invalid chat handler: {name} ({why})" if why else
                f"Invalid chat handler: {name} (valid formats: {sorted(self._handlers)})"
            ) from None


_NOT_PROVIDED = {
    n: "llama-cpp-python's model-specific function-calling handler is not provided by pyllama; "
       "the model's own chat template (the default) renders `tools`"
    for n in ("functionary", "functionary-v1", "functionary-v2", "chatml-function-calling")}
_NOT_PROVIDED.update({n: "multimodal chat handlers are not provided by pyllama (text only)"
                      for n in ("llava-1-5", "llava-1-6", "moondream2", "nanollava",
                                "llama-3-vision-alpha", "minicpm-v-2.6", "qwen2.5-vl")})


def get_chat_completion_handler(name: str):
    return LlamaChatCompletionHandlerRegistry().get_chat_completion_handler_by_name(name)


def register_chat_completion_handler(name: str):
    def decorator(f):
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(name, f)
        return f
    return decorator


@dataclasses.dataclass
class ChatFormatterResponse:
    """The prompt a chat format makes, its stop string(s) and stopping criteria; added_special:
    the prompt already carries the special tokens (then no BOS is added when tokenizing)."""
    prompt: str
    stop: Optional[Union[str, List[str]]] = None
    stopping_criteria: Optional[Any] = None
    added_special: bool = False


class _IgnoreGenerationTags(jinja2.ext.Extension):
    """HuggingFace's `{% generation %}...{% endgeneration %}`: the body is rendered as is."""
    tags = {"generation"}

    def parse(self, parser):
        parser.stream.skip(1)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class Jinja2ChatFormatter:
    IgnoreGenerationTags = _IgnoreGenerationTags

    def __init__(self, template: str, eos_token: str, bos_token: str,
                 add_generation_prompt: bool = True, stop_token_ids: Optional[List[int]] = None):
        self.template, self.eos_token, self.bos_token = template, eos_token, bos_token
        self.add_generation_prompt = add_generation_prompt
        self.stop_token_ids = set(stop_token_ids) if stop_token_ids is not None else None
        env = ImmutableSandboxedEnvironment(
            loader=jinja2.BaseLoader(), trim_blocks=True, lstrip_blocks=True,
            extensions=[_IgnoreGenerationTags, jinja2.ext.loopcontrols])
        env.filters["tojson"] = self.tojson
        self._environment = env.from_string(template)

    @staticmethod
    def strftime_now(f: str) -> str:
        return datetime.now().strftime(f)

    @staticmethod
    def tojson(x: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
               separators: Optional[Tuple[str, str]] = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def __call__(self, *, messages, functions=None, function_call=None, tools=None,
                 tool_choice=None, **kwargs) -> ChatFormatterResponse:
        def raise_exception(message: str):
            raise ValueError(message)

        prompt = self._environment.render(
            messages=messages, eos_token=self.eos_token, bos_token=self.bos_token,
            raise_exception=raise_exception, add_generation_prompt=self.add_generation_prompt,
            functions=functions, function_call=function_call, tools=tools,
            tool_choice=tool_choice, strftime_now=self.strftime_now, **kwargs)
        criteria = None
        if self.stop_token_ids is not None:
            from .llama import StoppingCriteriaList
            ids = self.stop_token_ids
            criteria = StoppingCriteriaList([lambda tokens, logits: tokens[-1] in ids])
        return ChatFormatterResponse(prompt=prompt, stop=[self.eos_token],
                                     stopping_criteria=criteria, added_special=True)

    def to_chat_handler(self):
        return chat_formatter_to_chat_completion_handler(self)


# -- completion -> chat completion ----------------------------------------------------------------
def _logprobs_to_chat(logprobs):
    if logprobs is None:
        return None
    return {
        "content": [
            {"token": tok, "bytes": None, "logprob": lp,
             "top_logprobs": [{"token": t, "logprob": p, "bytes": None}
                              for t, p in top.items()]}
            for tok, lp, top in zip(logprobs["tokens"], logprobs["token_logprobs"],
                                    logprobs["top_logprobs"])],
        "refusal": None,
    }


def _completion_to_chat(completion: dict) -> dict:
    choice = completion["choices"][0]
    return {
        "id": "chat" + completion["id"], "object": "chat.completion",
        "created": completion["created"], "model": completion["model"],
        "choices": [{"index": 0,
                     "message": {"role": "assistant", "content": choice["text"]},
                     "logprobs": _logprobs_to_chat(choice["logprobs"]),
                     "finish_reason": choice["finish_reason"]}],
        "usage": completion["usage"],
    }


def _chunks_to_chat(chunks):
    for i, chunk in enumerate(chunks):
        head = {"id": "chat" + chunk["id"], "model": chunk["model"], "created": chunk["created"],
                "object": "chat.completion.chunk"}
        if i == 0:
            yield {**head, "choices": [{"index": 0, "delta": {"role": "assistant"},
                                        "logprobs": None, "finish_reason": None}]}
        choice = chunk["choices"][0]
        delta = {"content": choice["text"]} if choice["finish_reason"] is None else {}
        yield {**head, "choices": [{"index": 0, "delta": delta,
                                    "logprobs": _logprobs_to_chat(choice["logprobs"]),
                                    "finish_reason": choice["finish_reason"]}]}


def _completion_to_tool_call(tool_name: str, completion_or_chunks, stream: bool):
    """A forced tool (tool_choice naming a function): the completion is its arguments."""
    if not stream:
        c = completion_or_chunks
        text = c["choices"][0]["text"]
        call = {"name": tool_name, "arguments": text}
        return {
            "id": "chat" + c["id"], "object": "chat.completion", "created": c["created"],
            "model": c["model"],
            "choices": [{"index": 0,
                         "message": {"role": "assistant", "content": None,
                                     "function_call": call,
                                     "tool_calls": [{"id": "call__0_" + tool_name + "_" + c["id"],
                                                     "type": "function", "function": call}]},
                         "logprobs": _logprobs_to_chat(c["choices"][0]["logprobs"]),
                         "finish_reason": "tool_calls"}],
            "usage": c["usage"],
        }
    return _tool_call_stream(tool_name, completion_or_chunks)


def _tool_call_stream(tool_name: str, chunks):
    """Every completion chunk (the last, empty one too) becomes an arguments delta; a role chunk
    comes first and a finish_reason "tool_calls" chunk last."""
    head = tool_id = None
    for chunk in chunks:
        if head is None:
            head = {"id": "chat" + chunk["id"], "object": "chat.completion.chunk",
                    "created": chunk["created"], "model": chunk["model"]}
            tool_id = "call__0_" + tool_name + "_" + chunk["id"]
            yield {**head, "choices": [{"index": 0, "finish_reason": None, "logprobs": None,
                                        "delta": {"role": "assistant", "content": None,
                                                  "function_call": None, "tool_calls": None}}]}
        choice = chunk["choices"][0]
        args = choice["text"]
        yield {"id": "chat" + chunk["id"], "object": "chat.completion.chunk",
               "created": chunk["created"], "model": chunk["model"], "choices": [{
                   "index": 0, "finish_reason": None,
                   "logprobs": _logprobs_to_chat(choice["logprobs"]),
                   "delta": {"role": None, "content": None,
                             "function_call": {"name": tool_name, "arguments": args},
                             "tool_calls": [{"index": 0, "id": tool_id, "type": "function",
                                             "function": {"name": tool_name,
                                                          "arguments": args}}]}}]}
    if head is not None:
        yield {**head, "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": None,
                                    "delta": {"role": None, "content": None,
                                              "function_call": None, "tool_calls": None}}]}


def _grammar_for_response_format(response_format: dict, verbose: bool = False):
    if response_format["type"] != "json_object":
        return None
    if "schema" in response_format:
        try:
            return llama_grammar.LlamaGrammar.from_json_schema(
                json.dumps(response_format["schema"]), verbose=verbose)
        except llama_grammar.GrammarUnavailable:
            raise
        except Exception:
            pass
    return llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF, verbose=verbose)


def chat_formatter_to_chat_completion_handler(chat_formatter: Callable) -> Callable:
    def chat_completion_handler(*, llama, messages, functions=None, function_call=None,
                                tools=None, tool_choice=None, temperature: float = 0.2,
                                top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05,
                                typical_p: float = 1.0, stream: bool = False, stop=[],
                                seed=None, response_format=None, max_tokens=None,
                                presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                                repeat_penalty: float = 1.1, tfs_z: float = 1.0,
                                mirostat_mode: int = 0, mirostat_tau: float = 5.0,
                                mirostat_eta: float = 0.1, model=None, logits_processor=None,
                                grammar=None, logit_bias=None, logprobs=None,
                                top_logprobs=None, **kwargs):
        result = chat_formatter(messages=messages, functions=functions,
                                function_call=function_call, tools=tools,
                                tool_choice=tool_choice, **kwargs)
        prompt = llama.tokenize(result.prompt.encode("utf-8"), add_bos=not result.added_special,
                                special=True)
        if result.stop is not None:
            stop = [] if stop is None else [stop] if isinstance(stop, str) else stop
            stop = stop + (result.stop if isinstance(result.stop, list) else [result.stop])
        if response_format is not None and response_format["type"] == "json_object":
            grammar = _grammar_for_response_format(response_format, verbose=llama.verbose)
        if functions is not None:
            tools = [{"type": "function", "function": f} for f in functions]
        if function_call is not None:
            if function_call in ("none", "auto"):
                tool_choice = function_call
            if isinstance(function_call, dict) and "name" in function_call:
                tool_choice = {"type": "function", "function": {"name": function_call["name"]}}
        tool = None
        if tool_choice is not None and isinstance(tool_choice, dict) and tools is not None:
            name = tool_choice["function"]["name"]
            tool = next((t for t in tools if t["function"]["name"] == name), None)
            if tool is None:
                raise ValueError(f"Tool choice '{name}' not found in tools.")
            try:
                grammar = llama_grammar.LlamaGrammar.from_json_schema(
                    json.dumps(tool["function"]["parameters"]), verbose=llama.verbose)
            except llama_grammar.GrammarUnavailable:
                raise
            except Exception:
                grammar = llama_grammar.LlamaGrammar.from_string(llama_grammar.JSON_GBNF,
                                                                 verbose=llama.verbose)
        out = llama.create_completion(
            prompt=prompt, temperature=temperature, top_p=top_p, top_k=top_k, min_p=min_p,
            typical_p=typical_p, logprobs=top_logprobs if logprobs else None, stream=stream,
            stop=stop, seed=seed, max_tokens=max_tokens, presence_penalty=presence_penalty,
            frequency_penalty=frequency_penalty, repeat_penalty=repeat_penalty, tfs_z=tfs_z,
            mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
            model=model, logits_processor=logits_processor,
            stopping_criteria=result.stopping_criteria, grammar=grammar, logit_bias=logit_bias)
        if tool is not None:
            return _completion_to_tool_call(tool["function"]["name"], out, stream)
        return _chunks_to_chat(out) if stream else _completion_to_chat(out)

    return chat_completion_handler


def guess_chat_format_from_gguf_metadata(metadata: Dict[str, str]) -> Optional[str]:
    t = metadata.get("tokenizer.chat_template")
    if t is None:
        return None
    if t == CHATML_CHAT_TEMPLATE:
        return "chatml"
    if t in (MISTRAL_INSTRUCT_CHAT_TEMPLATE, MIXTRAL_INSTRUCT_CHAT_TEMPLATE):
        return "mistral-instruct"
    if t == LLAMA3_INSTRUCT_CHAT_TEMPLATE:
        return "llama-3"
    return None


# -- the built-in formats ---------------------------------------------------------------------------
def _system_message(messages) -> str:
    for m in messages:
        if m["role"] == "system":
            return m["content"] or ""
    return ""


def _map_roles(messages, role_map: Dict[str, str]) -> List[Tuple[str, Optional[str]]]:
    return [(role_map[m["role"]], m["content"] if isinstance(m["content"], str) else None)
            for m in messages if m["role"] in role_map]


def _llama2_style(system: str, msgs, sep: str, sep2: str) -> str:
    seps = (sep, sep2)
    out = system + sep
    for i, (role, text) in enumerate(msgs):
        if system and i == 0:
            out += (text or "") + seps[i % 2]
        elif text:
            out += role + text + " " + seps[i % 2]
        else:
            out += role + " "
    return out


def _colon_two(system: str, msgs, sep: str, sep2: str) -> str:
    seps = (sep, sep2)
    out = system + sep
    for i, (role, text) in enumerate(msgs):
        out += role + ": " + text + seps[i % 2] if text else role + ":"
    return out


def _no_colon_single(system: str, msgs, sep: str) -> str:
    out = system
    for role, text in msgs:
        out += role + text + sep if text else role
    return out


def _chatml_style(system: str, msgs, sep: str) -> str:
    out = "" if system == "" else system + sep + "\n"
    for role, text in msgs:
        out += role + "\n" + text + sep + "\n" if text else role + "\n"
    return out


def register_chat_format(name: str):
    def decorator(f):
        LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
            name, chat_formatter_to_chat_completion_handler(f))
        return f
    return decorator


@register_chat_format("llama-2")
def format_llama2(messages, **kwargs) -> ChatFormatterResponse:
    system = _system_message(messages)
    if system:
        system = f"[INST] <<SYS>>\n{system}\n<</SYS>>"
    msgs = _map_roles(messages, {"user": "<s>[INST]", "assistant": "[/INST]"})
    return ChatFormatterResponse(prompt=_llama2_style(system, msgs, " ", "</s>") + "[/INST]")


@register_chat_format("llama-3")
def format_llama3(messages, **kwargs) -> ChatFormatterResponse:
    roles = {r: f"<|start_header_id|>{r}<|end_header_id|>\n\n"
             for r in ("system", "user", "assistant")}
    msgs = _map_roles(messages, roles) + [(roles["assistant"], None)]
    return ChatFormatterResponse(prompt=_no_colon_single("", msgs, "<|eot_id|>"),
                                 stop="<|eot_id|>")


@register_chat_format("alpaca")
def format_alpaca(messages, **kwargs) -> ChatFormatterResponse:
    msgs = _map_roles(messages, {"user": "### Instruction", "assistant": "### Response"})
    return ChatFormatterResponse(prompt=_colon_two(_system_message(messages), msgs, "\n\n",
                                                   "</s>"))


@register_chat_format("qwen")
def format_qwen(messages, **kwargs) -> ChatFormatterResponse:
    system = "<|im_start|>system\n" + (_system_message(messages) or
                                       "You are a helpful assistant.")
    roles = {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"}
    msgs = _map_roles(messages, roles) + [(roles["assistant"], None)]
    return ChatFormatterResponse(prompt=_chatml_style(system, msgs, "<|im_end|>"),
                                 stop="<|endoftext|>")


@register_chat_format("vicuna")
def format_vicuna(messages, **kwargs) -> ChatFormatterResponse:
    system = ("A chat between a curious user and an artificial intelligence assistant. The "
              "assistant gives helpful, detailed, and polite answers to the user's questions.")
    msgs = _map_roles(messages, {"user": "USER", "assistant": "ASSISTANT"}) + [("ASSISTANT",
                                                                                None)]
    return ChatFormatterResponse(prompt=_colon_two(system, msgs, " ", "</s>"))


@register_chat_format("zephyr")
def format_zephyr(messages, **kwargs) -> ChatFormatterResponse:
    system = "<|system|>\n" + _system_message(messages)
    roles = {"user": "<|user|>\n", "assistant": "<|assistant|>\n"}
    msgs = _map_roles(messages, roles) + [(roles["assistant"], None)]
    return ChatFormatterResponse(prompt=_chatml_style(system, msgs, "</s>"), stop="</s>")


@register_chat_format("chatml")
def format_chatml(messages, **kwargs) -> ChatFormatterResponse:
    system = "<|im_start|>system\n" + _system_message(messages)
    roles = {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"}
    msgs = _map_roles(messages, roles) + [(roles["assistant"], None)]
    return ChatFormatterResponse(prompt=_chatml_style(system, msgs, "<|im_end|>"),
                                 stop="<|im_end|>")


@register_chat_format("mistral-instruct")
def format_mistral_instruct(messages, **kwargs) -> ChatFormatterResponse:
    prompt = ""
    for m in messages:
        if m["role"] == "user" and isinstance(m["content"], str):
            prompt += "[INST] " + m["content"]
        elif m["role"] == "assistant" and m["content"] is not None:
            prompt += " [/INST]" + m["content"] + "</s>"
    return ChatFormatterResponse(prompt=prompt + " [/INST]", stop="</s>")


@register_chat_format("openchat")
def format_openchat(messages, **kwargs) -> ChatFormatterResponse:
    system = _system_message(messages) + "<|end_of_turn|>"
    roles = {"user": "GPT4 Correct User: ",
             "assistant": "<|end_of_turn|>GPT4 Correct Assistant: "}
    msgs = _map_roles(messages, roles) + [(roles["assistant"], None)]
    return ChatFormatterResponse(prompt=_chatml_style(system, msgs, "<|end_of_turn|>"),
                                 stop="<|end_of_turn|>")


@register_chat_format("gemma")
def format_gemma(messages, **kwargs) -> ChatFormatterResponse:
    roles = {"user": "<start_of_turn>user\n", "assistant": "<start_of_turn>model\n"}
    msgs = _map_roles(messages, roles) + [(roles["assistant"], None)]
    return ChatFormatterResponse(prompt=_no_colon_single("", msgs, "<end_of_turn>\n"),
                                 stop="<end_of_turn>\n")
