"""Tools on the bundled real models against llama.cpp's reference figures (recorded with
llama.cpp 0c1e570, tests/data/tools/): perplexity of the GPL-3 text and KLD against a
llama.cpp `_logits_` base file."""
import gzip
import io
import os
import re

import numpy as np
import pytest

from toolsupport import DATA, real_model_path_or_skip

pytestmark = pytest.mark.realmodel     # the long runs are marked slow one by one
GPL3 = os.path.join(DATA, "gpl3-head.txt")   # first 14000 bytes of texts/GPL-3.txt
GPL3_FULL = os.path.join(os.path.dirname(DATA), "GPL-3.txt")


@pytest.mark.slow
@pytest.mark.parametrize("alias,ppl,err", [("gemma-3-270m", "15.1904", "1.33153"),
                                          ("qwen2.5-coder-0.5b", "6.1921", "0.42472")])
def test_perplexity_is_llama_cpps(tool, alias, ppl, err):
    """`llama-perplexity -c 512 --chunks 4` prints llama.cpp 0c1e570's own estimate
    (tests/data/perplexity.json), digit for digit: its default -fa auto means flash
    attention on the CPU, whose arithmetic numerics='llama.cpp' reproduces."""
    path = real_model_path_or_skip(alias)
    r = tool("perplexity", "-m", path, "-f", GPL3, "-c", "512", "--chunks", "4", "-t", "2",
             timeout=1800)
    assert r.returncode == 0, r.stderr
    assert f"Final estimate: PPL = {ppl} +/- {err}" in r.stderr, r.stderr[-400:]


@pytest.mark.slow
@pytest.mark.parametrize("alias,kv,extra,ppl,err", [
    ("gemma-3-270m", "q8_0", (), "15.1131", "1.31903"),
    ("gemma-3-270m", "q4_0", (), "17.2419", "1.51397"),
    ("qwen2.5-coder-0.5b", "q8_0", ("--kv-k-center", "off"), "6.4173", "0.44373"),
    ("qwen2.5-coder-0.5b", "q8_0", ("-ctk", "f16"), "6.1997", "0.42492")])
def test_perplexity_quantized_kv_is_llama_cpps(tool, alias, kv, extra, ppl, err):
    """-ctk/-ctv q8_0 and q4_0 with llama.cpp's cache bytes (Qwen: --kv-k-center off): llama.cpp
    0c1e570's own estimates (its C API with llama-perplexity's chunking,
    tests/kvsupport/llamacpp_ppl.py --nseq 4, AVX2 build; docs/kv_cache_types.md), digit for
    digit: flash attention over quantized K is one_chunk with q as q8_0."""
    path = real_model_path_or_skip(alias)
    r = tool("perplexity", "-m", path, "-f", GPL3, "-c", "512", "--chunks", "4", "-t", "2",
             "-ctk", kv, "-ctv", kv, *extra, timeout=1800)
    assert r.returncode == 0, r.stderr
    assert f"Final estimate: PPL = {ppl} +/- {err}" in r.stderr, r.stderr[-400:]


@pytest.mark.slow
@pytest.mark.parametrize("alias,ppl,err", [("gemma-3-270m", "16.1578", "1.04982"),
                                          ("qwen2.5-coder-0.5b", "6.7254", "0.33526")])
def test_perplexity_c1024_is_llama_cpps(tool, alias, ppl, err):
    """The -c 1024 figures docs/numerics.md quotes: llama.cpp 0c1e570's llama-perplexity -c 1024
    --chunks 4 on the whole GPL-3 text (tests/data/perplexity.json), digit for digit."""
    path = real_model_path_or_skip(alias)
    r = tool("perplexity", "-m", path, "-f", GPL3_FULL, "-c", "1024", "--chunks", "4", "-t", "2",
             timeout=3600)
    assert r.returncode == 0, r.stderr
    assert f"Final estimate: PPL = {ppl} +/- {err}" in r.stderr, r.stderr[-400:]


