"""The Walsh-Hadamard rotation of quantized KV caches (llama.cpp 0c1e570 `attn_rot_k/v`): q and K
(and V, with the attention output rotated back) are multiplied per head by the orthonormal H_n
before K/V are quantized, when the cache type is quantized and the head size a multiple of 64.
Oracles: the explicit Sylvester matrix (float64), a scalar model of ggml's FWHT pass order, and
f32-KV runs of the same model (attention is rotation invariant in exact arithmetic)."""
import numpy as np
import pytest

import pyllama
from pyllama.backend.base import hadamard, kv_decode, kv_encode
from pyllama.backend.cpu import _attn_q
from pyllama.kv.cache import attn_rot
from tiny import random_tokens as tokens

# head size 64 (Qwen2.5's) and 128 (K rotated by H_128, V in 64-chunks), GQA on both
QWEN64 = {"attention.key_length": 64, "attention.value_length": 64}
GEMMA128 = {"attention.key_length": 128, "attention.value_length": 128}


def context(model, **kw):
    """A Context with flash attention on, which a quantized V cache needs (llama_init_from_model);
    in the invariant numerics of these tests it changes no arithmetic."""
    return pyllama.Context(model, flash_attn=True, **kw)


def sylvester(n):
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h / np.sqrt(n)


def fwht_scalar(x):
    """ggml_compute_forward_fwht on one row, element by element in float32."""
    n = len(x)
    y = [np.float32(v) * (np.float32(1) / np.sqrt(np.float32(n))) for v in x]
    h = 1
    while h < n:
        for i in range(0, n, 2 * h):
            for j in range(i, i + h):
                u, v = y[j], y[j + h]
                y[j], y[j + h] = np.float32(u + v), np.float32(u - v)
        h *= 2
    return np.array(y, dtype=np.float32)


def test_rotation_rule_as_llamacpp(monkeypatch):
    monkeypatch.delenv("LLAMA_ATTN_ROT_DISABLE", raising=False)
    assert attn_rot("q8_0", "q8_0", [64] * 3, [64] * 3) == (64, 64)
    assert attn_rot("q4_0", "f16", [256], [256]) == (256, 0)
    assert attn_rot("f16", "q8_0", [128], [128]) == (0, 64)
    assert attn_rot("q8_0", "q8_0", [192], [192]) == (64, 64)       # largest power of 2 dividing
    assert attn_rot("q8_0", "q8_0", [96], [96]) == (0, 0)           # not a multiple of 64
    assert attn_rot("q8_0", "q8_0", [32], [32]) == (0, 0)
    assert attn_rot("bf16", "bf16", [64], [64]) == (0, 0)           # bf16 is not quantized
    assert attn_rot("f16", "f16", [64], [64]) == (0, 0)
    assert attn_rot("q8_0", "q8_0", [64, 128], [64, 64]) == (0, 64)  # head sizes differ: no K rot
    assert attn_rot("q8_0", "q8_0", [], []) == (0, 0)
    monkeypatch.setenv("LLAMA_ATTN_ROT_DISABLE", "1")
    assert attn_rot("q8_0", "q8_0", [64], [64]) == (0, 0)


@pytest.mark.parametrize("n", [64, 128, 256])
def test_hadamard_is_the_orthonormal_sylvester_matrix(n):
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((3, 2, 2 * n)) * 10).astype(np.float32)
    y = hadamard(x, n)
    want = x.reshape(-1, n).astype(np.float64) @ sylvester(n).T
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.abs(y.reshape(-1, n) - want).max() < 1e-5 * np.abs(x).max()
    assert np.abs(hadamard(y, n) - x).max() < 1e-5 * np.abs(x).max()   # H @ H = I


def test_hadamard_follows_ggml_pass_order_bit_for_bit():
    rng = np.random.default_rng(1)
    for n in (64, 128):
        x = (rng.standard_normal(n) * rng.uniform(0.01, 300, n)).astype(np.float32)
        assert hadamard(x[None], n)[0].tobytes() == fwht_scalar(x).tobytes()


