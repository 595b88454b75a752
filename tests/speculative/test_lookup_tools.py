"""llama-lookup, llama-lookup-create and llama-lookup-stats against llama.cpp 0c1e570's (recorded
by tests/make_lookup_fixture.py on the bundled Gemma-3 270M): the static cache file byte for byte,
lookup-stats' figures, llama-lookup's statistics and -lcd file on llama.cpp's tokens, its
statistics block; llama-lookup prints llama-completion's text (same numerics, greedy). The caches' libstdc++ iteration order (pyllama.speculative.std_order)
against a recorded std::unordered_map."""
import gzip
import json
import os
import re

import pytest

from pyllama.speculative.std_order import BUCKETS, ngram_map_order, token_map_order

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
REPO = os.path.dirname(TESTS)
DATA = os.path.join(TESTS, "data", "lookup")
FIXTURE = os.path.join(DATA, "lookup-llamacpp.json")


def _fixture():
    with open(FIXTURE) as f:
        return json.load(f)


def _gz(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        return f.read()


def _tool(*args, **kw):
    import sys
    sys.path.insert(0, os.path.join(TESTS, "tools"))
    from toolsupport import run_tool
    return run_tool(*args, **kw)


def _stats(stderr):
    out = {}
    for k in ("n_draft", "n_predict", "n_drafted", "n_accept"):
        out[k] = int(re.search(rf"^(?:.* I )?{k} +=\s*(-?\d+)\s*$", stderr, re.M).group(1))
    out["accept"] = re.search(r"accept += ([-\w.]+)%", stderr).group(1)
    return out


def test_std_order_is_libstdcxx_unordered_map_order():
    rec = _fixture()["std_order"]
    assert ngram_map_order([tuple(k) for k in rec["keys"]]) == [tuple(k) for k in
                                                                 rec["key_order"]]
    assert token_map_order(rec["tokens"]) == rec["token_order"]
    assert BUCKETS[:4] == (13, 29, 59, 127) and all(b > 2 * a for a, b in zip(BUCKETS,
                                                                             BUCKETS[1:]))


@pytest.fixture(scope="module")
def gemma(gemma_path):
    return gemma_path


@pytest.mark.realmodel
def test_lookup_create_writes_llamacpps_file(gemma, tmp_path):
    out = tmp_path / "static.bin"
    r = _tool("lookup-create", "-m", gemma, "-f", "tests/data/tools/gpl3-head.txt", "-lcs",
              str(out))
    assert r.returncode == 0, r.stderr
    assert "main: tokenization done\n" in r.stderr
    assert f"main: hashing done, writing file to {out}\n" in r.stderr
    assert out.read_bytes() == _gz("static-gemma.bin.gz")


@pytest.mark.realmodel
@pytest.mark.parametrize("with_static", [False, True])
def test_lookup_stats_prints_llamacpps_figures(gemma, tmp_path, with_static):
    rec = _fixture()
    extra = []
    if with_static:
        p = tmp_path / "static.bin"
        p.write_bytes(_gz("static-gemma.bin.gz"))
        extra = ["-lcs", str(p)]
    r = _tool("lookup-stats", "-m", gemma, "-f", rec["stats_text"], "-c", str(rec["stats_ctx"]),
              *extra)
    assert r.returncode == 0, r.stderr
    assert _stats(r.stderr) == rec["stats_static" if with_static else "stats"]


def _lookup_prompt(rec):
    with open(os.path.join(REPO, rec["create_text"])) as f:
        return f.read()[:rec["lookup"]["prompt_chars"]]


@pytest.mark.realmodel
def test_lookup_prints_completions_text_and_llamacpps_statistics(gemma, tmp_path):
    rec = _fixture()
    lk = rec["lookup"]
    static = tmp_path / "static.bin"
    static.write_bytes(_gz("static-gemma.bin.gz"))
    dyn = tmp_path / "dyn.bin"
    prompt = _lookup_prompt(rec)
    r = _tool("lookup", "-m", gemma, "-p", prompt, "-n", str(lk["n"]), "--temp", "0", "-c",
              "2048", "-lcs", str(static), "-lcd", str(dyn))
    assert r.returncode == 0, r.stderr
    head = b"\n\n<bos>" + prompt.encode()
    assert r.stdout.startswith(head) and r.stdout.endswith(b"\n\n\n\n")
    text = r.stdout[len(head):-4]
    st = _stats(r.stderr)
    assert st["n_draft"] == 3 and st["n_predict"] > lk["n"]      # checked after each round
    # the statistics block: llama.cpp's lines, numbers aside
    from make_lookup_fixture import stats_lines
    assert stats_lines(r.stderr) == lk["stats_lines"]
    # llama-completion (same numerics, greedy) prints the same text for as many tokens
    c = _tool("completion", "-m", gemma, "-p", prompt, "-n", str(st["n_predict"]), "--temp", "0",
              "-c", "2048", "-no-cnv", "--numerics", "invariant")
    assert c.returncode == 0, c.stderr
    assert c.stdout.startswith(prompt.encode())
    assert c.stdout[len(prompt.encode()):].rstrip(b"\n") == text.rstrip(b"\n")
    # the -lcd file: the dynamic cache with this run's context cache merged in
    from pyllama.speculative.ngram_cache import cache_load
    got = cache_load(str(dyn))
    n_input = int(re.search(r"encoded +(\d+) tokens", r.stderr).group(1))
    assert sum(sum(p.values()) for k, p in got.items() if k[1] == -1) == \
        n_input + st["n_predict"] - 1                 # every token after the first, as 1-gram


@pytest.mark.realmodel
def test_lookup_drafts_and_lcd_file_on_llamacpps_tokens(gemma):
    """llama.cpp's llama-lookup verifies drafts in batches with its own batch arithmetic, so its
    text parts from llama-completion's (and from pyllama's); replaying its generated tokens
    through pyllama's LookupDrafter gives its statistics (drafts, acceptances, where the -n
    check stops) and its -lcd file byte for byte."""
    import tempfile

    import pyllama
    from pyllama.speculative.ngram_cache import LookupDrafter, cache_load, cache_save
    rec = _fixture()
    lk = rec["lookup"]
    m = pyllama.load_model(gemma)
    prompt = _lookup_prompt(rec)
    ids = m.tokenize(prompt, add_special=True, parse_special=True)
    head = "\n\n<bos>" + prompt
    gen = m.tokenize(lk["stdout"][len(head):-4], add_special=False, parse_special=True)
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "static.bin")
        with open(p, "wb") as f:
            f.write(_gz("static-gemma.bin.gz"))
        static = cache_load(p)
        dr = LookupDrafter(lk["stats"]["n_draft"], static, {})
        dr.begin(ids)
        hist, n_pred, drafted, accepted = ids + [gen[0]], 1, 0, 0
        while n_pred <= lk["n"]:                 # lookup.cpp: stop once n_predict > -n
            draft = dr.draft(hist, lk["stats"]["n_draft"])
            drafted += len(draft)
            for t in draft:
                if gen[n_pred] != t:
                    break
                hist.append(gen[n_pred])
                n_pred += 1
                accepted += 1
            hist.append(gen[n_pred])
            n_pred += 1
        assert hist == ids + gen
        assert (n_pred, drafted, accepted) == (lk["stats"]["n_predict"], lk["stats"]["n_drafted"],
                                               lk["stats"]["n_accept"])
        out = os.path.join(d, "dyn.bin")
        cache_save(dr.finish(hist), out)
        with open(out, "rb") as f:
            assert f.read() == _gz("dynamic-gemma.bin.gz")


