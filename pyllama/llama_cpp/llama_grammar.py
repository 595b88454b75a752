"""LlamaGrammar (llama-cpp-python's llama_cpp/llama_grammar.py): a GBNF grammar for `Llama`'s
sampler chain, from GBNF text, a file, or a JSON schema.

The grammar engine is pyllama's (pyllama.grammar: llama.cpp's GBNF parser and matcher, and its
grammar sampler). A grammar is checked when it is made (llama-cpp-python only finds out when
sampling starts); one with `<token>` references is checked against the vocabulary then.
`from_json_schema` converts with llama.cpp's own converter (json-schema-to-grammar.cpp), which
llama-cpp-python's Python port follows except for whitespace: llama.cpp allows up to two newlines
and 20 spaces or tabs between JSON tokens, llama-cpp-python's port one optional space.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Union

from ..errors import PyllamaError

LLAMA_GRAMMAR_DEFAULT_ROOT = "root"


class GrammarUnavailable(PyllamaError):
    pass


def _engine():
    """pyllama's grammar module, or GrammarUnavailable."""
    try:
        return importlib.import_module("pyllama.grammar")
    except ImportError:
        raise GrammarUnavailable("LlamaGrammar: grammars are not available in this pyllama "
                                 "build yet (no grammar engine, pyllama.grammar)") from None


class LlamaGrammar:
    def __init__(self, *args, _grammar: str, **kwargs):
        eng = _engine()
        self._grammar = _grammar
        self._root = LLAMA_GRAMMAR_DEFAULT_ROOT
        try:
            eng.Grammar.from_gbnf(_grammar, self._root)
        except eng.GrammarError:
            if "<" not in _grammar:       # else it may only need the vocabulary's tokens
                raise

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        return cls(_grammar=grammar)

    @classmethod
    def from_file(cls, file: Union[str, Path], verbose: bool = True) -> "LlamaGrammar":
        try:
            with open(file) as f:
                grammar = f.read()
        except Exception as err:
            raise Exception(f"from_file: error reading grammar file: {err}")
        if grammar:
            return cls.from_string(grammar, verbose=verbose)
        raise ValueError("from_file: error parsing grammar file: params_grammer is empty")

    @classmethod
    def from_json_schema(cls, json_schema: str, verbose: bool = True) -> "LlamaGrammar":
        return cls.from_string(json_schema_to_gbnf(json_schema), verbose=verbose)

    def matcher(self, vocab):
        """A fresh grammar state over `vocab` for one generation (llama_sampler_init_grammar):
        apply(logits) masks what it rejects, accept(token) advances it."""
        from pyllama.grammar.sampler import GrammarSampler
        return GrammarSampler(_engine().Grammar.from_gbnf(self._grammar, self._root,
                                                          token_id=_token_id(vocab)), vocab)


def _token_id(vocab):
    def token_id(text: str):
        ids = vocab.tokenize(text, False, True)
        return ids[0] if len(ids) == 1 else None
    return token_id


def json_schema_to_gbnf(schema: str, prop_order=None) -> str:
    """The GBNF of a JSON schema (text), with llama.cpp's converter; prop_order (property names
    first in this order) is not supported."""
    if prop_order:
        raise GrammarUnavailable("json_schema_to_gbnf: prop_order is not supported by pyllama")
    return _engine().json_schema_to_gbnf(schema)


# llama.cpp's grammars/json.gbnf, the grammar llama-cpp-python uses for response_format
# {"type": "json_object"} without a schema
JSON_GBNF = r"""
root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws

object ::=
  "{" ws (
            string ":" ws value
    ("," ws string ":" ws value)*
  )? "}" ws

array  ::=
  "[" ws (
            value
    ("," ws value)*
  )? "]" ws

string ::=
  "\"" (
    [^"\\\x7F\x00-\x1F] |
    "\\" (["\\bfnrt] | "u" [0-9a-fA-F]{4}) # escapes
  )* "\"" ws

number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws

# Optional space: by convention, applied in this grammar after literal chars when allowed
ws ::= | " " | "\n" [ \t]{0,20}
"""
