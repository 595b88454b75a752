"""Sequence state bytes shared with llama.cpp: an iSWA model's state is the base cache's state then
the SWA cache's, nothing between (llama_kv_cache_iswa::state_write), so state and slot files move
between the two runtimes. Oracle: tests/data/state-gemma-q4_0-llamacpp.bin.gz, llama.cpp's own
llama_state_seq_get_data after a 12-token prompt (tests/kvsupport/llamacpp_state.py)."""
import gzip
import os
import struct

import numpy as np
import pytest

import pyllama
from pyllama.kv import STATE_SEQ_FLAGS_PARTIAL_ONLY

DATA = os.path.join(os.path.dirname(__file__), "data")
IO_MAGIC = 0xAF143CD8
IDS = [2, 236787, 107, 236769, 236770, 236768, 4613, 17097, 580, 506, 5368, 236764]


def test_iswa_state_is_base_then_swa(tiny_model_path):
    m = pyllama.load_model(tiny_model_path("gemma3"))
    ctx = pyllama.Context(m, n_ctx=256)
    ctx.eval([5, 6, 7, 8, 9])
    mem = ctx.memory
    data = ctx.state_seq_get(0)
    assert data == mem.base.state_write(0) + mem.swa.state_write(0)
    assert ctx.state_seq_get(0, STATE_SEQ_FLAGS_PARTIAL_ONLY) == mem.swa.state_write(0)
    other = pyllama.Context(m, n_ctx=256)
    assert other.memory.state_read(data, 0) == len(data)          # consumes exactly both parts
    assert np.array_equal(other.eval([10])[-1], ctx.eval([10])[-1])


@pytest.mark.realmodel
def test_gemma_state_bytes_are_llama_cpps(gemma_path):
    """Gemma 3 (iSWA), q4_0 K/V, llama.cpp's arithmetic with flash attention: after the same
    prompt the state is llama.cpp's byte for byte, and llama.cpp's state restores here."""
    raw = gzip.open(os.path.join(DATA, "state-gemma-q4_0-llamacpp.bin.gz")).read()
    magic, seq = struct.unpack_from("<Ii", raw)
    assert (magic, seq) == (IO_MAGIC, 0)
    state = raw[8:]
    m = pyllama.load_model(gemma_path)

    def ctx():
        return pyllama.Context(m, n_ctx=2048, n_threads=2, numerics="llama.cpp", flash_attn=True,
                               type_k="q4_0", type_v="q4_0")
    a = ctx()
    a.eval(IDS)
    assert a.state_seq_get(0) == state
    b = ctx()
    b.state_seq_set(state, 0)
    assert np.array_equal(b.eval([506])[-1], a.eval([506])[-1])