def test_bad_input_is_one_line_and_exit_1(tmp_path, tiny_model_path):
    m = tiny_model_path("llama")
    r = _tool("lookup-create", "-m", m, "-p", "hello")
    assert r.returncode == 1 and "-lcs/--lookup-cache-static FNAME is required" in r.stderr
    missing = str(tmp_path / "nope.bin")
    r = _tool("lookup", "-m", m, "-p", "hello", "-n", "4", "-lcs", missing)
    assert r.returncode == 1
    assert f"failed to open static lookup cache: {missing}" in r.stderr
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"\x01\x02\x03")
    r = _tool("lookup-stats", "-m", m, "-p", "hello", "-lcs", str(bad))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    r = _tool("lookup", "-m", m, "-p", "hello", "-md", m)     # not a llama-lookup flag
    assert r.returncode == 1 and "Traceback" not in r.stderr


@pytest.mark.realmodel
def test_lookup_in_llamacpp_numerics_prints_llamacpps_lookup(gemma, tmp_path):
    """With --numerics llama.cpp, llama-lookup computes as llama.cpp's does (the prompt but its
    last token, then that token alone, then draft batches, each with the kernels llama.cpp picks
    for its row count): llama.cpp's text, statistics and -lcd file."""
    rec = _fixture()
    lk = rec["lookup"]
    static = tmp_path / "static.bin"
    static.write_bytes(_gz("static-gemma.bin.gz"))
    dyn = tmp_path / "dyn.bin"
    r = _tool("lookup", "-m", gemma, "-p", _lookup_prompt(rec), "-n", str(lk["n"]), "--temp",
              "0", "-c", "2048", "-lcs", str(static), "-lcd", str(dyn), "--numerics", "llama.cpp")
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == lk["stdout"]
    assert _stats(r.stderr) == lk["stats"]
    assert dyn.read_bytes() == _gz("dynamic-gemma.bin.gz")