@pytest.mark.parametrize("n", [64, 128, 256, 512])
@pytest.mark.parametrize("threads", [1, 2])
def test_cpu_kernel_bit_exact_with_numpy(n, threads):
    rng = np.random.default_rng(n + threads)
    for rows in (1, 3, 300):                              # 300 rows: the threaded branch
        x = (rng.standard_normal((rows, 2 * n)) * rng.uniform(1e-3, 1e3, (rows, 1))).astype(np.float32)
        y = x.copy()
        _attn_q.hadamard(y, n, threads)
        assert y.tobytes() == hadamard(x, n).tobytes()
    with pytest.raises(ValueError):
        _attn_q.hadamard(np.zeros((1, 96), np.float32), 64, 1)


@pytest.fixture(scope="module")
def qwen64(tiny_model_path):
    return pyllama.load_model(tiny_model_path("qwen2", overrides=QWEN64))


@pytest.fixture(scope="module")
def gemma128(tiny_model_path):
    return pyllama.load_model(tiny_model_path("gemma3", overrides=GEMMA128))


@pytest.mark.parametrize("kt,vt", [("q8_0", "q8_0"), ("q4_0", "f16"), ("f16", "q8_0")])
def test_cache_holds_rotated_rows(qwen64, kt, vt):
    """Layer 0's K/V rows are the type's encoding of H k / H v (k, v from an f32-KV run: the
    layer-0 projections do not depend on the cache type)."""
    toks = tokens(20)
    ref = context(qwen64, n_ctx=256, type_k="f32", type_v="f32")
    ref.eval(toks)
    ctx = context(qwen64, n_ctx=256, type_k=kt, type_v=vt, kv_k_center=False)
    ctx.eval(toks)
    assert ctx.memory.attn_rot(0) == (64 if kt != "f16" else 0, 64 if vt != "f16" else 0)
    for buf, t, r in ((ctx.memory.k[0], kt, ref.memory.k[0]), (ctx.memory.v[0], vt, ref.memory.v[0])):
        want = r[:20] if t == "f16" else hadamard(r[:20], 64)
        assert buf[:20].tobytes() == kv_encode(want, t).tobytes()


@pytest.mark.parametrize("kt", ["q8_0", "q4_0"])
def test_rotation_cancels_in_the_logits(qwen64, kt, monkeypatch):
    """Rotated q8_0 logits stay close to f32 KV, and differ from the unrotated run."""
    toks = tokens(40, seed=3)
    f32 = context(qwen64, n_ctx=256, type_k="f32", type_v="f32").eval(toks, logits_all=True)
    rot = context(qwen64, n_ctx=256, type_k=kt, type_v=kt).eval(toks, logits_all=True)
    monkeypatch.setenv("LLAMA_ATTN_ROT_DISABLE", "1")
    plain = context(qwen64, n_ctx=256, type_k=kt, type_v=kt).eval(toks, logits_all=True)
    tol = {"q8_0": 0.1, "q4_0": 0.6}[kt] * np.abs(f32).max()
    assert np.abs(rot - f32).max() < tol and np.abs(plain - f32).max() < tol
    assert not np.array_equal(rot, plain)


@pytest.mark.parametrize("kt,vt", [("q8_0", "q8_0"), ("q4_0", "q8_0")])
def test_rotated_caches_are_batch_invariant(gemma128, kt, vt):
    """iSWA (K rotated by H_128, V in 64-chunks): prefill == ubatch 5 == token by token, and the
    small SWA cache == --swa-full past its size."""
    toks = tokens(60, seed=4)
    kw = dict(n_ctx=512, type_k=kt, type_v=vt)
    a = context(gemma128, **kw).eval(toks, logits_all=True)
    b = context(gemma128, n_ubatch=5, **kw).eval(toks, logits_all=True)
    one = context(gemma128, **kw)
    c = np.concatenate([one.eval([t]) for t in toks])
    assert one.memory.attn_rot(0) == (128, 64)
    assert np.array_equal(a, b) and np.array_equal(a, c)
    full = context(gemma128, n_ubatch=32, swa_full=True, **kw).eval(toks, logits_all=True)
    small = context(gemma128, n_ubatch=32, **kw)
    assert np.array_equal(small.eval(toks, logits_all=True), full)


