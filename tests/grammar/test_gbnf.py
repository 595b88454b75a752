"""GBNF parser and matcher against llama.cpp's semantics (src/llama-grammar.cpp).

Expected values: the cases of llama.cpp's tests/test-grammar-integration.cpp and its grammars/
folder, recorded by make_llamacpp_cases.py into tests/data/grammar/llamacpp-cases.json, and
llama.cpp's error texts (llama_grammar_parser)."""
import json
import os
import re

import pytest

import pyllama
from pyllama.errors import PyllamaError
from pyllama.grammar import Grammar, GrammarError
from pyllama.grammar.matcher import decode_utf8
from pyllama.grammar.parser import (
    ALT, CHAR, CHAR_ALT, CHAR_ANY, CHAR_NOT, CHAR_RNG_UPPER, END, RULE_REF, TOKEN, TOKEN_NOT)

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "grammar", "llamacpp-cases.json")
CASES = json.load(open(DATA, encoding="utf-8"))


def pieces(s):
    """A recorded string: text (invalid UTF-8 read as U+FFFD, as the C++ test's parse_tokens
    does) and token ids."""
    parts = [s] if isinstance(s, str) else s
    return [p["token"] if isinstance(p, dict) else re.sub("[\udc80-\udcff]", "\ufffd", p)
            for p in parts]


GRAMMAR_CASES = [c for c in CASES["integration"] if c["kind"] == "grammar"]


@pytest.mark.parametrize("case", GRAMMAR_CASES, ids=[c["desc"][:40] for c in GRAMMAR_CASES])
def test_llamacpp_integration_grammars(case):
    g = Grammar.from_gbnf(case["body"])
    for s in case["passing"]:
        assert g.matches(pieces(s)), s
    for s in case["failing"]:
        assert not g.matches(pieces(s)), s


def test_public_api():
    assert pyllama.Grammar is Grammar and pyllama.GrammarError is GrammarError
    assert issubclass(GrammarError, PyllamaError) and issubclass(GrammarError, ValueError)
    assert callable(pyllama.json_schema_to_gbnf)


# -- every construct ---------------------------------------------------------------------------
def rules_of(text):
    return Grammar.from_gbnf(text).rules


def test_literals_and_escapes():
    r = rules_of(r'root ::= "a\x41\u00e9\U0001F600\t\r\n\\\"\[\]\-" "ü"')
    assert [v for _, v in r[0][:-1]] == [97, 0x41, 0xE9, 0x1F600, 9, 13, 10, 92, 34, 91, 93, 45, 0xFC]
    assert all(t == CHAR for t, _ in r[0][:-1])


def test_char_classes():
    r = rules_of(r'root ::= [a-zA_] [^"\\x] .')[0]
    assert r == [(CHAR, 97), (CHAR_RNG_UPPER, 122), (CHAR_ALT, 65), (CHAR_ALT, 95),
                 (CHAR_NOT, 34), (CHAR_ALT, 92), (CHAR_ALT, 120), (CHAR_ANY, 0), (END, 0)]
    g = Grammar.from_gbnf(r'root ::= [a-c-] [^a-c] .')
    assert g.matches("b-") is False and g.matches("bdé") and g.matches("-zz")
    assert not g.matches("bbz")
    # a '-' before ']' is a literal
    assert Grammar.from_gbnf("root ::= [a-]").matches("-")


def test_alternatives_groups_and_rule_refs():
    g = Grammar.from_gbnf('root ::= ("ab" | x)+ "!"\nx ::= "c" |')
    assert g.matches("ab!") and g.matches("abcab!") and g.matches("!")
    assert not g.matches("a!") and not g.matches("ab")


@pytest.mark.parametrize("rep,ok,bad", [
    ("*", ["", "a", "aaaa"], ["b"]),
    ("+", ["a", "aaa"], [""]),
    ("?", ["", "a"], ["aa"]),
    ("{3}", ["aaa"], ["aa", "aaaa"]),
    ("{2,}", ["aa", "aaaaa"], ["a"]),
    ("{1,3}", ["a", "aaa"], ["", "aaaa"]),
    ("{0,2}", ["", "aa"], ["aaa"]),
    ("{ 2 , 3 }", ["aa", "aaa"], ["a"]),
])
def test_repetitions(rep, ok, bad):
    g = Grammar.from_gbnf(f'root ::= "a"{rep}')
    assert all(g.matches(s) for s in ok)
    assert not any(g.matches(s) for s in bad)


def test_repetition_rule_names_and_format():
    # generated rules are named <rule>_<symbol id>, in llama.cpp's order
    g = Grammar.from_gbnf('root ::= ("ab" [c-d])* x{2,3}\nx ::= [^z] | .')
    assert g.format() == ("root ::= root_2 x x root_4 \n"
                          "root_1 ::= [a] [b] [c-d] \n"
                          "root_2 ::= root_1 root_2 | \n"
                          "x ::= [^z] | .] \n"
                          "root_4 ::= x | \n")


