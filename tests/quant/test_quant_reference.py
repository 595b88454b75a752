"""pyllama.quant vs independent oracles: gguf.quants (bit-exact) and scalar ports of ggml's C."""
import struct

import gguf
import gguf.quants as gq
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pyllama.gguf import GGML_BLOCK, GGMLType as T
from pyllama.quant import (BLOCK_LAYOUT, QUANTIZE_TYPES, VEC_DOT_TYPE, dequantize, quantize,
                           quantize_q8_0_rows, quantize_q8_1_rows, quantize_q8_K_rows)

GGUF_DEQ = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
            T.IQ4_NL]
GGUF_Q = [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def g(t):
    return gguf.GGMLQuantizationType(int(t))


def random_blocks(rng, t, n_blocks):
    """Random block bytes with every f16/f32 scale field replaced by a finite value."""
    lay = BLOCK_LAYOUT[t]
    raw = rng.integers(0, 256, n_blocks * lay.block_bytes, dtype=np.uint8)
    b = raw.view(lay.dtype)
    specials = np.array([0.0, -0.0, 6e-8, -6e-8, 65504.0, 1e-5], dtype=np.float16)
    for name, dt, _ in lay.fields:
        if dt in ("<f2", "<f4"):
            v = (rng.standard_normal(n_blocks) * 10.0 ** rng.integers(-4, 3, n_blocks))
            v[: len(specials)] = specials[: n_blocks]
            b[name] = v.astype(np.float16 if dt == "<f2" else np.float32)
    return raw


def test_layout_matches_ggml_sizes():
    for t, lay in BLOCK_LAYOUT.items():
        assert lay.dtype.itemsize == lay.block_bytes == GGML_BLOCK[t][1]
        if t != T.Q8_1:   # gguf-py still lists the old float d/s q8_1 (40 bytes); ggml has 36
            assert (lay.block_elems, lay.block_bytes) == gguf.GGML_QUANT_SIZES[g(t)]
    for w, a in VEC_DOT_TYPE.items():
        assert w in BLOCK_LAYOUT and a in BLOCK_LAYOUT
    assert BLOCK_LAYOUT[T.Q4_K].row_bytes(512) == 288
    with pytest.raises(ValueError):
        BLOCK_LAYOUT[T.Q4_K].row_bytes(100)


@pytest.mark.parametrize("t", GGUF_DEQ, ids=lambda t: t.name)
def test_dequantize_bitexact_vs_gguf(t):
    rng = np.random.default_rng(int(t))
    lay = BLOCK_LAYOUT[t]
    raw = random_blocks(rng, t, 3 * 5 * 4).reshape(3, 5, 4 * lay.block_bytes)
    ours = dequantize(raw, t, (3, 5, 4 * lay.block_elems))
    ref = gq.dequantize(raw, g(t))
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    assert np.array_equal(bits(ours), bits(ref))


@pytest.mark.parametrize("t", [T.F32, T.F16, T.BF16], ids=lambda t: t.name)
def test_dequantize_float_types(t):
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((4, 64)) * 100).astype(np.float32)
    typed = {T.F32: x, T.F16: x.astype(np.float16),
             T.BF16: gq.quantize(x, g(T.BF16)).view(np.uint16)}[t]
    ours = dequantize(typed, t, x.shape)
    assert np.array_equal(bits(ours), bits(gq.dequantize(typed.view(np.uint8), g(t))))
    # raw uint8 rows work as well as typed views
    assert np.array_equal(bits(dequantize(typed.view(np.uint8), t, x.shape)), bits(ours))


def test_dequantize_q8_k_and_q8_1_fields():
    rng = np.random.default_rng(7)
    for t in (T.Q8_K, T.Q8_1):
        raw = random_blocks(rng, t, 6)
        b = raw.view(BLOCK_LAYOUT[t].dtype)
        want = b["qs"].astype(np.float32) * b["d"].astype(np.float32)[:, None]
        n = BLOCK_LAYOUT[t].block_elems
        assert np.array_equal(bits(dequantize(raw, t, (6, n))), bits(want))


