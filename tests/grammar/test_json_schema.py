"""JSON schema -> GBNF against llama.cpp: the expected grammars of its
tests/test-json-schema-to-grammar.cpp and the schema cases of test-grammar-integration.cpp
(recorded in tests/data/grammar/llamacpp-cases.json), and random strings of each generated
grammar validated against the schema with the `jsonschema` package."""
import json
import os
import re
import zlib

import jsonschema
import pytest

from pyllama.grammar import Grammar, GrammarError, json_schema_to_gbnf
from tests.grammar.walk import random_strings

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "grammar", "llamacpp-cases.json")
CASES = json.load(open(DATA, encoding="utf-8"))


def trim(s: str) -> str:
    """The C++ test's trim(): outer whitespace, and leading whitespace of every line."""
    return re.sub(r"(^|\n)[ \t]+", r"\1", s.strip(" \n\r\t"))


SCHEMA_CASES = CASES["json_schema"]


@pytest.mark.parametrize("case", SCHEMA_CASES, ids=[c["name"][:50] for c in SCHEMA_CASES])
def test_llamacpp_expected_grammars(case):
    schema = json.loads(case["schema"])
    if case["status"] == "FAILURE":
        with pytest.raises(GrammarError, match="JSON schema conversion failed"):
            json_schema_to_gbnf(schema)
        return
    got = json_schema_to_gbnf(schema)
    assert trim(got) == trim(case["grammar"])
    Grammar.from_gbnf(got)  # and it parses


INTEGRATION = [c for c in CASES["integration"] if c["kind"] == "schema"]


@pytest.mark.parametrize("case", INTEGRATION, ids=[c["desc"][:40] for c in INTEGRATION])
def test_llamacpp_integration_schemas(case):
    g = Grammar.from_json_schema(case["body"])  # JSON text is accepted too
    for s in case["passing"]:
        assert g.matches(s), s
    for s in case["failing"]:
        assert not g.matches(s), s


# each keyword: every string the grammar produces is valid for the schema
KEYWORD_SCHEMAS = {
    "type-array": {"type": ["string", "null"]},
    "enum": {"enum": ["red", 1, None, {"a": [1]}]},
    "const": {"const": {"x": "y"}},
    "anyOf": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]},
    "oneOf": {"oneOf": [{"type": "string", "maxLength": 2}, {"type": "null"}]},
    "allOf": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}},
                         "required": ["a"]},
                        {"type": "object", "properties": {"b": {"type": "boolean"}},
                         "required": ["b"]}]},
    "ref-defs": {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "number"}},
                                  "required": ["x"], "additionalProperties": False}},
                 "type": "array", "items": {"$ref": "#/$defs/pt"}, "maxItems": 3},
    "ref-definitions": {"definitions": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                        "$ref": "#/definitions/n"},
    "properties": {"type": "object", "properties": {"b": {"type": "string"},
                                                    "a": {"type": "integer"}},
                   "required": ["a"], "additionalProperties": False},
    "additionalProperties": {"type": "object", "properties": {"k": {"type": "null"}},
                             "additionalProperties": {"type": "integer"}},
    "prefixItems": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]},
    "minmaxItems": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 4},
    "string-length": {"type": "string", "minLength": 2, "maxLength": 5},
    "pattern": {"type": "string", "pattern": "^[a-c]{2,3}-(x|yz)+\\.$"},
    "format-date": {"type": "string", "format": "date"},
    "format-time": {"type": "string", "format": "time"},
    "format-date-time": {"type": "string", "format": "date-time"},
    "format-uuid": {"type": "string", "format": "uuid"},
    "integer-range": {"type": "integer", "minimum": -123, "maximum": 4567},
    "integer-exclusive": {"type": "integer", "exclusiveMinimum": 7, "exclusiveMaximum": 300},
    "integer-min": {"type": "integer", "minimum": 42},
    # (llama.cpp's rule for a negative maximum takes leading zeros, "-05": not valid JSON)
    "integer-max": {"type": "integer", "maximum": 30},
    "number": {"type": "number"},
    "nullable": {"type": ["integer", "null"]},
    "recursive": {"$ref": "#/$defs/node", "$defs": {"node": {
        "type": "object", "properties": {"next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                            {"type": "null"}]}},
        "required": ["next"], "additionalProperties": False}}},
    "any": {},
}


@pytest.mark.parametrize("name", sorted(KEYWORD_SCHEMAS))
def test_generated_strings_validate(name):
    schema = KEYWORD_SCHEMAS[name]
    g = Grammar.from_json_schema(schema)
    strings = random_strings(g, 25, seed=zlib.crc32(name.encode()))
    assert len(strings) >= 10, name
    # llama.cpp's date rule does not know month lengths (it takes 06-31), and the package's
    # time checker refuses a "Z" offset: those two are checked for their shape
    shape = {"format-date": r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])",
             "format-time": r"([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{3})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)"}
    checker = None if name in shape else jsonschema.FormatChecker()
    for s in strings:
        value = json.loads(s)
        jsonschema.validate(value, schema, format_checker=checker)
        if name in shape:
            assert re.fullmatch(shape[name], value), value


def test_property_order_required_first():
    g = Grammar.from_json_schema({"type": "object", "properties": {
        "b": {"type": "integer"}, "a": {"type": "integer"}}, "required": ["a"],
        "additionalProperties": False})
    assert g.matches('{"a": 1, "b": 2}') and g.matches('{"a": 1}')
    assert not g.matches('{"b": 2, "a": 1}')


@pytest.mark.parametrize("schema,message", [
    ({"type": "frob"}, "unrecognized type frob"),
    ({"$ref": "http://x/y"}, "only references into the same document are supported"),
    ({"$ref": "#/$defs/missing"}, "cannot resolve $ref #/$defs/missing, $defs not found"),
    ({"type": "array", "minItems": -1}, "minItems must be a non-negative integer"),
    ({"type": "string", "pattern": "^(a$"}, "Invalid pattern ^(a$: unbalanced parentheses"),
    ({"enum": []}, "enum must be a non-empty array"),
    ({"anyOf": {}}, "must be an array of schemas"),
])
def test_schema_errors(schema, message):
    with pytest.raises(GrammarError) as e:
        json_schema_to_gbnf(schema)
    assert str(e.value).startswith("JSON schema conversion failed:\n")
    assert message in str(e.value)


def test_bad_json_text():
    with pytest.raises(GrammarError, match="invalid JSON schema"):
        json_schema_to_gbnf("{not json")


def test_pathological_schemas_are_bounded():
    deep = {}
    for _ in range(3000):
        deep = {"type": "array", "items": deep}
    with pytest.raises(GrammarError, match="nested too deeply"):
        json_schema_to_gbnf(deep)
    # a huge repetition count becomes an unbounded repetition, as in llama.cpp's parser
    g = Grammar.from_json_schema({"type": "string", "maxLength": 100000})
    assert g.matches('"' + "a" * 2500 + '"')
