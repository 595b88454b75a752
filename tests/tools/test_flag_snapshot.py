"""Every flag of llama.cpp 0c1e570 (the snapshot tests/data/llamacpp_flags.json, written from its
common/arg.cpp by scripts/extract_llamacpp_flags.py) has a disposition in pyllama's table for
each executable pyllama ships, with the same spellings, env var and value-taking."""
import json
import os

import pytest

from pyllama.tools import _args as A

SNAPSHOT = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "llamacpp_flags.json")
# pyllama's tools -> llama.cpp's llama_example (llama-speculative-simple parses as SPECULATIVE)
EXAMPLE = {A.S: "SERVER", A.C: "CLI", A.CO: "COMPLETION", A.SP: "SPECULATIVE",
           A.P: "PERPLEXITY", A.T: "TOKENIZE", A.LK: "LOOKUP"}


def _snapshot():
    with open(SNAPSHOT) as f:
        return json.load(f)["flags"]


def _applies(flag, example):
    """llama.cpp's add_opt filter: the example, or COMMON, and not excluded."""
    return ((example in flag["examples"] or "COMMON" in flag["examples"])
            and example not in flag["excludes"])


def test_snapshot_is_the_whole_arg_cpp():
    flags = _snapshot()
    assert len(flags) >= 350
    spellings = {a for f in flags for a in f["args"] + f["neg"]}
    for a in ("--cors-origins", "--fim-qwen-7b-default", "--spec-ngram-map-k4v-size-n",
              "--ui-mcp-proxy", "-no-cnv", "--kv-unified"):
        assert a in spellings


@pytest.mark.parametrize("tool", sorted(EXAMPLE))
def test_every_llamacpp_flag_has_a_disposition(tool):
    table = A._lookup(tool)
    missing, wrong = [], []
    for f in _snapshot():
        if not _applies(f, EXAMPLE[tool]):
            continue
        for a in f["args"] + f["neg"]:
            if a not in table:
                missing.append(a)
                continue
            o = table[a][0]
            kind = {"flag": "flag", "bool": "bool"}.get(o.kind, "value")
            if kind != f["kind"]:
                wrong.append(f"{a}: pyllama {o.kind}, llama.cpp {f['kind']}")
            if f["env"] and f["env"] not in ((o.env,) + o.old_env):
                wrong.append(f"{a}: env {o.env}, llama.cpp {f['env']}")
    assert not missing, f"llama.cpp flags of {tool} with no disposition: {missing}"
    assert not wrong, wrong


def test_unsupported_flag_names_the_feature():
    import io
    with pytest.raises(A.ArgError, match="multimodal projectors"):
        A.parse("server", ["--media-path", "x"], env={}, stream=io.StringIO(), config=[])
    with pytest.raises(A.ArgError, match="downloads"):
        A.parse("server", ["--fim-qwen-7b-default"], env={}, stream=io.StringIO(), config=[])


@pytest.mark.parametrize("tool", sorted(EXAMPLE))
def test_no_spelling_twice(tool):
    seen = {}
    for o in A.options_for(tool):
        for a in o.all_args:
            assert a not in seen, f"{a} is in the table twice ({seen[a]}, {o.dest})"
            seen[a] = o.dest
