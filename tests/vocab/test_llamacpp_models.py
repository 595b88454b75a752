"""pyllama's tokenizer against llama.cpp's own tokenizer test cases (models/ggml-vocab-*.gguf
with .inp/.out, as tests/test-tokenizer-0.cpp runs them: add_special=false,
parse_special=false), and its pre-tokenizer table against llama.cpp's source.

Default run: the stored cases and reachable vocab (tests/make_vocab_models_fixture.py).
Slow run: the full vendored GGUFs, and the name -> type -> regexes/options table parsed from
src/llama-vocab.cpp.
"""
import gzip
import json
import os
import re
import sys

import pytest

from pyllama.errors import TokenizerError
from pyllama.vocab import Vocab, pretok

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)
import make_vocab_models_fixture as fx  # noqa: E402

with gzip.open(os.path.join(HERE, "data", "vocab-models-llamacpp.json.gz"), "rb") as _f:
    MODELS = json.loads(_f.read().decode("utf-8", "surrogateescape"))["models"]
SUPPORTED = sorted(k for k, m in MODELS.items() if m["model"] in ("gpt2", "llama"))
REFUSED = sorted(k for k, m in MODELS.items() if m["model"] not in ("gpt2", "llama"))
LLAMA_CPP = fx.DEFAULT_DIR


def _mismatches(vocab, cases):
    bad = []
    for text, want in cases:
        got = vocab.tokenize(text.encode("utf-8", "surrogateescape"), add_special=False,
                             parse_special=False)
        if got != want:
            bad.append((text, want, got))
    return bad


def test_fixture_covers_every_shipped_model():
    assert len(MODELS) >= 15 and {"deepseek-llm", "llama-bpe", "qwen35"} <= set(MODELS)


@pytest.mark.parametrize("name", SUPPORTED)
def test_llamacpp_cases(name):
    rec = MODELS[name]
    v = Vocab.from_gguf(fx.metadata(rec))
    bad = _mismatches(v, rec["cases"])
    assert not bad, f"{len(bad)}/{len(rec['cases'])} cases differ, first: {bad[0]!r}"


@pytest.mark.parametrize("name", REFUSED)
def test_unsupported_tokenizer_refused(name):
    """bert (WPM) and gemma4 (raw-UTF-8 BPE) vocabs: a clear refusal, not wrong tokens."""
    with pytest.raises(TokenizerError, match="unsupported tokenizer model"):
        Vocab.from_gguf({"tokenizer.ggml.model": MODELS[name]["model"],
                         "tokenizer.ggml.tokens": ["a"]})


def test_unknown_pre_tokenizer_refused():
    md = fx.metadata(MODELS["gpt-2"])
    md["tokenizer.ggml.pre"] = "no-such-pre"
    with pytest.raises(TokenizerError, match="unknown pre-tokenizer type: 'no-such-pre'"):
        Vocab.from_gguf(md)
    for name in pretok.RAW_UTF8:
        md["tokenizer.ggml.pre"] = name
        with pytest.raises(TokenizerError, match="not supported"):
            Vocab.from_gguf(md)
    md.pop("tokenizer.ggml.pre")      # missing: llama.cpp's 'default'
    assert Vocab.from_gguf(md).tokenize("Hello world", add_special=False)


def test_chatglm_has_no_default_bos():
    md = fx.metadata(MODELS["gpt-2"])
    md.pop("tokenizer.ggml.bos_token_id")
    md["tokenizer.ggml.pre"] = "glm4"
    assert Vocab.from_gguf(md).bos == -1
    md["tokenizer.ggml.pre"] = "gpt-2"
    assert Vocab.from_gguf(md).bos == 11


# ---- slow: the full files and llama.cpp's source ----------------------------------------
def _need_sdist():
    if not os.path.isdir(os.path.join(LLAMA_CPP, "models")):
        pytest.skip(f"llama.cpp source not unpacked at {LLAMA_CPP} "
                    "(bash scripts/build_llamacpp.sh src)")


@pytest.mark.slow
@pytest.mark.parametrize("name", SUPPORTED)
def test_llamacpp_cases_full_vocab(name):
    _need_sdist()
    from pyllama.gguf import GGUFReader
    path = os.path.join(LLAMA_CPP, "models", f"ggml-vocab-{name}.gguf")
    cases = fx.read_cases(path)
    assert cases == [tuple(c) for c in MODELS[name]["cases"]]
    bad = _mismatches(Vocab.from_gguf(GGUFReader(path)), cases)
    assert not bad, f"{len(bad)}/{len(cases)} cases differ, first: {bad[0]!r}"