def test_dequantize_infers_shape():
    rng = np.random.default_rng(8)
    raw = random_blocks(rng, T.Q6_K, 6).reshape(3, 2 * 210)
    assert np.array_equal(bits(dequantize(raw, T.Q6_K)), bits(dequantize(raw, T.Q6_K, (3, 512))))
    x = rng.standard_normal((2, 3, 8)).astype(np.float16)
    assert dequantize(x, T.F16).shape == (2, 3, 8)
    assert dequantize(x.view(np.uint8), T.F16).shape == (2, 3, 8)
    with pytest.raises(ValueError):
        dequantize(raw[:, :100], T.Q6_K)


def test_dequantize_rejects_bad_sizes():
    with pytest.raises(ValueError):
        dequantize(np.zeros(35, np.uint8), T.Q8_0, (32,))
    with pytest.raises(ValueError):
        dequantize(np.zeros(34, np.uint8), T.Q8_0, (31,))
    with pytest.raises(NotImplementedError):
        dequantize(np.zeros(8, np.uint8), T.I64, (1,))


def quant_inputs(rng):
    """[rows, 256] covering the tricky cases: zeros, constants, ties, huge/tiny ranges."""
    x = rng.standard_normal((24, 256)).astype(np.float32)
    x[0] = 0
    x[1] = 3.0
    x[2] = -2.5
    x[3, :32] = np.arange(32) - 15.5               # many exact .5 ties after scaling
    x[4, :32] = np.linspace(-127, 127, 32).round()   # integer grid: q8_0 id == 1
    x[4, 32:64] = 0.5                                # x*id == .5 exactly: roundf vs rint
    x[4, 63] = 127
    x[5] *= 1e-6
    x[6] *= 1e4
    x[7] = np.abs(x[7])
    x[8] = -np.abs(x[8])
    x[9, ::2] = 0
    x[10, :] = 0
    x[10, 5] = -1.0                                 # single negative spike
    x[11] = np.repeat(rng.standard_normal(8) * 10.0 ** np.arange(-3, 5), 32)
    return x


@pytest.mark.parametrize("t", GGUF_Q + [T.F16, T.BF16], ids=lambda t: t.name)
def test_quantize_bitexact_vs_gguf(t):
    x = quant_inputs(np.random.default_rng(11))
    ours = quantize(x, t)
    ref = np.ascontiguousarray(gq.quantize(x, g(t))).view(np.uint8).reshape(ours.shape)
    assert ours.dtype == np.uint8
    assert np.array_equal(ours, ref)


def test_quantize_f32_and_shapes():
    x = quant_inputs(np.random.default_rng(1)).reshape(2, 12, 256)
    assert np.array_equal(quantize(x, T.F32).view(np.float32), x)
    assert quantize(x, T.Q4_K).shape == (2, 12, 144)
    with pytest.raises(ValueError):
        quantize(x[..., :100], T.Q8_0)
    with pytest.raises(NotImplementedError):
        quantize(x, T.IQ2_XXS)


@settings(max_examples=60, deadline=None)
@given(t=st.sampled_from(GGUF_Q),
       x=hnp.arrays(np.float32, st.sampled_from([(1, 32), (2, 64), (3, 32)]),
                    elements=st.floats(-1e4, 1e4, width=32, allow_subnormal=False)))
def test_quantize_matches_gguf_property(t, x):
    # gguf's numpy takes an all-zero block's max from its first element, -0.0 included, where
    # llama.cpp's C keeps max = +0.0 (so d = -0.0): compare on +0.0 (test_zero_block_scale_sign)
    x = np.where(x == 0, np.float32(0), x).astype(np.float32)
    ours = quantize(x, t)
    with np.errstate(all="ignore"):     # gguf's numpy warns where 1/d overflows (tiny blocks)
        ref = gq.quantize(x, g(t))
    ref = np.ascontiguousarray(ref).view(np.uint8).reshape(ours.shape)
    assert np.array_equal(ours, ref)


def test_zero_block_scale_sign():
    """An all-zero Q4_0 / Q5_0 block, zeros of either sign: llama.cpp's quantize_row_q*_0_ref keeps
    max = +0.0 (no |x| beats amax = 0), so d = +0.0 / -nmax = -0.0 (f16 0x8000)."""
    for zero in (0.0, -0.0):
        x = np.full((1, 32), zero, np.float32)
        for t in (T.Q4_0, T.Q5_0):
            assert quantize(x, t)[0, :2].tobytes() == b"\x00\x80"


