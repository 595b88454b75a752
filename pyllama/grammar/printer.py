"""llama_grammar_parser::print: rules back to text, as llama.cpp prints a parsed grammar."""
from pyllama.grammar.parser import (
    ALT, CHAR, CHAR_ALT, CHAR_ANY, CHAR_NOT, CHAR_RNG_UPPER, END, RULE_REF, TOKEN, TOKEN_NOT)

_CHAR_KINDS = (CHAR, CHAR_NOT, CHAR_ALT, CHAR_RNG_UPPER, CHAR_ANY)


def _ch(c: int) -> str:
    return chr(c) if 0x20 <= c <= 0x7F else f"<U+{c:04X}>"


def format_rules(rules, symbol_ids) -> str:
    names = {v: k for k, v in symbol_ids.items()}
    lines = []
    for rid, rule in enumerate(rules):
        out = [f"{names[rid]} ::= "]
        for i, (kind, value) in enumerate(rule[:-1]):
            if kind == ALT:
                out.append("| ")
            elif kind == RULE_REF:
                out.append(f"{names[value]} ")
            elif kind == CHAR:
                out.append("[" + _ch(value))
            elif kind == CHAR_NOT:
                out.append("[^" + _ch(value))
            elif kind == CHAR_RNG_UPPER:
                out.append("-" + _ch(value))
            elif kind == CHAR_ALT:
                out.append(_ch(value))
            elif kind == CHAR_ANY:
                out.append(".")
            elif kind == TOKEN:
                out.append(f"<[{value}]> ")
            elif kind == TOKEN_NOT:
                out.append(f"!<[{value}]> ")
            if kind in _CHAR_KINDS and rule[i + 1][0] not in (CHAR_ALT, CHAR_RNG_UPPER, CHAR_ANY):
                out.append("] ")
        lines.append("".join(out))
    return "\n".join(lines) + "\n"