def _unesc(r: str) -> str:
    r = re.sub(r"\\x\{([0-9A-F]+)\}", lambda m: chr(int(m.group(1), 16)), r)
    return r.replace("\\r", "\r").replace("\\n", "\n").replace('\\"', '"')


@pytest.mark.slow
def test_table_matches_llama_vocab_cpp():
    """Every tokenizer.ggml.pre name of llama_vocab::impl::load, its regexes (hand-written
    splitters: the regex they implement) and its options."""
    _need_sdist()
    import make_pretok_oracle_fixture as ox
    types, names = ox.cpp_types(), ox.cpp_names()
    custom = {r"\p{Han}+": [pretok._KIMI_K2], r"\p{AFMoE_digits}": [pretok._DIGITS3],
              r"\d{1,3}(?=(?:\d{3})*\b)": [pretok._DIGITS3]}
    assert len(names) > 80
    for name, (ty, opts) in names.items():
        if opts.get("escape_whitespaces") or ty == "WHITESPACE":
            assert name in pretok.RAW_UTF8 and name not in pretok.PRE
            continue
        pt = pretok.PRE[name]
        want = [x for r in types.get(ty, types["DEFAULT"]) for x in custom.get(r, [r])]
        assert [_unesc(r) for r in pretok.REGEXES[pt.regexes]] == [_unesc(r) for r in want], name
        exp = dict(clean_spaces=True, ignore_merges=False, add_bos=False, no_bos=False)
        exp.update((k, v) for k, v in opts.items() if k in exp)
        assert {k: getattr(pt, k) for k in exp} == exp, name
    assert set(pretok.PRE) <= set(names)


# ---- every pre-tokenizer name, against llama.cpp on one vocab ---------------------------
import make_pretok_oracle_fixture as ox  # noqa: E402

with gzip.open(os.path.join(HERE, "data", "pretok-oracle-llamacpp.json.gz"), "rb") as _f:
    ORACLE = json.loads(_f.read().decode())


def _pre_vocab(name: str, vocab_rec=None):
    md = fx.metadata(vocab_rec or ORACLE["vocab"])
    md["tokenizer.ggml.pre"] = name
    return Vocab.from_gguf(md)


def _check_name(name: str, rec: dict, strings, vocab_rec=None) -> None:
    if "refused" in rec or name in pretok.RAW_UTF8:
        # llama.cpp refuses the name, or pyllama does not implement it (raw-UTF-8 BPE)
        with pytest.raises(TokenizerError):
            _pre_vocab(name, vocab_rec)
        return
    v = _pre_vocab(name, vocab_rec)
    bad = [(s, w, g) for s, w, g in
           ((s, w, v.tokenize(s, add_special=False, parse_special=False))
            for s, w in zip(strings, rec["ids"])) if w != g]
    assert not bad, f"{name}: {len(bad)}/{len(strings)} strings differ, first: {bad[0]!r}"


def test_oracle_fixture_covers_every_name():
    names = set(ORACLE["results"])
    assert set(pretok.PRE) | set(pretok.RAW_UTF8) | {"no-such-pre"} == names
    assert "refused" in ORACLE["results"]["no-such-pre"]


@pytest.mark.parametrize("name", sorted(ORACLE["results"]))
def test_pre_tokenizer_matches_llamacpp(name):
    _check_name(name, ORACLE["results"][name], ORACLE["strings"])


@pytest.mark.slow
def test_pre_tokenizers_rerun_oracle(tmp_path):
    """Rerun llama.cpp (llama-cpp-python) on every name with the current STRINGS."""
    _need_sdist()
    if not os.path.exists(ox.ORACLE_PYTHON):
        pytest.skip(f"llama-cpp-python oracle absent at {ox.ORACLE_PYTHON}")
    import subprocess
    from pyllama.gguf import GGUFReader
    names = sorted(ORACLE["results"])
    vocab_rec = fx.prune(GGUFReader(ox.BASE).metadata, ox.STRINGS)
    ox.write_ggufs(names, str(tmp_path))
    for name in names:
        out = tmp_path / f"{name}.json"
        p = subprocess.run([ox.ORACLE_PYTHON, ox.__file__, "--oracle",
                            str(tmp_path / f"{name}.gguf"), str(out)], capture_output=True)
        rec = json.loads(out.read_text()) if p.returncode == 0 else {"refused": "abort"}
        _check_name(name, rec, ox.STRINGS, vocab_rec)