def nearest_int_c(f):
    """ggml's nearest_int, literally: add 1.5*2^23 in float32 and read the mantissa."""
    v = np.float32(np.float32(f) + np.float32(12582912.0))
    i = struct.unpack("<i", struct.pack("<f", v))[0]
    return (i & 0x007FFFFF) - 0x00400000


def q8_k_block_c(x):
    """Scalar transcription of quantize_row_q8_K_ref for one block of 256."""
    amax, mx = np.float32(0), np.float32(0)
    for v in x:
        if abs(v) > amax:
            amax, mx = abs(v), v
    if amax == 0:
        return np.float32(0), np.zeros(256, np.int8)
    iscale = np.float32(-127.0) / mx
    qs = np.array([min(127, nearest_int_c(np.float32(iscale * v))) for v in x], np.int8)
    return np.float32(np.float32(1) / iscale), qs


def test_quantize_q8_k_vs_scalar_c():
    x = quant_inputs(np.random.default_rng(3))
    raw = quantize(x, T.Q8_K)
    b = raw.reshape(-1).view(BLOCK_LAYOUT[T.Q8_K].dtype)
    for i, row in enumerate(x):
        d, qs = q8_k_block_c(row)
        assert np.array_equal(b["qs"][i], qs), i
        assert b["d"][i].view(np.uint32) == np.float32(d).view(np.uint32), i
        assert np.array_equal(b["bsums"][i], qs.reshape(16, 16).astype(np.int32).sum(1)), i


def test_quantize_q8_1_vs_q8_0():
    x = quant_inputs(np.random.default_rng(4)).reshape(-1, 32)
    b1 = quantize(x, T.Q8_1).reshape(-1).view(BLOCK_LAYOUT[T.Q8_1].dtype)
    b0 = quantize(x, T.Q8_0).reshape(-1).view(BLOCK_LAYOUT[T.Q8_0].dtype)
    assert np.array_equal(b1["qs"], b0["qs"])
    assert np.array_equal(b1["d"].view(np.uint16), b0["d"].view(np.uint16))
    d32 = np.abs(x).max(1) / np.float32(127)
    with np.errstate(over="ignore"):   # row 6 (x 1e4): s overflows f16 to inf, as in ggml
        s = (b1["qs"].astype(np.int32).sum(1).astype(np.float32) * d32).astype(np.float16)
    assert np.array_equal(b1["s"].view(np.uint16), s.view(np.uint16))


@pytest.mark.parametrize("t,bound,worst", [(T.Q2_K, 0.32, 0.35), (T.Q3_K, 0.17, 0.2),
                                           (T.Q4_K, 0.09, 0.1), (T.Q5_K, 0.045, 0.1),
                                           (T.Q6_K, 0.022, 0.1), (T.IQ4_NL, 0.085, 0.12)],
                         ids=lambda v: getattr(v, "name", str(v)))
def test_kquant_roundtrip(t, bound, worst):
    rng = np.random.default_rng(int(t))
    x = quant_inputs(rng)
    raw = quantize(x, t)
    y = dequantize(raw, t, x.shape)
    assert np.array_equal(bits(y), bits(gq.dequantize(raw, g(t))))   # valid, standard blocks
    g_rows = rng.standard_normal((64, 256)).astype(np.float32)
    yg = dequantize(quantize(g_rows, t), t, g_rows.shape)
    assert np.sqrt(((yg - g_rows) ** 2).mean() / (g_rows ** 2).mean()) < bound
    near = 1e-2 if t == T.IQ4_NL else 2e-3  # IQ4_NL has no 0 level: 0 -> d * 1 ~ max/127
    for i in (0, 1, 2, 10):                 # zeros, constants, one spike: near-exact
        assert np.abs(y[i] - x[i]).max() <= near * max(1.0, np.abs(x[i]).max())
    ok = np.arange(len(x)) != 5     # row 5 is ~1e-6: the f16 super-block scale underflows
    scale = np.abs(x).max(axis=1, keepdims=True)
    assert (np.abs(y - x) <= worst * scale)[ok].all()