@pytest.mark.parametrize("center", [False, True])
def test_k_shift_unrotates_ropes_and_rerotates(qwen64, center):
    """seq_add on a rotated q8_0 K cache: dequantize, H, rope, H, requantize (llama.cpp's
    build_rope_shift for quantized K); a centered K gets its offset back around the rope."""
    ctx = context(qwen64, n_ctx=256, type_k="q8_0", type_v="q8_0", kv_k_center=center)
    ctx.eval(tokens(30, seed=5))
    mem = ctx.memory
    k0 = {il: mem.k[il].copy() for il in mem.layers}
    mem.seq_add(0, 10, -1, 5)
    mem.update()
    hp = qwen64.hparams
    cells = np.flatnonzero(mem.cells[0].pos >= 15)
    for il in mem.layers:
        c = mem.k_offset(il).reshape(hp.n_head_kv, -1) if center else np.float32(0)
        rows = hadamard(kv_decode(k0[il][cells], "q8_0").reshape(len(cells), hp.n_head_kv, -1), 64)
        want = qwen64.backend.rope(rows + c, np.full(len(cells), 5, np.int32), hp.n_rot,
                                   hp.rope_base(il), hp.rope_scale(il), hp.rope_type) - c
        want = hadamard(want.astype(np.float32), 64).reshape(len(cells), -1)
        assert mem.k[il][cells].tobytes() == kv_encode(want, "q8_0").tobytes()


def test_cpu_and_ref_backends_rotate_alike(tiny_model_path, qwen64):
    toks = tokens(16, seed=6)
    ref_model = pyllama.load_model(tiny_model_path("qwen2", overrides=QWEN64), backend="ref")
    a = context(qwen64, n_ctx=256, type_k="q8_0", type_v="q8_0")
    b = context(ref_model, n_ctx=256, type_k="q8_0", type_v="q8_0")
    la, lb = a.eval(toks, logits_all=True), b.eval(toks, logits_all=True)
    assert a.memory.k[0][:16].tobytes() == b.memory.k[0][:16].tobytes()
    row_err = np.abs(la - lb).max(axis=1) / np.abs(lb).max()
    assert np.sort(row_err)[-2] < 1e-5 and row_err.max() < 1e-2


# ---- kv_k_center (opt-in, not llama.cpp): K rows stored minus the layer's K bias ----------------
def test_k_center_stores_k_minus_bias_and_keeps_invariants(qwen64, tiny_model_path):
    toks = tokens(30, seed=7)
    ref = context(qwen64, n_ctx=256, type_k="f32", type_v="f32")
    f32 = ref.eval(toks, logits_all=True)
    kw = dict(n_ctx=256, type_k="q8_0", type_v="q8_0", kv_k_center=True)
    ctx = context(qwen64, **kw)
    a = ctx.eval(toks, logits_all=True)
    bias = np.asarray(qwen64.weights.layers[0].attn_k_b.raw, np.float32)
    assert np.array_equal(ctx.memory.k_offset(0), bias)
    want = hadamard((ref.memory.k[0][:30] - bias).astype(np.float32), 64)
    assert ctx.memory.k[0][:30].tobytes() == kv_encode(want, "q8_0").tobytes()
    assert np.abs(a - f32).max() < 0.1 * np.abs(f32).max()
    b = context(qwen64, n_ubatch=4, **kw).eval(toks, logits_all=True)
    one = context(qwen64, **kw)
    c = np.concatenate([one.eval([t]) for t in toks])
    assert np.array_equal(a, b) and np.array_equal(a, c)


