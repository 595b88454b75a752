"""bf16 / q8_0 / q4_0 KV caches at the backend level (both score modes: f32 q against the
dequantized K, the default, and kv_q_conv: q converted to K's vec_dot_type as llama.cpp).

Oracles: the `gguf` package's quantizers/dequantizers, pyllama.quant's model of llama.cpp's x86
AVX2 quantize_row_q8_0 (what llama.cpp's CPU set_rows writes into a q8_0 cache), and RefBackend
(float64 attention over the dequantized cache with q quantized as llama.cpp's FA path does)."""
import gguf
import numpy as np
import pytest

from pyllama.backend.base import KV_BLOCK, KV_TYPES, kv_decode, kv_encode, kv_type
from pyllama.backend.ref import RefBackend
from pyllama.errors import BackendError
from pyllama.quant import quantize_q8_0_rows

cpu_mod = pytest.importorskip("pyllama.backend.cpu")
QTYPES = ("bf16", "q8_0", "q4_0")
GQ = gguf.GGMLQuantizationType


@pytest.fixture(scope="module")
def cpu():
    return cpu_mod.CpuBackend(2)


@pytest.fixture(scope="module")
def ref():
    return RefBackend()


def nasty_rows(rng, n, row):
    """Gaussian rows plus blocks that hit the quantizers' corner cases: all zero, one spike,
    exact ties for the q8_0 rounding (x * 127/amax = k + 0.5), huge and tiny magnitudes."""
    x = (rng.standard_normal((n, row)) * 2).astype(np.float32)
    x[0, :32] = 0
    x[1, :32] = 0
    x[1, 5] = -3.5
    x[2, :32] = (np.arange(32) - 15.5) * np.float32(127 / 127)       # amax 16.5 ...
    x[2, 0] = 127                                                     # ... id = 1: ties
    x[3, :32] *= 1e4
    x[4, :32] *= 1e-30
    return x


