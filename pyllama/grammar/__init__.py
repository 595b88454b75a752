"""Structured output: GBNF grammars with llama.cpp's language and matching semantics, JSON schema
to grammar, and the grammar sampler (layer L6, beside sampling; depends only on numpy).

Glossary
  rules      a grammar's parsed rules, llama.cpp's llama_grammar_element lists (parser.py)
  stack      one path through the pushdown automaton: element positions, top last (matcher.py)
  state      the stacks plus the partial UTF-8 sequence left by the last token
  filter     the token filter over a whole vocabulary, a byte trie walked by a cached DFA over
             grammar states (_filter.pyx)

Use:
  g = Grammar.from_gbnf('root ::= "yes" | "no"')
  g.matches("yes")                               # True
  g = Grammar.from_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}})
  gbnf = json_schema_to_gbnf(schema)
"""
import json

from pyllama.grammar.errors import GrammarError
from pyllama.grammar.matcher import Compiled, decode_utf8
from pyllama.grammar.parser import left_recursion, parse

__all__ = ["Grammar", "GrammarError", "json_schema_to_gbnf"]


class Grammar:
    """A parsed, checked GBNF grammar. Build with `from_gbnf` or `from_json_schema`."""

    def __init__(self, text: str, root: str, rules, symbol_ids):
        self.text, self.root = text, root
        self.rules, self.symbol_ids = rules, symbol_ids
        self.compiled = Compiled(rules, symbol_ids[root])

    @classmethod
    def from_gbnf(cls, text: str, root: str = "root", token_id=None) -> "Grammar":
        """Parse and check as llama_grammar_init_impl does: syntax, undefined rules, the root
        symbol, left recursion. `token_id(text) -> id | None` resolves `<token>` references
        (the text with its angle brackets; None when it is not exactly one token)."""
        if not isinstance(text, str):
            raise GrammarError("grammar must be a string")
        rules, symbol_ids = parse(text, token_id)
        if root not in symbol_ids:
            raise GrammarError(f"grammar does not contain a '{root}' symbol")
        bad = left_recursion(rules)
        if bad is not None:
            raise GrammarError(
                f"unsupported grammar, left recursion detected for nonterminal at index {bad}")
        return cls(text, root, rules, symbol_ids)

    @classmethod
    def from_json_schema(cls, schema) -> "Grammar":
        """The grammar of a JSON schema (a dict, or JSON text), as llama.cpp converts it."""
        return cls.from_gbnf(json_schema_to_gbnf(schema))

    def with_tokens(self, token_id) -> "Grammar":
        """The same grammar text parsed again with a vocabulary for its `<token>` references."""
        return Grammar.from_gbnf(self.text, self.root, token_id)

    def initial_state(self):
        """(stacks, partial UTF-8) at the start, as llama_grammar_init_impl leaves them."""
        return self.compiled.initial_stacks(), (0, 0)

    def matches(self, text) -> bool:
        """Whether the whole text is a complete match, as llama.cpp's grammar integration test
        decides it (match_string): each code point is accepted as one piece of token id 0;
        a list may mix text with int token ids (a piece '<[id]>'). Independent of any
        tokenizer."""
        c = self.compiled
        stacks, partial = self.initial_state()
        items = [text] if isinstance(text, str) else list(text)
        for item in items:
            pieces = [(item, f"<[{item}]>".encode())] if isinstance(item, int) else \
                [(0, ch.encode("utf-8", "surrogatepass")) for ch in item]
            for tok, piece in pieces:
                stacks, partial = c.accept_token(stacks, partial, tok, piece)
                if not stacks:
                    return False
        return any(len(s) == 0 for s in stacks)

    def format(self) -> str:
        """The rules as llama_grammar_parser::print writes them (one per line)."""
        from pyllama.grammar.printer import format_rules
        return format_rules(self.rules, self.symbol_ids)

    def __repr__(self) -> str:
        return f"Grammar(root={self.root!r}, rules={len(self.rules)})"


def json_schema_to_gbnf(schema) -> str:
    """llama.cpp's json_schema_to_grammar (common/json-schema-to-grammar.cpp): the GBNF text."""
    from pyllama.grammar.json_schema import convert
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise GrammarError(f"invalid JSON schema: {e}") from None
    return convert(schema)
