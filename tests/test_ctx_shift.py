"""Context shift (llama.cpp's "infinite text generation via context shifting") and session
files (llama_state_save_file / llama_state_load_file) on tiny random models."""
import struct

import numpy as np
import pytest

import pyllama
from pyllama.context import SESSION_MAGIC, SESSION_VERSION
from pyllama.errors import ContextError
from pyllama.generate import cached_tokens, context_shift, generate
from pyllama.sampling import SamplerChain, SamplerParams


def _greedy(m):
    return SamplerChain(SamplerParams(temp=0.0), m.n_vocab)


def test_stops_one_before_the_context_without_shift(tiny_model_path):
    """completion.cpp: a sampled token is decoded only while n_past + 1 < n_ctx."""
    m = pyllama.load_model(tiny_model_path("llama"))
    ctx = pyllama.Context(m, n_ctx=256)
    prompt = [1, 5, 6, 7, 8]
    out = list(generate(ctx, prompt, _greedy(m), n_predict=1000, stop_tokens=()))
    assert len(cached_tokens(ctx, 0)) == 255
    assert len(out) == 256 - len(prompt)


def test_shift_keeps_n_keep_and_halves_the_rest(tiny_model_path):
    m = pyllama.load_model(tiny_model_path("llama"))
    ctx = pyllama.Context(m, n_ctx=256)
    prompt = list(range(1, 21))
    shifts = []
    out = list(generate(ctx, prompt, _greedy(m), n_predict=600, stop_tokens=(), ctx_shift=True,
                        n_keep=10, on_shift=shifts.append))
    assert len(out) == 600
    # first shift at n_past 255: n_left 245, n_discard 122; then every 122 or 123 tokens
    assert shifts[0] == (255 - 10) // 2 and len(shifts) >= 3
    toks = cached_tokens(ctx, 0)
    assert toks[:10] == prompt[:10]
    assert ctx.memory.seq_pos_max(0) == len(toks) - 1 and ctx.memory.seq_pos_min(0) == 0


def test_iswa_with_small_swa_cache_cannot_shift(tiny_model_path):
    m = pyllama.load_model(tiny_model_path("gemma3"))
    ctx = pyllama.Context(m, n_ctx=4096)
    if ctx.memory.can_shift():
        pytest.skip("tiny gemma3's SWA cache is full size here")
    with pytest.raises(ContextError, match="context shift is not supported"):
        next(generate(ctx, [1, 2, 3], _greedy(m), ctx_shift=True))


def test_session_file_round_trip_and_errors(tiny_model_path, tmp_path):
    m = pyllama.load_model(tiny_model_path("llama"))
    a = pyllama.Context(m, n_ctx=256)
    toks = [1, 5, 6, 7, 8, 9]
    a.eval(toks[:-1])
    path = str(tmp_path / "s.bin")
    a.state_save_file(path, toks)
    raw = open(path, "rb").read()
    assert struct.unpack_from("<III", raw) == (SESSION_MAGIC, SESSION_VERSION, len(toks))
    arch = m.arch_name.encode()
    assert raw[24 + 12:24 + 16 + len(arch)] == struct.pack("<I", len(arch)) + arch
    b = pyllama.Context(m, n_ctx=256)
    assert b.state_load_file(path, 256) == toks
    assert b.memory.seq_pos_max(0) == len(toks) - 2
    np.testing.assert_array_equal(b.eval([9])[-1], a.eval([9])[-1])
    with pytest.raises(ContextError, match="exceeded capacity"):
        b.state_load_file(path, 3)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"xxxx" + raw[4:])
    with pytest.raises(ContextError, match="unknown \\(magic, version\\)"):
        b.state_load_file(str(bad), 256)
    bad.write_bytes(raw[:-7])
    with pytest.raises(ContextError):
        b.state_load_file(str(bad), 256)
    g = pyllama.load_model(tiny_model_path("qwen2"))
    with pytest.raises(ContextError, match="wrong model arch"):
        pyllama.Context(g, n_ctx=256).state_load_file(path, 256)