@pytest.mark.parametrize("name", QTYPES)
def test_cpu_set_rows_bit_exact_with_kv_encode(cpu, name):
    rng = np.random.default_rng(0)
    rows = nasty_rows(rng, 24, 128)
    cache = cpu.alloc_kv(40, 128, name)
    assert cache.shape == (40, 128 // KV_BLOCK[name]) and kv_type(cache) == name
    cells = rng.permutation(40)[:24]
    cpu.set_rows(cache, cells, rows)
    assert cache[cells].tobytes() == kv_encode(rows, name).tobytes()
    untouched = np.setdiff1d(np.arange(40), cells)
    assert not cache[untouched].view(np.uint8).any()


def test_q4_0_encode_rounds_twice_as_llamacpp(cpu):
    """quantize_row_q4_0_ref lives in llama.cpp's ggml-base, built without FMA: q = (int8)(x * id
    + 8.5) rounds x * id first. Blocks where an fma would give another nibble (about 1 row in
    10^5: picked here out of random rows) are encoded as kv_encode's two roundings."""
    rng = np.random.default_rng(7)
    found = []
    while sum(map(len, found)) < 3:
        x = rng.standard_normal((100_000, 32)).astype(np.float32)
        mx = x[np.arange(len(x)), np.abs(x).argmax(1)]
        idv = (np.float32(1) / (mx / np.float32(-8))).astype(np.float32)[:, None]
        two = np.trunc(((x * idv).astype(np.float32) + np.float32(8.5)).astype(np.float32))
        fused = np.trunc((x.astype(np.float64) * idv.astype(np.float64) + 8.5).astype(np.float32))
        found.append(x[(two != fused).any(axis=1)])
    rows = np.concatenate(found)
    cache = cpu.alloc_kv(len(rows), 32, "q4_0")
    cpu.set_rows(cache, np.arange(len(rows)), rows)
    assert np.array_equal(cache.view(np.uint8), kv_encode(rows, "q4_0").view(np.uint8))


def test_q8_0_encode_is_llamacpp_cpu_quantizer():
    """q8_0 cells hold the AVX2 quantize_row_q8_0 output (id = 127/amax, ties to even): equal to
    gguf's reference quantizer except on ties, where they differ by exactly one step."""
    rng = np.random.default_rng(1)
    rows = nasty_rows(rng, 16, 256)
    enc = kv_encode(rows, "q8_0")
    qs, d = quantize_q8_0_rows(rows, simd=True)
    assert np.array_equal(enc["qs"], qs) and np.array_equal(enc["d"].astype(np.float32), d)
    ref = gguf.quants.quantize(rows, GQ.Q8_0).view(KV_TYPES["q8_0"]).reshape(enc.shape)
    assert np.array_equal(ref["d"], enc["d"])
    diff = np.abs(ref["qs"].astype(int) - enc["qs"].astype(int))
    assert diff.max() == 1
    assert diff[2, 0].sum() == 16            # x = k + 0.5 exactly: roundf vs half-to-even
    assert (diff[5:] == 1).mean() < 1e-3     # elsewhere only where 127/amax != 1/(amax/127)


@pytest.mark.parametrize("name,gq", [("q4_0", GQ.Q4_0), ("bf16", GQ.BF16)])
def test_encode_decode_match_gguf(name, gq):
    rng = np.random.default_rng(2)
    rows = nasty_rows(rng, 16, 256)
    enc = kv_encode(rows, name)
    assert enc.tobytes() == gguf.quants.quantize(rows, gq).tobytes()
    raw = np.frombuffer(enc.tobytes(), np.uint8).reshape(16, -1)
    np.testing.assert_array_equal(kv_decode(enc, name), gguf.quants.dequantize(raw, gq))


def test_q8_0_decode_matches_gguf():
    rows = nasty_rows(np.random.default_rng(3), 8, 64)
    enc = kv_encode(rows, "q8_0")
    raw = np.frombuffer(enc.tobytes(), np.uint8).reshape(8, -1)
    np.testing.assert_array_equal(kv_decode(enc, "q8_0"), gguf.quants.dequantize(raw, GQ.Q8_0))


def make_caches(be, rng, kt, vt, n_cells, n_kv, dk, dv):
    k = be.alloc_kv(n_cells, n_kv * dk, kt)
    v = be.alloc_kv(n_cells, n_kv * dv, vt)
    cells = np.arange(n_cells)
    be.set_rows(k, cells, (rng.standard_normal((n_cells, n_kv * dk)) * 2).astype(np.float32))
    be.set_rows(v, cells, rng.standard_normal((n_cells, n_kv * dv)).astype(np.float32))
    return k, v


PAIRS = [(k, v) for k in ("f16", *QTYPES) for v in ("f16", "f32", *QTYPES) if (k, v) != ("f16", "f16")]


@pytest.mark.parametrize("qconv", [False, True])
@pytest.mark.parametrize("kt,vt", PAIRS)
def test_attention_matches_ref(kt, vt, qconv):
    cpu, ref = cpu_mod.CpuBackend(2), RefBackend()
    cpu.kv_q_conv = ref.kv_q_conv = qconv
    rng = np.random.default_rng(4)
    n_kv, dk, n_head = 2, 64, 6
    k, v = make_caches(ref, rng, kt, vt, 50, n_kv, dk, dk)
    q = rng.standard_normal((5, n_head, dk)).astype(np.float32)
    cells = rng.permutation(50)[:40].astype(np.int32)
    qs, qe = np.array([0, 3, 5, 10, 7]), np.array([17, 3, 40, 30, 8])   # one empty list
    for cap in (0.0, 3.0):
        a = cpu.attention(q, k, v, cells, qs, qe, 0.125, cap)
        b = ref.attention(q, k, v, cells, qs, qe, 0.125, cap)
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=3e-6)
        assert not a[1].any()


def test_attention_head_256_gemma_shape(cpu, ref):
    """Gemma 3 270M's attention shape (4 heads, 1 KV head, head size 256), q8_0 K and V."""
    rng = np.random.default_rng(5)
    k, v = make_caches(cpu, rng, "q8_0", "q8_0", 300, 1, 256, 256)
    q = rng.standard_normal((3, 4, 256)).astype(np.float32)
    cells = np.arange(300, dtype=np.int32)
    qs, qe = np.array([0, 0, 44]), np.array([300, 1, 300])
    np.testing.assert_allclose(cpu.attention(q, k, v, cells, qs, qe, 0.0625),
                               ref.attention(q, k, v, cells, qs, qe, 0.0625), rtol=1e-5, atol=3e-6)


@pytest.mark.parametrize("qconv", [False, True])
def test_q8_0_scores_float_q_or_quantized_q(qconv):
    """Two cells whose V rows are e0 and e1: out[0] / out[1] = exp(s0 - s1) reveals the scores.
    By default they are the float q against the dequantized K; with kv_q_conv q is quantized to
    q8_0 first (llama.cpp's vec_dot_q8_0_q8_0)."""
    cpu = cpu_mod.CpuBackend(1)
    cpu.kv_q_conv = qconv
    rng = np.random.default_rng(6)
    dk = 64
    k = cpu.alloc_kv(2, dk, "q8_0")
    v = cpu.alloc_kv(2, dk, "f32")
    cpu.set_rows(k, [0, 1], rng.standard_normal((2, dk)).astype(np.float32))
    vv = np.zeros((2, dk), np.float32)
    vv[0, 0] = vv[1, 1] = 1
    cpu.set_rows(v, [0, 1], vv)
    q = rng.standard_normal((1, 1, dk)).astype(np.float32)
    out = cpu.attention(q, k, v, np.array([0, 1], np.int32), [0], [2], 1.0)[0, 0]
    kd = kv_decode(k, "q8_0").astype(np.float64)
    qq, qd = quantize_q8_0_rows(q[0], simd=True)
    qdeq = (qq[0].astype(np.float64) * qd[0][:, None]).reshape(-1)
    s_quant, s_float = kd @ qdeq, kd @ q[0, 0].astype(np.float64)
    s = s_quant if qconv else s_float
    assert np.log(out[0] / out[1]) == pytest.approx(s[0] - s[1], abs=1e-5)
    assert abs((s_float[0] - s_float[1]) - (s_quant[0] - s_quant[1])) > 1e-4   # distinguishable