@pytest.mark.slow
def test_perplexity_without_flash_attention_differs_slightly(tool):
    """-fa off: llama.cpp's other attention arithmetic (f16 q and probabilities), a different
    estimate within 1% of the reference."""
    path = real_model_path_or_skip("qwen2.5-coder-0.5b")
    r = tool("perplexity", "-m", path, "-f", GPL3, "-c", "512", "--chunks", "4", "-t", "2",
             "-fa", "off", timeout=1800)
    assert r.returncode == 0, r.stderr
    m = re.search(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)", r.stderr)
    assert m.group(1) != "6.1921"
    assert float(m.group(1)) == pytest.approx(6.1921, rel=0.01)


def _base_rows():
    from pyllama import perplexity as ppl
    f = io.BytesIO(gzip.open(os.path.join(DATA, "kld-base-qwen-c64-rows4.bin.gz")).read())
    base = ppl.open_base(f)
    rows = np.frombuffer(f.read(), dtype="<u2").reshape(4, ppl.row_units(base.n_vocab))
    return base, rows


def test_qwen_kld_against_llama_cpp_base_rows():
    """Rows 0-3 of chunk 0 of llama.cpp's base file (-c 64: positions 32..35)."""
    import pyllama
    from pyllama import perplexity as ppl
    path = real_model_path_or_skip("qwen2.5-coder-0.5b")
    base, rows = _base_rows()
    model = pyllama.load_model(path)
    with open(GPL3, encoding="utf-8") as f:
        ids = model.tokenize(f.read(), add_special=True, parse_special=False)
    assert ids[:100] == base.tokens[:100].tolist()      # same tokens as llama.cpp's run
    ctx = pyllama.Context(model, n_ctx=64, n_batch=64, n_ubatch=64)
    pl = ppl.Plan(64, 64, 1, 1, 32)
    logits = ppl.chunk_logits(ctx, base.tokens, pl, 0, None)[0]
    st = ppl.KldStats()
    ppl.kld_rows(logits[:4], rows, base.tokens[33:37], st)
    assert st.n_same_top == 4
    assert st.sum_kld / st.count < 0.01


@pytest.mark.slow
@pytest.mark.parametrize("alias,case_id,n_same", [("gemma-3-270m", "story", 32),
                                                  ("qwen2.5-coder-0.5b", "chat-qwen", 32)])
def test_simple_greedy_matches_library_and_llama_cpp(tool, alias, case_id, n_same):
    """llama-simple prints the prompt pieces and the library's greedy continuation with
    llama.cpp's arithmetic (numerics='llama.cpp' and flash attention: llama.cpp's llama-simple
    runs with -fa auto); on these prompts its first n_same tokens are those of llama.cpp's
    reference run (logits-*.json, flash attention off: the two arithmetics agree there; in the
    invariant arithmetic Gemma's story prompt flips a 0.075 logit near-tie at its 8th token)."""
    import json
    import pyllama
    from pyllama.generate import generate
    from pyllama.sampling import SamplerChain, SamplerParams
    path = real_model_path_or_skip(alias)
    with open(os.path.join(os.path.dirname(DATA), f"logits-{alias}.json"), encoding="utf-8") as f:
        case = [c for c in json.load(f)["cases"] if c["id"] == case_id][0]
    n = len(case["greedy"])
    r = tool("simple", "-m", path, "-n", str(n), case["text"], timeout=900)
    assert r.returncode == 0, r.stderr
    model = pyllama.load_model(path)
    ids = model.tokenize(case["text"], add_special=True, parse_special=True)
    assert ids == case["ids"]
    ctx = pyllama.Context(model, n_ctx=len(ids) + n, n_batch=len(ids), n_ubatch=len(ids),
                          numerics="llama.cpp", flash_attn=True)
    chain = SamplerChain(SamplerParams(temp=0.0, samplers=["temperature"]), model.n_vocab,
                         eog_ids=tuple(model.vocab.eog_ids))
    gen = [t for t in generate(ctx, ids, chain, n_predict=n) if t not in model.vocab.eog_ids]
    assert gen[:n_same] == case["greedy"][:n_same]
    expect = b"".join(model.token_to_piece(t, True) for t in ids + gen) + b"\n"
    assert r.stdout == expect