def test_kquant_beats_legacy_of_same_bits():
    x = np.random.default_rng(9).standard_normal((64, 256)).astype(np.float32)

    def err(t):
        return float(np.abs(dequantize(quantize(x, t), t, x.shape) - x).mean())
    assert err(T.Q4_K) < err(T.Q4_0)
    assert err(T.Q5_K) < err(T.Q5_0)
    assert err(T.Q6_K) < err(T.Q5_1)
    assert err(T.Q4_K) < err(T.Q3_K) < err(T.Q2_K)


def test_quantize_types_listed():
    assert {T.F32, T.F16, T.BF16, T.Q8_0, T.Q8_1, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_K,
            T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL} == QUANTIZE_TYPES


def test_q8_0_rows_match_blocks():
    x = quant_inputs(np.random.default_rng(12))
    qs, d = quantize_q8_0_rows(x)
    assert qs.shape == (24, 8, 32) and d.shape == (24, 8) and d.dtype == np.float32
    b = quantize(x, T.Q8_0).reshape(24, 8, 34).reshape(-1).view(BLOCK_LAYOUT[T.Q8_0].dtype)
    assert np.array_equal(qs.reshape(-1, 32), b["qs"])
    assert np.array_equal(bits(d.reshape(-1)), bits(b["d"].astype(np.float32)))


def q8_simd_block_c(x):
    """x86 AVX2 quantize_row_q8_0 for one block: id = 127/amax, round half to even."""
    amax = np.float32(np.abs(x).max())
    idv = np.float32(127) / amax if amax != 0 else np.float32(0)
    return (np.float32(amax / np.float32(127)),
            np.array([nearest_int_c(np.float32(v * idv)) for v in x], np.int8))


def test_q8_0_rows_simd_variant():
    x = quant_inputs(np.random.default_rng(13))[:6]
    qs, d = quantize_q8_0_rows(x, simd=True)
    for i in range(6):
        for j in range(8):
            dd, q = q8_simd_block_c(x[i, 32 * j:32 * j + 32])
            assert np.array_equal(qs[i, j], q)
            assert d[i, j] == np.float32(np.float16(dd))
    ref_qs, _ = quantize_q8_0_rows(x)
    assert not np.array_equal(qs, ref_qs)   # row 4 holds exact .5 ties: roundf != rint


def test_q8_1_rows():
    x = quant_inputs(np.random.default_rng(14))
    qs, d, s = quantize_q8_1_rows(x)
    b = quantize(x, T.Q8_1).reshape(-1).view(BLOCK_LAYOUT[T.Q8_1].dtype)
    assert np.array_equal(qs.reshape(-1, 32), b["qs"])
    assert np.array_equal(bits(d.reshape(-1)), bits(b["d"].astype(np.float32)))
    assert np.array_equal(bits(s.reshape(-1)), bits(b["s"].astype(np.float32)))


def test_q8_K_rows_match_blocks():
    x = quant_inputs(np.random.default_rng(15)).reshape(12, 512)
    qs, d, bsums = quantize_q8_K_rows(x)
    assert qs.shape == (12, 2, 256) and d.shape == (12, 2) and bsums.shape == (12, 2, 16)
    assert bsums.dtype == np.int16 and d.dtype == np.float32
    b = quantize(x, T.Q8_K).reshape(-1).view(BLOCK_LAYOUT[T.Q8_K].dtype)
    assert np.array_equal(qs.reshape(-1, 256), b["qs"])
    assert np.array_equal(bits(d.reshape(-1)), bits(b["d"]))
    assert np.array_equal(bsums.reshape(-1, 16), b["bsums"])
    # the integer dot with a dequantized weight row reproduces the float dot closely
    y = dequantize(quantize(x, T.Q8_K), T.Q8_K, x.shape)
    assert np.abs(y - x).max() <= np.abs(x).max() / 127 + 1e-6


def test_rows_reject_bad_shapes():
    with pytest.raises(ValueError):
        quantize_q8_0_rows(np.zeros((2, 33), np.float32))
    with pytest.raises(ValueError):
        quantize_q8_K_rows(np.zeros(256, np.float32))
