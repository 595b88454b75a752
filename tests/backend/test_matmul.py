"""CPU matmul / get_rows kernels against the numpy oracle (pyllama.backend.ref_matmul) and the
`gguf` package; batch and thread invariance (bit-exact).

Tolerances: activation quantization and dequantization are bit-exact; the integer block dot
products are exact in both, only the float32 order of summing block contributions differs
(8 SIMD lanes + horizontal sum vs blocks in order), so |cpu - ref| <= 1e-5 * (|x| @ |W|^T).
"""
import contextlib

import numpy as np
import pytest
from gguf import GGMLQuantizationType as GQ
from gguf import quants

from pyllama.backend.base import Weight
from pyllama.backend.cpu import matmul as mm
from pyllama.backend.ref_matmul import (dequantize_ref, get_rows_ref, matmul_ref,
                                        quantize_q8_0_ref, quantize_q8_K_4x8_ref,
                                        quantize_q8_K_ref, round_bf16)
from pyllama.errors import BackendError
from pyllama.gguf import GGML_BLOCK, GGMLType as T

BLOCK32 = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]
KQUANTS = [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]
FLOATS = [T.F32, T.F16, T.BF16]
ALL = BLOCK32 + KQUANTS + FLOATS
# offsets of the f16 super-block scales (d, dmin) inside each K-quant block
_KSCALE = {T.Q2_K: (80, 82), T.Q3_K: (108,), T.Q4_K: (0, 2), T.Q5_K: (0, 2), T.Q6_K: (208,)}


