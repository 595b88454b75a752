"""Whole-model behaviour with quantized KV caches (-ctk/-ctv q8_0, q4_0, bf16) on tiny random
models: the invariants of docs/architecture.md hold bit for bit (prefill == token by token,
ubatch size, thread count, iSWA == swa_full past the SWA cache, rollback), state save/restore and
K-shift of block rows, and the CPU backend agrees with the numpy oracle."""
import numpy as np
import pytest

import pyllama
from pyllama.backend.base import kv_decode, kv_encode
from pyllama.errors import ContextError
from tiny import random_tokens as tokens

# tiny configs with head size 32 (the q8_0/q4_0 block): gemma3 and qwen3 as they are,
# llama and gemma2 (softcap, SWA) widened
CONFIGS = {
    "gemma3": {}, "qwen3": {},
    "llama": {"attention.head_count": 2, "attention.head_count_kv": 1},
    "gemma2": {"attention.key_length": 32, "attention.value_length": 32},
}
SWA = ("gemma3", "gemma2")
N_LONG = 300


@pytest.fixture(scope="module")
def models(tiny_model_path):
    cache = {}

    def get(arch, backend="cpu"):
        if (arch, backend) not in cache:
            path = tiny_model_path(arch, overrides=CONFIGS[arch] or None)
            cache[arch, backend] = pyllama.load_model(path, backend=backend)
        return cache[arch, backend]
    return get


def ctx_q(m, t="q8_0", tv=None, **kw):
    kw.setdefault("n_ctx", 512)
    return pyllama.Context(m, type_k=t, type_v=tv or t, flash_attn=True, **kw)


def one_by_one(ctx, toks, seq_id=0):
    return np.concatenate([ctx.eval([t], seq_id=seq_id) for t in toks])


@pytest.mark.parametrize("arch", CONFIGS)
def test_prefill_equals_token_by_token(models, arch):
    m = models(arch)
    toks = tokens(40)
    a = ctx_q(m).eval(toks, logits_all=True)
    b = one_by_one(ctx_q(m), toks)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("arch", CONFIGS)
def test_ubatch_size_and_threads_do_not_change_logits(models, arch):
    m = models(arch)
    toks = tokens(60, seed=1)
    a = ctx_q(m, n_ubatch=512, n_threads=2).eval(toks, logits_all=True)
    b = ctx_q(m, n_ubatch=7, n_threads=1).eval(toks, logits_all=True)
    m.backend.set_threads(2)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("kt,vt", [("q4_0", "q4_0"), ("bf16", "bf16"), ("q8_0", "f16"),
                                   ("f16", "q8_0"), ("q8_0", "q4_0")])
def test_other_types_and_mixes_are_batch_invariant(models, kt, vt):
    m = models("gemma3")
    toks = tokens(40, seed=11)
    a = ctx_q(m, kt, vt, n_ubatch=512).eval(toks, logits_all=True)
    b = ctx_q(m, kt, vt, n_ubatch=5).eval(toks, logits_all=True)
    assert np.array_equal(a, b)
    f16 = pyllama.Context(m, n_ctx=512).eval(toks, logits_all=True)
    assert not np.array_equal(a, f16)                     # the cache type is really used
    assert np.abs(a - f16).max() < 0.25 * np.abs(f16).max()


@pytest.mark.parametrize("arch", SWA)
def test_iswa_equals_swa_full_past_the_swa_cache(models, arch):
    m = models(arch)
    toks = tokens(N_LONG, seed=2)
    small = ctx_q(m, n_ubatch=32)
    full = ctx_q(m, n_ubatch=32, swa_full=True)
    a = small.eval(toks, logits_all=True)
    b = full.eval(toks, logits_all=True)
    assert small.memory.seq_pos_min(0) > 0, "SWA cells were never recycled"
    assert np.array_equal(a, b)
    more = tokens(20, seed=3)
    assert np.array_equal(one_by_one(small, more), one_by_one(full, more))


@pytest.mark.parametrize("arch", ["gemma3", "qwen3"])
def test_rollback_equals_never_decoded(models, arch):
    m = models(arch)
    toks = tokens(N_LONG, seed=4)
    ref, ctx = ctx_q(m, n_ubatch=16), ctx_q(m, n_ubatch=16)
    ref.eval(toks)
    ctx.eval(toks)
    rng = np.random.default_rng(5)
    for _ in range(3):
        r = int(rng.integers(1, 10))
        one_by_one(ctx, tokens(r, seed=int(rng.integers(1 << 30))))
        ctx.memory.seq_rm(0, ctx.memory.seq_pos_max(0) + 1 - r, -1)
        nxt = tokens(3, seed=int(rng.integers(1 << 30)))
        assert np.array_equal(one_by_one(ctx, nxt), one_by_one(ref, nxt))