def test_k_center_only_for_quantized_k_and_no_softcap(qwen64, tiny_model_path):
    toks = tokens(12, seed=8)
    plain = context(qwen64, n_ctx=256).eval(toks, logits_all=True)
    ctx = context(qwen64, n_ctx=256, kv_k_center=True)          # f16 K: nothing changes
    assert ctx.memory.k_offset(0) is None
    assert np.array_equal(ctx.eval(toks, logits_all=True), plain)
    g2 = pyllama.load_model(tiny_model_path("gemma2", overrides={"attention.key_length": 32,
                                                                 "attention.value_length": 32}))
    with pytest.raises(pyllama.errors.ContextError):
        context(g2, n_ctx=256, type_k="q8_0", kv_k_center=True)


def test_k_center_auto_default(qwen64, tiny_model_path):
    """None (default): on for a quantized K cache of a model with K biases, off otherwise."""
    on = context(qwen64, n_ctx=256, type_k="q8_0", type_v="q8_0")
    assert np.array_equal(on.memory.k_offset(0), qwen64.weights.layers[0].attn_k_b.raw)
    for kw in (dict(type_k="f16"), dict(type_k="q8_0", kv_k_center=False)):
        assert context(qwen64, n_ctx=256, **kw).memory.k_offset(0) is None
    llama = pyllama.load_model(tiny_model_path("llama", overrides={      # no K bias
        "attention.key_length": 32, "attention.value_length": 32}))
    assert context(llama, n_ctx=256, type_k="q8_0").memory.k_offset(0) is None
    g2 = pyllama.load_model(tiny_model_path("gemma2", overrides={"attention.key_length": 32,
                                                                 "attention.value_length": 32}))
    assert context(g2, n_ctx=256, type_k="q8_0").memory.k_offset(0) is None   # softcap


def test_k_center_state_round_trip_and_mismatch(qwen64):
    toks = tokens(20, seed=11)
    kw = dict(n_ctx=256, type_k="q8_0", type_v="q8_0")
    a = context(qwen64, **kw)
    a.eval(toks)
    blob = a.state_seq_get(0)
    b = context(qwen64, **kw)
    b.state_seq_set(blob, 0)
    assert b.memory.k[0].tobytes() == a.memory.k[0].tobytes()
    c = context(qwen64, kv_k_center=False, **kw)
    with pytest.raises(pyllama.errors.ContextError, match="centered"):
        c.state_seq_set(blob, 0)


@pytest.mark.slow
@pytest.mark.parametrize("qconv,layers", [(False, 1), (True, 6)])
def test_qwen_cache_rows_are_llamacpps(qwen_path, qconv, layers):
    """llama.cpp 0c1e570 (-ctk q8_0 -ctv q8_0, flash attention auto) decoding a 22-token prompt
    on Qwen2.5-Coder 0.5B: its seq state's K and V rows (tests/data/kvq-qwen-q8_0-llamacpp.npz,
    layers 0-5, from tests/kvsupport dumps). Ours are byte-identical for layer 0 (projections,
    RoPE, Hadamard, q8_0 are llama.cpp's bit for bit); with kv_q_conv (llama.cpp's flash-attention
    arithmetic) for layers 0-5 too."""
    import os
    ref = np.load(os.path.join(os.path.dirname(__file__), "data", "kvq-qwen-q8_0-llamacpp.npz"))
    m = pyllama.load_model(qwen_path)
    m.backend.kv_q_conv = qconv
    try:
        ctx = context(m, n_ctx=512, type_k="q8_0", type_v="q8_0", kv_k_center=False)
        ctx.eval(ref["tokens"])
    finally:
        m.backend.kv_q_conv = False
    n = len(ref["tokens"])
    for il in range(layers):
        assert np.ascontiguousarray(ctx.memory.k[il][:n]).view(np.uint8).tobytes() == ref["k"][il].tobytes()
        assert np.ascontiguousarray(ctx.memory.v[il][:n]).view(np.uint8).tobytes() == ref["v"][il].tobytes()
