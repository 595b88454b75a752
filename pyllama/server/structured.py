"""Structured output for the completion APIs: `grammar`, `json_schema`, `response_format` and
forced tool calls become the request's grammar (llama.cpp: tools/server/server-schema.cpp's
json_schema/grammar field, server-common.cpp's oaicompat_chat_params_parse).

- /completion: `grammar` (GBNF) or `json_schema` (converted; the grammar wins when both are
  given, as in llama.cpp's field handler); an empty schema means any object; `grammar_lazy`
  with `grammar_triggers` (server_grammar_trigger JSON) makes the grammar lazy.
- chat (and any completion without grammar/json_schema): `response_format` {"type": "text" | "json_object" (optional
  "schema") | "json_schema" ({"json_schema": {"schema": ..., "strict": ...}})}; `json_schema`
  and `grammar` together are an error ("Cannot use both json_schema and grammar").
- chat with tools: tool_choice "required" (or a named function) constrains the output to the
  Hermes 2 Pro tool-call syntax of the bundled Qwen template, `<tool_call>\\n{"name": ...,
  "arguments": {...}}\\n</tool_call>`, one call or several (parallel_tool_calls or not, as
  llama.cpp's grammar for this format); with
  "auto" the same grammar is lazy, triggered by the word `<tool_call>`. Llama 3.x templates: the
  JSON call their prompt asks for; Functionary v3.2: llama.cpp's grammar for `name\n{args}`
  after the prompt's `>>>` (server/functionary.py), lazy on the pattern `>>>(?!all)` for "auto".
Bad grammars and schemas are 400 errors, with the failing position where there is one.
"""
from pyllama.errors import GrammarError
from pyllama.grammar import Grammar
from pyllama.grammar.json_schema import Builder, Converter, _SchemaFail

from . import functionary
from .schemas import invalid, tool_functions

TOOL_OPEN, TOOL_CLOSE = "<tool_call>", "</tool_call>"


def _schema_grammar(schema, field: str = "json_schema") -> str:
    if isinstance(schema, dict) and not schema:
        schema = {"type": "object"}   # an absent or empty schema means any object
    try:
        from pyllama.grammar import json_schema_to_gbnf
        return json_schema_to_gbnf(schema)
    except GrammarError as e:
        raise invalid(f"\"{field}\": {e}") from None


def check_grammar(text: str) -> None:
    """A GBNF text the server would fail to parse: 400, llama.cpp's 'Failed to parse grammar'
    with the failing position. `<token>` references are resolved later, with the vocabulary."""
    try:
        Grammar.from_gbnf(text, token_id=lambda t: 0)
    except GrammarError as e:
        raise invalid(f"Failed to parse grammar: {e.describe()}") from None


def response_format_schema(rf, json_schema):
    """oaicompat_chat_params_parse's response_format handling: the schema to use, or None."""
    if rf is None:
        return json_schema
    if not isinstance(rf, dict):
        raise invalid("response_format must be an object")
    kind = rf.get("type") or ""
    if not isinstance(kind, str):
        raise invalid("response_format.type must be a string")
    if kind == "json_object":
        if "schema" in rf or json_schema is None or json_schema == {}:
            return rf.get("schema", {}) if rf.get("schema") is not None else {}
        return json_schema
    if kind == "json_schema":
        wrapper = rf.get("json_schema") or {}
        if not isinstance(wrapper, dict):
            raise invalid("response_format.json_schema must be an object")
        return wrapper.get("schema", {}) if wrapper.get("schema") is not None else {}
    if kind and kind != "text":
        raise invalid("response_format type must be one of \"text\" or \"json_object\", but got: "
                      + kind)
    return json_schema


