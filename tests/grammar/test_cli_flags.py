"""--grammar, --grammar-file, -j/--json-schema, -jf/--json-schema-file (common/arg.cpp): the
grammar text lands in the sampling parameters; a schema is converted while the flag is parsed."""
import io
import json

import pytest

from pyllama.grammar import json_schema_to_gbnf
from pyllama.tools._args import ArgError, parse

TOOLS = ("completion", "cli", "server", "speculative")


def P(tool, *argv):
    return parse(tool, list(argv), env={}, stream=io.StringIO())


@pytest.mark.parametrize("tool", TOOLS)
def test_grammar_flags(tool, tmp_path):
    assert P(tool, "--grammar", 'root ::= "a"').sampling.grammar == 'root ::= "a"'
    f = tmp_path / "g.gbnf"
    f.write_text('root ::= "b"\n')
    assert P(tool, "--grammar-file", str(f)).sampling.grammar.strip() == 'root ::= "b"'
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert P(tool, "-j", json.dumps(schema)).sampling.grammar == json_schema_to_gbnf(schema)
    sf = tmp_path / "s.json"
    sf.write_text(json.dumps(schema))
    assert P(tool, "--json-schema-file", str(sf)).sampling.grammar == json_schema_to_gbnf(schema)


def test_bad_schema_flag_is_one_error():
    with pytest.raises(ArgError) as e:
        P("completion", "-j", '{"type": "frob"}')
    assert "unrecognized type frob" in str(e.value)
    with pytest.raises(ArgError):
        P("completion", "-jf", "/nonexistent/schema.json")


def test_tools_apply_the_grammar_and_refuse_a_bad_one(tiny_model_path):
    from tests.tools.toolsupport import run_tool
    model = tiny_model_path("llama")
    r = run_tool("completion", "-m", model, "-p", "hello", "-n", "8", "-no-cnv", "--temp", "0",
                 "--grammar", 'root ::= ("yes" | "no") "!"')
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    gen = out[len("hello"):].replace("[end of text]", "").strip()
    assert out.startswith("hello") and gen in ("yes!", "no!"), out
    r = run_tool("completion", "-m", model, "-p", "hello", "-n", "4", "-no-cnv",
                 "--grammar", 'root ::= "a" | [b')
    assert r.returncode == 1
    errors = [ln for ln in r.stderr.splitlines() if "grammar" in ln]
    assert errors == ["error: failed to parse grammar: unexpected end of input "
                      "(line 1, column 18)"]