@pytest.mark.parametrize("qconv", [False, True])
@pytest.mark.parametrize("kt", QTYPES)
def test_attention_batch_and_thread_invariant(kt, qconv):
    rng = np.random.default_rng(7)
    one, two = cpu_mod.CpuBackend(1), cpu_mod.CpuBackend(2)
    one.kv_q_conv = two.kv_q_conv = qconv
    k, v = make_caches(one, rng, kt, kt, 600, 2, 64, 64)
    q = rng.standard_normal((8, 4, 64)).astype(np.float32)
    cells = np.arange(600, dtype=np.int32)
    qs, qe = np.zeros(8, np.int64), np.arange(593, 601, dtype=np.int64)
    full = two.attention(q, k, v, cells, qs, qe, 0.125)
    assert np.array_equal(full, one.attention(q, k, v, cells, qs, qe, 0.125))
    for i in (0, 5):
        alone = one.attention(q[i:i + 1], k, v, cells, qs[i:i + 1], qe[i:i + 1], 0.125)
        assert np.array_equal(alone[0], full[i])


@pytest.mark.parametrize("qconv", [False, True])
@pytest.mark.parametrize("kt,vt", [("q8_0", "q8_0"), ("q4_0", "bf16"), ("bf16", "q4_0"), ("f16", "q8_0")])
def test_head_grouping_never_changes_a_result(kt, vt, qconv):
    """_attn_q tasks take 1..8 heads of one KV head (K/V rows dequantized once for them, in
    chunks of cells): every grouping, thread count and list length gives the same bits."""
    from pyllama.backend.cpu import _attn_q
    ids = {"f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}
    rng = np.random.default_rng(8)
    n_kv, group, d = 2, 7, 64                     # Qwen2.5's GQA shape
    k, v = make_caches(RefBackend(), rng, kt, vt, 70, n_kv, d, d)
    kb, vb = (np.ascontiguousarray(c).view(np.uint8).reshape(70, -1) for c in (k, v))
    q = rng.standard_normal((3, n_kv * group, d)).astype(np.float32)
    cells = rng.permutation(70).astype(np.int32)
    qs, qe = np.array([0, 5, 0], np.int64), np.array([70, 22, 1], np.int64)   # 1, 17, 70 cells
    outs = []
    for hb, nt in ((1, 1), (2, 2), (3, 1), (7, 2), (8, 1), (0, 2)):
        out = np.zeros((3, n_kv * group, d), np.float32)
        _attn_q.attention(q, kb, vb, ids[kt], ids[vt], qconv, n_kv, cells, qs, qe, 0.125, 0.0,
                          out, 70, nt, hb)
        outs.append(out)
    assert all(o.tobytes() == outs[0].tobytes() for o in outs[1:])
    assert _attn_q.heads_per_task(1, 2, 7, 2) == 7 and _attn_q.heads_per_task(1, 1, 4, 2) == 2


def test_block_types_need_heads_of_32(cpu):
    rng = np.random.default_rng(8)
    k, v = make_caches(cpu, rng, "q8_0", "q8_0", 4, 1, 64, 64)
    q = rng.standard_normal((1, 4, 16)).astype(np.float32)   # head size 16: 4 KV heads of 16
    with pytest.raises(BackendError):
        cpu.attention(q, k, v, np.array([0], np.int32), [0], [1], 0.1)
    with pytest.raises(BackendError):
        cpu.set_rows(k, [4], np.zeros((1, 64), np.float32))


def test_ref_set_rows_and_alloc(ref):
    rows = nasty_rows(np.random.default_rng(9), 6, 64)
    for name in KV_TYPES:
        cache = ref.alloc_kv(8, 64, name)
        ref.set_rows(cache, np.arange(6), rows)
        assert cache[:6].tobytes() == kv_encode(rows, name).tobytes()
    with pytest.raises(ValueError):
        ref.alloc_kv(8, 48, "q8_0")