def tool_call_grammar(tools: list, only: str | None = None, family: str = "hermes") -> str:
    """The grammar of Hermes 2 Pro tool calls over these tools (all, or just `only`): one or
    more `<tool_call>` blocks whatever parallel_tool_calls says, as llama.cpp's grammar for
    this per-call format is `(tool-call space)+` either way (its parser reads every block;
    tests/data/parallel-calls-llamacpp.json). For the Llama 3.x templates (family "llama3")
    the call is the JSON object their prompt asks for and tool_calls.parse_llama3 reads,
    `{"name": ..., "parameters": {...}}` (llama.cpp's autoparser: JSON_NATIVE, args field
    "parameters"), one call."""
    llama3 = family == "llama3"
    conv = Converter()
    alts = []
    for name, fn in tool_functions(tools, only):
        params = fn.get("parameters") or {"type": "object"}
        args = "parameters" if llama3 else "arguments"
        schema = {"type": "object", "properties": {"name": {"const": name}, args: params},
                  "required": ["name", args], "additionalProperties": False}
        try:
            node = Builder(schema).build()
        except _SchemaFail as e:
            raise invalid(f"tool '{name}': JSON schema conversion failed: {e}") from None
        alts.append(conv.visit(node, f"{name}-call"))
    if not alts:
        raise invalid(f"tool_choice names a function that is not in 'tools': {only}")
    if conv.errors:
        raise invalid("JSON schema conversion failed:\n" + "\n".join(conv.errors))
    if llama3:
        conv.add_rule("root", f'( {" | ".join(alts)} )')
        return conv.format_grammar()
    conv.add_rule("tool-call", f'"{TOOL_OPEN}\\n" space ( {" | ".join(alts)} ) space '
                               f'"\\n{TOOL_CLOSE}"')
    conv.add_rule("root", 'tool-call ( "\\n" tool-call )*')
    return conv.format_grammar()


_TRIGGER_TYPES = {0: "token", 1: "word", 2: "pattern", 3: "pattern_full"}


def request_triggers(raw) -> tuple:
    """`grammar_triggers` (server_grammar_trigger JSON: {"type": 0 token | 1 word | 2 pattern |
    3 pattern_full, "value": str, "token": id}) -> SamplerParams.grammar_triggers."""
    out = []
    for t in raw or []:
        if not isinstance(t, dict) or t.get("type") not in _TRIGGER_TYPES:
            raise invalid("grammar_triggers: each entry needs a type 0-3 and a value")
        kind = _TRIGGER_TYPES[t["type"]]
        if kind == "token":
            if not isinstance(t.get("token"), int):
                raise invalid("grammar_triggers: a token trigger needs an integer 'token'")
            out.append(("token", t["token"]))
        else:
            if not isinstance(t.get("value"), str):
                raise invalid("grammar_triggers: a trigger needs a string 'value'")
            out.append((kind, t["value"]))
    return tuple(out)


def constrain(body, sampling, *, chat: bool, oai: bool, family: str = "hermes"):
    """The SamplerParams with the request's grammar (unchanged when it has none); `family`:
    the chat template's tool-call family (tool_calls.family)."""
    grammar = body.grammar if isinstance(getattr(body, "grammar", None), str) else None
    if getattr(body, "grammar", None) is not None and grammar is None:
        raise invalid("\"grammar\" must be a string")
    json_schema = getattr(body, "json_schema", None)
    rf = getattr(body, "response_format", None)
    lazy = bool(getattr(body, "grammar_lazy", None))
    triggers = request_triggers(getattr(body, "grammar_triggers", None))
    if lazy and grammar and not triggers:
        raise invalid("Error: no triggers set for lazy grammar!")
    if chat or oai:
        if json_schema is not None and grammar:
            raise invalid("Cannot use both json_schema and grammar")
        json_schema = response_format_schema(rf, json_schema)
    tools = getattr(body, "tools", None) or []
    choice = getattr(body, "tool_choice", None)
    if chat and tools and choice != "none":
        if body.grammar is not None:
            raise invalid("Cannot use custom grammar constraints with tools.")
        only = None
        if isinstance(choice, dict):
            only = (choice.get("function") or {}).get("name")
            if not isinstance(only, str):
                raise invalid("Invalid tool_choice: expected {\"type\": \"function\", "
                              "\"function\": {\"name\": ...}}")
        elif choice not in (None, "auto", "required"):
            raise invalid(f"Invalid tool_choice: {choice}")
        if json_schema is None and family == functionary.FAMILY:
            # llama.cpp's grammar for this format: forced when required, lazy on `>>>(?!all)`
            grammar, lazy, triggers = functionary.grammar(
                tools, "auto" if choice in (None, "auto") else "required",
                getattr(body, "parallel_tool_calls", None) is True, only)
        elif json_schema is None:
            # "auto" keeps the lazy Hermes grammar (its trigger word is `<tool_call>`)
            grammar = tool_call_grammar(tools, only,
                                        "hermes" if choice in (None, "auto") else family)
            if choice in (None, "auto"):
                lazy, triggers = True, (("word", TOOL_OPEN),)
            json_schema = None
    if grammar:
        check_grammar(grammar)
    elif json_schema is not None:
        grammar = _schema_grammar(json_schema)
    if not grammar:
        return sampling
    import dataclasses
    return dataclasses.replace(sampling, grammar=grammar, grammar_lazy=lazy,
                               grammar_triggers=triggers)
