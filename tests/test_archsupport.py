"""Every architecture against llama.cpp 0c1e570: random-weight models written from llama.cpp's own
tensor and metadata names (tests/archsupport/specs.py), quantized by llama.cpp's quantizer, decoded
by llama.cpp (prefill + single-token decodes); its logits are recorded in tests/data/arch/*.npz by
tests/archsupport/record.py. The default suite rebuilds each model with pyllama's ggml reference
quantizers (every tensor's sha256 equals llama.cpp's file) and compares:
- numerics="llama.cpp": mean |Δ log p| <= 1e-4 and the same top-1 on every row (the issue's bar;
  every fixture is in fact bit-identical, see `test_llamacpp_numerics_bit_identical`);
- numerics="invariant": mean |Δ log p| <= 0.02;
- the fixtures recorded with flash attention too (record.py --flash-attn; llama4): pyllama's
  flash-attention path in the llama.cpp numerics, bit-identical.
The live sweep against the oracle itself is the slow test at the end (LLAMACPP_PYTHON: a python
with llama_cpp importable)."""
import glob
import os
import subprocess
import sys

import numpy as np
import pytest

import pyllama

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "archsupport"))
import compare  # noqa: E402
import specs  # noqa: E402

# fixtures pyllama does not yet reproduce bit for bit (within the bar above), and why: none
# (mixtral-Q4_K_M, whose Q5_K attn_output prefill runs llama.cpp's tiled Q5_K kernel, became
# bit-identical once pyllama's matmul ported that formula)
NOT_BIT_EXACT: set = set()
FIXTURES = sorted(glob.glob(os.path.join(compare.DATA, "*.npz")))
IDS = [os.path.basename(p)[:-4] for p in FIXTURES]


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    d = tmp_path_factory.mktemp("arch")
    cache = {}

    def get(path):
        if path not in cache:
            f = compare.load_fixture(path)
            gg = str(d / (os.path.basename(path)[:-4] + ".gguf"))
            bad = compare.rebuild(f, gg)
            assert not bad, f"rebuilt tensors differ from llama.cpp's file: {bad}"
            cache[path] = f, pyllama.load_model(gg)
        return cache[path]
    return get


def test_every_supported_spec_has_fixtures():
    from pyllama import arch as registry
    have = {compare.load_fixture(p)["name"] for p in FIXTURES}
    want = {n for n, (a, _, _) in specs.ARCHS.items() if a in registry.names()}
    assert want <= have, f"no fixture for {sorted(want - have)}"


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_llamacpp_numerics(rebuilt, path):
    f, m = rebuilt(path)
    ours = compare.run_pyllama(m, f["tokens"], int(f["n_prefill"]), "llama.cpp", pos0=f["pos0"])
    r = compare.figures(ours, f["logits"], f["tokens"])
    assert r["mean_dlogp"] <= 1e-4 and r["top1"] == 1.0, r
    if os.path.basename(path)[:-4] not in NOT_BIT_EXACT:
        assert r["bit_identical"], r


FA_FIXTURES = [p for p in FIXTURES if "logits_fa" in compare.load_fixture(p)]


@pytest.mark.parametrize("path", FA_FIXTURES, ids=[os.path.basename(p)[:-4] for p in FA_FIXTURES])
def test_llamacpp_numerics_flash_attention(rebuilt, path):
    """The fixtures recorded with --flash-attn: llama.cpp's flash-attention logits (which differ
    from its non-flash ones) against pyllama's llama.cpp numerics with flash_attn=True."""
    f, m = rebuilt(path)
    ours = compare.run_pyllama(m, f["tokens"], int(f["n_prefill"]), "llama.cpp", pos0=f["pos0"],
                               flash_attn=True)
    r = compare.figures(ours, f["logits_fa"], f["tokens"])
    assert r["mean_dlogp"] <= 1e-4 and r["top1"] == 1.0, r
    assert r["bit_identical"], r


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_invariant_numerics(rebuilt, path):
    f, m = rebuilt(path)
    ours = compare.run_pyllama(m, f["tokens"], int(f["n_prefill"]), "invariant", pos0=f["pos0"])
    r = compare.figures(ours, f["logits"], f["tokens"])
    assert r["mean_dlogp"] <= 0.02, r


@pytest.mark.slow
def test_live_sweep_against_llamacpp(tmp_path):
    py = os.environ.get("LLAMACPP_PYTHON")
    if not py:
        pytest.skip("LLAMACPP_PYTHON (a python with llama-cpp-python 0.3.36) is not set")
    rec = os.path.join(os.path.dirname(__file__), "archsupport", "record.py")
    subprocess.run([py, rec, "--out", str(tmp_path)], check=True)
    for p in sorted(tmp_path.glob("*.npz")):
        f = compare.load_fixture(str(p))
        gg = str(tmp_path / (p.name[:-4] + ".gguf"))
        assert not compare.rebuild(f, gg)
        m = pyllama.load_model(gg)
        ours = compare.run_pyllama(m, f["tokens"], int(f["n_prefill"]), "llama.cpp",
                                   pos0=f["pos0"])
        r = compare.figures(ours, f["logits"], f["tokens"])
        assert r["mean_dlogp"] <= 1e-4 and r["top1"] == 1.0, (p.name, r)