def rand_weight(t, rows, k, seed=0):
    """Raw rows as the GGUF reader gives them. Block-32 and float types: gguf.quants.quantize of
    gaussian weights; K-quants (no numpy quantizer in gguf): random bytes with sane f16 scales."""
    rng = np.random.default_rng(seed)
    if t == T.F32:
        return rng.standard_normal((rows, k)).astype(np.float32)
    if t in BLOCK32 or t in (T.F16, T.BF16):
        raw = quants.quantize(rng.standard_normal((rows, k)).astype(np.float32), GQ(int(t)))
        return raw.view(np.float16) if t == T.F16 else raw.view(np.uint16) if t == T.BF16 else raw
    _, bb = GGML_BLOCK[t]
    raw = rng.integers(0, 256, (rows, k // 256, bb), dtype=np.uint8)
    for off in _KSCALE[t]:
        d = (rng.random((rows, k // 256)) * 0.01 + 1e-3).astype(np.float16)
        raw[..., off:off + 2] = d[..., None].view(np.uint8)
    return raw.reshape(rows, -1)


def weight(t, raw):
    rows = raw.shape[0]
    k = raw.shape[1] if t in FLOATS else raw.shape[1] // GGML_BLOCK[t][1] * GGML_BLOCK[t][0]
    return Weight(f"w.{t.name}", t, (rows, k), raw)


def act(n, k, seed=1):
    x = np.random.default_rng(seed).standard_normal((n, k)).astype(np.float32)
    x[:, :7] *= 9.0            # uneven block maxima
    if n > 1:
        x[1, 32:64] = 0.0      # an all-zero block (d = 0)
    return x


def tol(t, raw, x):
    return 1e-5 * (np.abs(x).astype(np.float64) @ np.abs(dequantize_ref(t, raw)).T.astype(np.float64)) + 1e-30


@contextlib.contextmanager
def kernel_threads(n, split_small=False):
    """The matmul kernels on n threads; split_small: rows split between threads even for calls
    below the parallel threshold (small test shapes)."""
    old = mm.get_num_threads()
    mm.set_num_threads(n)
    if split_small:
        mm.set_parallel_min_bytes(0)
    try:
        yield n
    finally:
        if split_small:
            mm.set_parallel_min_bytes(131072)
        mm.set_num_threads(old)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    with kernel_threads(request.param):
        yield request.param


# --------------------------------------------------------------------------- exact parts ---
@pytest.mark.parametrize("t", BLOCK32 + KQUANTS + [T.F16, T.BF16])
def test_ref_dequantize_matches_gguf(t):
    raw = rand_weight(t, 5, 512)
    np.testing.assert_array_equal(dequantize_ref(t, raw), quants.dequantize(raw.view(np.uint8), GQ(int(t))))


@pytest.mark.parametrize("t", ALL)
def test_get_rows_exact(t):
    raw = rand_weight(t, 23, 512)
    ids = np.array([22, 0, 5, 5, 17])
    np.testing.assert_array_equal(mm.get_rows(weight(t, raw), ids), get_rows_ref(t, raw, ids))


def test_get_rows_out_of_range():
    with pytest.raises(BackendError):
        mm.get_rows(weight(T.Q8_0, rand_weight(T.Q8_0, 4, 64)), [4])


@pytest.mark.parametrize("t", [T.Q8_0, T.Q4_1])
def test_q8_0_activation_quantization_exact(t):
    x = act(6, 256)
    x[2, 5] = 0.5 * 127 / 9  # a value that lands near a rounding tie
    got = mm.quantize_activations(t, x)
    q, d, s = quantize_q8_0_ref(x)
    np.testing.assert_array_equal(got["q"], q)
    np.testing.assert_array_equal(got["d"], d)
    np.testing.assert_array_equal(got["s"], s)


def test_q8_K_activation_quantization_exact():
    x = act(5, 512)
    x[3, 256:] = 0.0
    x[4, 10] = -50.0           # the signed max sets the scale sign
    got = mm.quantize_activations(T.Q6_K, x)
    q, d, bs = quantize_q8_K_ref(x)
    np.testing.assert_array_equal(got["q"], q)
    np.testing.assert_array_equal(got["d"], d)
    np.testing.assert_array_equal(got["bsums"], bs)


def test_q8_K_4x8_activation_rule_for_Q4_K():
    """Q4_K activations follow ggml_quantize_mat_q8_K_4x8: the scale sign comes from whether
    +amax occurs anywhere (not from the first element of largest magnitude)."""
    x = act(4, 512)
    x[0, 3], x[0, 200] = -40.0, 40.0     # -amax first, +amax later: the two rules differ
    x[1, 5] = -40.0                      # only -amax
    x[2, 256:] = 0.0
    got = mm.quantize_activations(T.Q4_K, x)
    q, d, bs = quantize_q8_K_4x8_ref(x)
    np.testing.assert_array_equal(got["q"], q)
    np.testing.assert_array_equal(got["d"], d)
    np.testing.assert_array_equal(got["bsums"], bs)
    assert d[0, 0] < 0 < quantize_q8_K_ref(x)[1][0, 0]   # d = 1/iscale, iscale = -127/max
    assert d[1, 0] > 0


def test_float_activation_rounding():
    x = act(3, 64)
    np.testing.assert_array_equal(mm.quantize_activations(T.F16, x)["f"],
                                  x.astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(mm.quantize_activations(T.BF16, x)["f"], round_bf16(x))


def test_ref_q8_0_matches_gguf_codec_when_no_ties():
    """Our q8_0 activation rule (x86 llama.cpp: x * 127/amax, round half even) vs gguf's
    quantize_row_q8_0_ref (x / (amax/127), round half away): equal except at rare ties."""
    x = act(8, 512)
    q, d, _ = quantize_q8_0_ref(x)
    raw = quants.quantize(x, GQ.Q8_0).reshape(8, -1, 34)
    gq = raw[..., 2:].copy().view(np.int8).reshape(8, -1)
    assert np.mean(gq == q) > 0.999
    np.testing.assert_array_equal(raw[..., :2].copy().view(np.float16)[..., 0].astype(np.float32), d)


# --------------------------------------------------------------------------- cpu vs ref ---
@pytest.mark.parametrize("t", ALL)
def test_matmul_matches_ref(t, threads):
    rows, k = 37, 512
    raw = rand_weight(t, rows, k)
    x = act(9, k)
    y = mm.matmul(weight(t, raw), x)
    assert y.shape == (9, rows) and y.dtype == np.float32
    assert np.all(np.abs(y - matmul_ref(t, raw, x)) <= tol(t, raw, x))


@pytest.mark.parametrize("n", [1, 2, 3, 9])
@pytest.mark.parametrize("t", KQUANTS)
def test_kquant_matmul_bit_equal_to_ref(t, n):
    """K-quants: llama.cpp's prefill fma chains (Q4_K gemm per 64-pair, Q6_K tiled per
    super-block) in both, for every token count (the direct mat-vec path included)."""
    raw = rand_weight(t, 21, 768, seed=3)
    x = act(n, 768, seed=4)
    np.testing.assert_array_equal(mm.matmul(weight(t, raw), x), matmul_ref(t, raw, x))


@pytest.mark.parametrize("t", [T.Q8_0, T.Q5_0, T.Q4_K, T.Q6_K, T.F32])
def test_matvec_1d_and_out(t):
    raw = rand_weight(t, 10, 256)
    w, x = weight(t, raw), act(1, 256)[0]
    y = mm.matmul(w, x)
    assert y.shape == (10,)
    out = np.full((1, 10), np.nan, np.float32)
    assert mm.matmul(w, x[None], out=out) is out
    np.testing.assert_array_equal(out[0], y)


def test_leading_dims():
    raw = rand_weight(T.Q5_0, 6, 64)
    x = act(6, 64).reshape(2, 3, 64)
    y = mm.matmul(weight(T.Q5_0, raw), x)
    assert y.shape == (2, 3, 6)
    np.testing.assert_array_equal(y.reshape(6, 6), mm.matmul(weight(T.Q5_0, raw), x.reshape(6, 64)))


def test_out_with_row_stride():
    raw = rand_weight(T.Q8_0, 8, 64)
    x = act(3, 64)
    big = np.zeros((3, 12), np.float32)
    mm.matmul(weight(T.Q8_0, raw), x, out=big[:, :8])
    np.testing.assert_array_equal(big[:, :8], mm.matmul(weight(T.Q8_0, raw), x))
    assert not big[:, 8:].any()


def test_unsupported_type_and_shape():
    w = Weight("i8", T.I8, (2, 32), np.zeros((2, 32), np.uint8))
    with pytest.raises(BackendError):
        mm.matmul(w, np.zeros((1, 32), np.float32))
    with pytest.raises(BackendError):
        mm.matmul(weight(T.Q8_0, rand_weight(T.Q8_0, 2, 64)), np.zeros((1, 32), np.float32))


# ---------------------------------------------------------------------- invariance ---------
@pytest.mark.parametrize("t", ALL)
def test_batch_invariance_bit_exact(t, threads):
    """Row i of a 512-token call (row tiles through the decoded-row scratch) == the same token
    alone or in a 2-token call (direct mat-vec path) and in a 3-token call (partial tiles)."""
    rows, k = 19, 256                 # 19 rows: a partial row tile
    w = weight(t, rand_weight(t, rows, k))
    x = act(512, k, seed=7)
    y = mm.matmul(w, x)
    for i in (0, 1, 2, 3, 4, 257, 511):
        np.testing.assert_array_equal(mm.matmul(w, x[i:i + 1])[0], y[i])
    np.testing.assert_array_equal(mm.matmul(w, x[509:512]), y[509:512])
    np.testing.assert_array_equal(mm.matmul(w, x[100:102]), y[100:102])


@pytest.mark.parametrize("t", [T.Q8_0, T.Q5_0, T.Q4_K, T.Q6_K, T.F16, T.Q4_1, T.Q2_K])
@pytest.mark.parametrize("rows,n", [(61, 37), (1001, 1)])   # mat-mat tiles; direct mat-vec
def test_thread_invariance_bit_exact(t, rows, n):
    w = weight(t, rand_weight(t, rows, 512))
    x = act(n, 512)
    old = mm.get_num_threads()
    try:
        ys = []
        for nth in (1, 2, 3):
            mm.set_num_threads(nth)
            ys.append(mm.matmul(w, x))
    finally:
        mm.set_num_threads(old)
    np.testing.assert_array_equal(ys[0], ys[1])
    np.testing.assert_array_equal(ys[0], ys[2])


# ---------------------------------------------------------------------- real models ---------
REAL = {  # tensor -> (model fixture); every type in the bundled models, real shapes
    "gemma": ["token_embd.weight", "blk.0.attn_q.weight", "blk.0.attn_output.weight",
              "blk.0.ffn_down.weight", "blk.1.ffn_down.weight", "blk.0.attn_k.weight"],
    "qwen": ["token_embd.weight", "output.weight", "blk.0.ffn_down.weight",
             "blk.2.ffn_down.weight", "blk.0.attn_v.weight"],
}


def _real_weight(path, name, nrows=96):
    from pyllama.gguf import GGUFReader
    info = GGUFReader(path).tensors[name]
    raw = np.asarray(info.data[:nrows])
    return info.type, raw, Weight(name, info.type, raw.shape[:1] + info.shape[1:], raw)


@pytest.mark.realmodel
@pytest.mark.parametrize("model,name", [(m, n) for m, ns in REAL.items() for n in ns])
def test_real_model_rows(model, name, request):
    path = request.getfixturevalue(f"{model}_path")
    t, raw, w = _real_weight(path, name)
    k = w.shape[1]
    np.testing.assert_array_equal(mm.get_rows(w, [0, 95]), quants.dequantize(raw[[0, 95]], GQ(int(t))))
    x = act(5, k)
    y = mm.matmul(w, x)
    assert np.all(np.abs(y - matmul_ref(t, raw, x)) <= tol(t, raw, x))
    np.testing.assert_array_equal(mm.matmul(w, x[3:4])[0], y[3])