def test_comments_and_newlines():
    g = Grammar.from_gbnf('# c\nroot ::= "a" # trailing\r\n\r\nb ::= "x"\n')
    assert g.matches("a") and not g.matches("ax")
    # outside a group a newline ends the rule: the next line must start a new one
    with pytest.raises(GrammarError, match='expecting name at "b"'):
        Grammar.from_gbnf('root ::= "a"\n  "b"?\n')
    g = Grammar.from_gbnf('root ::= (\n  "a" # in a group newlines are space\n  "b"\n)')
    assert g.matches("ab")


def test_token_references():
    r = rules_of("root ::= <[5]> !<[7]> <[0]>")[0]
    assert r == [(TOKEN, 5), (TOKEN_NOT, 7), (TOKEN, 0), (END, 0)]
    ids = {"<think>": 42}
    g = Grammar.from_gbnf('root ::= <think> "x" !<think>', token_id=ids.get)
    assert g.rules[0][:3] == [(TOKEN, 42), (CHAR, 120), (TOKEN_NOT, 42)]
    with pytest.raises(GrammarError, match="no vocab to parse token at <think>"):
        Grammar.from_gbnf("root ::= <think>")
    with pytest.raises(GrammarError, match="invalid token '<nope>'"):
        Grammar.from_gbnf("root ::= <nope>", token_id=ids.get)


def test_custom_root():
    g = Grammar.from_gbnf('\n        foobar ::= "foobar"\n    ', root="foobar")
    assert g.matches("foobar")
    with pytest.raises(GrammarError, match="grammar does not contain a 'root' symbol"):
        Grammar.from_gbnf('foobar ::= "foobar"')
    with pytest.raises(GrammarError, match="grammar does not contain a 'nonexistent' symbol"):
        Grammar.from_gbnf('root ::= "foobar"', root="nonexistent")


# -- errors, with llama.cpp's wording ------------------------------------------------------------
@pytest.mark.parametrize("text,message,pos", [
    ("root ::= x", "Undefined rule identifier 'x'", 9),
    ('root ::= "a', "unexpected end of input", 11),
    ("root ::= [a", "unexpected end of input", 11),
    (r'root ::= "\q"', r'unknown escape at \q"', 10),
    (r'root ::= "\x4"', 'expecting 2 hex chars at 4"', 12),
    ('root ::= ("a"', "expecting ')' at ", 13),
    ("root ::= *", "expecting preceding item to */+/?/{ at *", 9),
    ('root ::= "a"{x}', "expecting an int at x}", 13),
    ('root ::= "a"{1 x}', "expecting ',' at x}", 15),
    ('root ::= "a"{1,x}', "expecting '}' at x}", 15),
    ("root := x", "expecting ::= at := x", 5),
    ("::= x", "expecting name at ::= x", 0),
    ('root ::= "a" )', "expecting newline or end at )", 13),
    ("root ::= <[12]", "expecting '>' at ", 14),
    ("root ::= <[x]>", "expecting integer at x]>", 11),
    ('root ::= "a"{2001}', "number of repetitions exceeds sane defaults", 12),
    ('root ::= ("a"{0,50}){0,50}',
     "number of rules that are going to be repeated multiplied by the new repetition", 20),
])
def test_parse_errors(text, message, pos):
    with pytest.raises(GrammarError) as e:
        Grammar.from_gbnf(text)
    assert str(e.value).startswith(message)
    assert e.value.position == pos
    assert e.value.line == 1 and e.value.column == pos + 1


def test_error_line_and_column():
    with pytest.raises(GrammarError) as e:
        Grammar.from_gbnf('root ::= a\na ::= "x" | [y')
    assert (e.value.line, e.value.column) == (2, 15)
    assert e.value.describe() == "unexpected end of input (line 2, column 15)"


@pytest.mark.parametrize("text", [
    'root ::= "a" | root "a"',
    '\n        root ::= asdf\n        asdf ::= "a" | asdf "a"\n        ',
    '\n        root ::= asdf\n        asdf ::= "a" | foo "b"\n        foo ::= "c" | asdf "d" | "e"',
    '\n        root ::= asdf\n        asdf ::= "a" | foo "b"\n'
    '        foo ::= "c" | empty asdf "d" | "e"\n        empty ::= "blah" | ',
])
def test_left_recursion(text):
    # the cases of test-grammar-integration.cpp's test_failure_left_recursion
    with pytest.raises(GrammarError, match="unsupported grammar, left recursion detected for "
                                           "nonterminal at index"):
        Grammar.from_gbnf(text)


def test_missing_reference():
    # test_failure_missing_reference
    with pytest.raises(GrammarError, match="Undefined rule identifier 'numero'"):
        Grammar.from_gbnf('root ::= expr\n        expr ::= term ("+" term)*\n'
                          '        term ::= numero\n        number ::= [0-9]+')


