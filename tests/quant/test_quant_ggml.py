"""pyllama.quant.quantize vs outputs of ggml's own quantize_row_*_ref (bit-exact), stored in
tests/data/quant/ggml_quantize_ref.npz by make_ggml_ref.py from a real libggml-base build."""
import os

import numpy as np
import pytest

from pyllama.gguf import GGMLType
from pyllama.quant import (BLOCK_LAYOUT, dequantize, quantize, quantize_iq4_nl,
                           quantize_q8_0_rows, quantize_q8_1_rows, quantize_q8_K_rows)

REF = os.path.join(os.path.dirname(__file__), "..", "data", "quant", "ggml_quantize_ref.npz")
TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q8_K",
         "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL"]


@pytest.fixture(scope="module")
def ref():
    with np.load(REF) as z:
        return {k: z[k] for k in z.files}


def assert_same_blocks(ours, want, t, x):
    lay = BLOCK_LAYOUT[t]
    assert ours.shape == want.shape
    ob, wb = ours.reshape(-1, lay.block_bytes), want.reshape(-1, lay.block_bytes)
    diff = (ob != wb).any(axis=1)
    if t == GGMLType.IQ4_NL:   # ggml leaves indices of (near) all-zero blocks stale; d must be 0
        zero = np.abs(x.reshape(-1, 32)).max(axis=1) < 1e-15
        diff &= ~(zero & (ob[:, :2] == wb[:, :2]).all(axis=1))
    assert not diff.any(), f"{diff.sum()} of {diff.size} blocks differ (first {diff.argmax()})"


@pytest.mark.parametrize("name", TYPES)
def test_quantize_bitexact_vs_ggml(ref, name):
    t = GGMLType[name]
    assert_same_blocks(quantize(ref["x"], t), ref[name], t, ref["x"])


def test_iq4_nl_llama_quantize_path(ref):
    """ntry=7 reproduces quantize_iq4_nl (model files); the default is the KV-cache path."""
    ours = np.ascontiguousarray(quantize_iq4_nl(ref["x"], ntry=7)).view(np.uint8)
    assert_same_blocks(ours.reshape(ref["x"].shape[0], -1), ref["IQ4_NL_ntry7"],
                       GGMLType.IQ4_NL, ref["x"])
    assert_same_blocks(quantize(ref["x"], GGMLType.IQ4_NL), ref["IQ4_NL_cpu"],
                       GGMLType.IQ4_NL, ref["x"])


@pytest.mark.parametrize("name", ["Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"])
def test_ggml_blocks_dequantize_close(ref, name):
    """ggml's own blocks decode with our dequantizer to values near the input (sanity of the
    stored data; rows whose f16 scales under/overflow excluded)."""
    t = GGMLType[name]
    x = ref["x"][:32]
    y = dequantize(ref[name][:32], t, x.shape)
    ok = np.arange(len(x)) != 5
    bound = 0.2 if name == "Q3_K" else 0.1
    assert (np.abs(y - x)[ok] <= bound * np.abs(x[ok]).max(axis=1, keepdims=True)).all()


def fields(raw, name):
    return raw.reshape(-1).view(BLOCK_LAYOUT[GGMLType[name]].dtype)


def test_activation_q8_0_matches_llama_cpp_cpu(ref):
    """simd=True reproduces the x86 AVX2 quantize_row_q8_0 llama.cpp's matmul runs; the default
    (ggml's _ref) differs from it on exact .5 ties."""
    b = fields(ref["Q8_0_cpu"], "Q8_0")
    qs, d = quantize_q8_0_rows(ref["x"], simd=True)
    assert np.array_equal(qs.reshape(-1, 32), b["qs"])
    assert np.array_equal(d.reshape(-1), b["d"].astype(np.float32))
    qs_ref, _ = quantize_q8_0_rows(ref["x"])
    assert np.array_equal(qs_ref.reshape(-1, 32), fields(ref["Q8_0"], "Q8_0")["qs"])


def test_activation_q8_1_matches_llama_cpp_cpu(ref):
    b = fields(ref["Q8_1_cpu"], "Q8_1")
    qs, d, s = quantize_q8_1_rows(ref["x"], simd=True)
    assert np.array_equal(qs.reshape(-1, 32), b["qs"])
    assert np.array_equal(d.reshape(-1), b["d"].astype(np.float32))
    both_inf = np.isinf(s.reshape(-1)) & np.isinf(b["s"].astype(np.float32))
    assert np.array_equal(s.reshape(-1)[~both_inf], b["s"].astype(np.float32)[~both_inf])


def test_activation_q8_K_matches_llama_cpp_cpu(ref):
    b = fields(ref["Q8_K_cpu"], "Q8_K")
    qs, d, bsums = quantize_q8_K_rows(ref["x"])
    nz = d.reshape(-1) != 0          # ggml leaves bsums of all-zero blocks unwritten
    assert np.array_equal(qs.reshape(-1, 256), b["qs"])
    assert np.array_equal(d.reshape(-1), b["d"])
    assert np.array_equal(bsums.reshape(-1, 16)[nz], b["bsums"][nz])