@pytest.mark.parametrize("t", ["q8_0", "q4_0", "bf16"])
def test_state_round_trip(models, t):
    m = models("gemma3")
    toks, nxt = tokens(50, seed=12), tokens(4, seed=13)
    a = ctx_q(m, t)
    a.eval(toks)
    blob = a.state_seq_get(0)
    b = ctx_q(m, t)
    b.state_seq_set(blob, 0)
    assert np.array_equal(one_by_one(a, nxt), one_by_one(b, nxt))
    with pytest.raises(ContextError):                     # a cache of another type refuses it
        ctx_q(m, "q4_0" if t != "q4_0" else "q8_0").state_seq_set(blob, 0)


@pytest.mark.parametrize("t", ["q8_0", "q4_0", "bf16"])
def test_k_shift_requantizes_rotated_rows(models, t):
    """seq_add on a quantized K cache: rows are dequantized, rotated in f32 and requantized with
    the set_rows quantizer (llama.cpp's cast / rope / cpy), V untouched."""
    m = models("qwen3")
    ctx = ctx_q(m, t)
    ctx.eval(tokens(30, seed=14))
    mem = ctx.memory
    k0 = {il: mem.k[il].copy() for il in mem.layers}
    v0 = {il: mem.v[il].copy() for il in mem.layers}
    mem.seq_add(0, 10, -1, 5)
    mem.update()
    hp = m.hparams
    cells = np.flatnonzero(mem.cells[0].pos >= 15)
    for il in mem.layers:
        rows = kv_decode(k0[il][cells], t).reshape(len(cells), hp.n_head_kv, -1)
        want = m.backend.rope(rows, np.full(len(cells), 5, np.int32), hp.n_rot, hp.rope_base(il),
                              hp.rope_scale(il), hp.rope_type)
        assert mem.k[il][cells].tobytes() == kv_encode(want.reshape(len(cells), -1), t).tobytes()
        assert np.array_equal(mem.k[il][:10], k0[il][:10])
        assert mem.v[il].tobytes() == v0[il].tobytes()


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
@pytest.mark.parametrize("t", ["q8_0", "q4_0", "bf16"])
def test_cpu_matches_ref_backend(models, arch, t):
    """Equal caches; logits close on all tokens but at most one, where a near-tie in the
    matmuls' q8 activation quantization can flip a step. (Gemma archs left out: GELU f16 steps.)"""
    toks = tokens(24, seed=15)
    ca, cb = ctx_q(models(arch), t), ctx_q(models(arch, "ref"), t)
    a, b = ca.eval(toks, logits_all=True), cb.eval(toks, logits_all=True)
    for il in ca.memory.layers:
        assert ca.memory.k[il][:24].tobytes() == cb.memory.k[il][:24].tobytes()
    row_err = np.abs(a - b).max(axis=1) / np.abs(b).max()
    assert np.sort(row_err)[-2] < 1e-5 and row_err.max() < 1e-2


def test_context_validation_and_memory(models, tiny_model_path):
    m = models("qwen3")
    with pytest.raises(ContextError):
        pyllama.Context(m, type_k="q5_1")
    with pytest.raises(ContextError):                       # head size 16: no 32-blocks
        pyllama.Context(pyllama.load_model(tiny_model_path("llama")), type_k="q8_0")
    f16 = pyllama.Context(m, n_ctx=256).memory_breakdown()
    for t, ratio in (("q8_0", 34 / 64), ("q4_0", 18 / 64), ("bf16", 1.0)):
        q = ctx_q(m, t, n_ctx=256).memory_breakdown()
        assert q["k_bytes"] == f16["k_bytes"] * ratio and q["v_bytes"] == f16["v_bytes"] * ratio


@pytest.mark.slow
@pytest.mark.parametrize("which,center", [
    ("gemma", False),
    pytest.param("qwen", False, marks=pytest.mark.xfail(strict=True, reason=(
        "q8_0 K as llama.cpp stores it (Hadamard-rotated) costs Qwen2.5 0.5B ~3% perplexity "
        "(llama.cpp 0c1e570 itself: +3.6%, 4 chunks): its K bias gives a few K channels huge "
        "values; docs/kv_cache_types.md"))),
    ("qwen", True),                      # kv_k_center: K stored minus the K bias
])
def test_real_model_q8_0_perplexity_within_1_percent(which, center, request):
    """One 512-token chunk of GPL-3 scored like llama-perplexity (second half): q8_0 K and V at
    most 1% above f16 (kv_k_center on Qwen lands 1.3% *below* f16 on this chunk, noise of one
    chunk; the full 4-chunk figures are in docs/kv_cache_types.md)."""
    import os

    from pyllama.perplexity import nll_rows
    m = pyllama.load_model(request.getfixturevalue(f"{which}_path"))
    with open(os.path.join(os.path.dirname(__file__), "data", "GPL-3.txt")) as f:
        toks = np.asarray(m.tokenize(f.read()), dtype=np.int32)[:512]
    ppl = {}
    for t in ("f16", "q8_0"):
        ctx = ctx_q(m, t, n_ctx=512, n_batch=512, kv_k_center=center and t == "q8_0")
        logits = ctx.eval(toks, logits_all=True)
        ppl[t] = float(np.exp(nll_rows(logits[256:-1], toks[257:]).mean()))
    assert -0.03 < ppl["q8_0"] / ppl["f16"] - 1 < 0.01, ppl