# -- pathological grammars: bounded or a clear error ------------------------------------------
def test_huge_upper_bound_is_unbounded_like_llamacpp():
    # llama.cpp turns an upper bound above 2000 into "no upper bound"
    g = Grammar.from_gbnf('root ::= "a"{0,100000}')
    assert len(g.rules) == 2 and g.matches("a" * 3000) and g.matches("")


def test_deep_nesting_fails_clearly():
    with pytest.raises(GrammarError, match="groups nested deeper than"):
        Grammar.from_gbnf("root ::= " + "(" * 5000 + '"a"' + ")" * 5000)
    assert Grammar.from_gbnf("root ::= " + "(" * 150 + '"a"' + ")" * 150).matches("a")


def test_max_below_min():
    with pytest.raises(GrammarError, match=r"repetition \{5,2\}"):
        Grammar.from_gbnf('root ::= "a"{5,2}')


def test_long_recursive_input_is_linear_enough():
    g = Grammar.from_gbnf('root ::= "(" root ")" | "x"')
    assert g.matches("(" * 300 + "x" + ")" * 300)
    assert not g.matches("(" * 300 + "x" + ")" * 299)


# -- llama.cpp's grammars/ -----------------------------------------------------------------------
EXAMPLES = {
    "json.gbnf": (['{"a": [1, -2.5e12, "x\\n\\u00e9"], "b": {"c": null}}', '{}', '{ "k" : true }'],
                  ['{"a" 1}', '[1]', '{"a": 01}', '{"a": "\x01"}']),
    "json_arr.gbnf": (['[\n{"a": 1}]', '[\n]', '[\n1,\n 2]'], ['[1]', '{}', '[\n1,2]']),
    "arithmetic.gbnf": (["1+2=3\n", "a+b*2 = (c-1)\n"], ["1+2\n", "=3\n", "1+2=\n"]),
    "c.gbnf": (["int main(){return 0;}", "float f(int x){x = x+1;if(x<2){}}"],
               ["int main() {}", "main(){}"]),
    "chess.gbnf": (["1. e4 e5\n2. Nf3 Nc6\n", "1. e4 e5\n2. O-O-O Qxd8+\n"],
                   ["1. e4 e5\n", "1. e9 e5\n2. a3 a4\n"]),
    "english.gbnf": (["Hello, world!", "a b\tc"], ["", "héllo", "a  b"]),
    "japanese.gbnf": (["こんにちは、世界", "カタカナ ひらがな"], ["hello", "日本 "]),
    "list.gbnf": (["- a\n- b c\n"], ["- a", "* a\n", "- a\u2028b\n"]),
}


@pytest.mark.parametrize("name", sorted(CASES["grammars"]))
def test_llamacpp_grammars_folder(name):
    g = Grammar.from_gbnf(CASES["grammars"][name])
    ok, bad = EXAMPLES[name]
    for s in ok:
        assert g.matches(s), s
    for s in bad:
        assert not g.matches(s), s


# -- partial UTF-8 (decode_utf8 with a carried partial sequence) ---------------------------------
def test_decode_utf8_partial_sequences():
    e = "é".encode()  # c3 a9
    assert decode_utf8(e[:1]) == ([], (0x03, 1))
    assert decode_utf8(e[1:], (0x03, 1)) == ([0xE9], (0, 0))
    assert decode_utf8(b"\xa9") == ([], (0, -1))           # stray continuation byte
    assert decode_utf8(b"a\xe2\x82") == ([97], (0x82 & 0x3F | (0x2 << 6), 1))
    assert decode_utf8(b"\x41", (0x03, 1)) == ([], (0, -1))  # continuation expected
    assert decode_utf8(b"ab\0cd") == ([97, 98], (0, 0))     # a C string ends at NUL


def test_tokens_split_inside_a_code_point():
    g = Grammar.from_gbnf('root ::= "é" [ぁ-ゟ]')
    c = g.compiled
    stacks, partial = g.initial_state()
    data = "éぁ".encode()
    # every piece boundary, as tokens would split the bytes
    assert c.token_allowed(stacks, partial, 1, data[:1])
    assert not c.token_allowed(stacks, partial, 1, "è".encode()[:1] + b"\xa8")
    for cut in range(1, len(data)):
        s, p = c.accept_token(stacks, partial, 1, data[:cut])
        assert s, cut
        assert c.token_allowed(s, p, 2, data[cut:])
        s, p = c.accept_token(s, p, 2, data[cut:])
        assert any(len(x) == 0 for x in s) and p == (0, 0)
    # a partial sequence that cannot complete to an allowed char is rejected
    assert not c.token_allowed(stacks, partial, 1, "ぁ".encode()[:2])


def test_end_only_where_the_grammar_may_end():
    g = Grammar.from_gbnf('root ::= "ab" "c"?')
    c = g.compiled
    s, p = g.initial_state()
    assert not any(len(x) == 0 for x in s)
    s, p = c.accept_token(s, p, 1, b"ab")
    assert any(len(x) == 0 for x in s)  # may end here, or take "c"
    assert c.token_allowed(s, p, 2, b"c") and not c.token_allowed(s, p, 2, b"d")
