"""llama-tokenize end to end: flags, output format (llama.cpp tools/tokenize/tokenize.cpp), errors, and llama.cpp's ids on the real
vocabularies (tests/data/tools/tokenize-cases.json, from tests/data/tokenize-*.json)."""
import json
import os

import pytest

from toolsupport import DATA, real_model_path_or_skip


def test_no_prompt_source(tool):
    r = tool("tokenize", "-m", "whatever.gguf")
    assert r.returncode == 1
    assert r.stderr.strip() == "error: must specify one of: --stdin, --file or --prompt"


def test_missing_and_corrupt_model(tool, tmp_path):
    r = tool("tokenize", "-m", "/nonexistent.gguf", "-p", "x")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error: could not load model from file '/nonexistent.gguf'." in r.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00garbage")
    r = tool("tokenize", "-m", str(bad), "-p", "x")
    assert r.returncode == 1 and "could not load model" in r.stderr and "Traceback" not in r.stderr


def test_help_version_and_bad_flag(tool):
    r = tool("tokenize", "-h")
    assert r.returncode == 0 and r.stdout.startswith(b"----- common params -----")
    assert b"--show-count" in r.stdout and b"--no-parse-special" in r.stdout
    r = tool("tokenize", "--version")
    assert r.returncode == 0 and r.stdout == b"" and r.stderr.startswith("version: ")
    assert "built with" in r.stderr
    r = tool("tokenize", "--nope")
    assert r.returncode == 1 and r.stderr.strip() == "error: invalid argument: --nope"


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    return tiny_model_path("llama")


def _ids(out: bytes):
    return json.loads(out.decode().splitlines()[0])


def test_tiny_model_formats(tool, tiny, tmp_path):
    from pyllama.gguf import GGUFReader
    from pyllama.vocab import Vocab
    vocab = Vocab.from_gguf(GGUFReader(tiny))
    expect = vocab.tokenize("the cat<|im_end|>\n", True, True)
    r = tool("tokenize", "-m", tiny, "-p", "the cat<|im_end|>\\n", "--ids", "--show-count")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert _ids(r.stdout) == expect and lines[1] == f"Total number of tokens: {len(expect)}"
    r = tool("tokenize", "-m", tiny, "-p", "the cat")
    ids = vocab.tokenize("the cat", True, True)
    assert r.stdout == b"".join(b"%6d -> '" % i + vocab.token_to_piece(i, True) + b"'\n"
                                for i in ids)
    r = tool("tokenize", "-m", tiny, "-p", "<|im_end|>", "--ids", "--no-parse-special")
    assert _ids(r.stdout) == vocab.tokenize("<|im_end|>", True, False)
    f = tmp_path / "p.txt"
    f.write_bytes(b"a\nb\n")
    r = tool("tokenize", "-m", tiny, "-f", str(f), "--ids", "--no-bos")
    assert _ids(r.stdout) == vocab.tokenize("a\nb\n", False, True)   # trailing newline kept
    r = tool("tokenize", "-m", tiny, "--stdin", "--ids", "--no-escape", stdin=b"x\\ny")
    assert _ids(r.stdout) == vocab.tokenize("x\\ny", True, True)


CASES = json.load(open(os.path.join(DATA, "tokenize-cases.json"), encoding="utf-8"))["models"]


@pytest.mark.realmodel
@pytest.mark.parametrize("alias", sorted(CASES))
def test_real_vocab_ids_match_llama_cpp(alias, capsysbinary):
    from pyllama.tools import tokenize
    path = real_model_path_or_skip(alias)
    for case in CASES[alias]:
        for flags, key in (([], "ids_bos_special"), (["--no-parse-special"], "ids_bos"),
                           (["--no-parse-special", "--no-bos"], "ids_nobos")):
            rc = tokenize.main(["-m", path, "--ids", "--no-escape", "-p", case["text"], *flags])
            out = capsysbinary.readouterr().out
            assert rc == 0
            assert _ids(out) == case[key], (case["text"], flags)
