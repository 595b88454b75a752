"""Record llama.cpp 0c1e570's state bytes with flash attention off (v_trans = 1: the V section of
each layer written per V dimension across the cells) into
tests/data/state-gemma-f16-nofa-llamacpp.bin.gz (read by tests/test_state_vtrans.py).

llama-cpp-python 0.3.36 (llama.cpp 0c1e570, AVX2 build) decodes the first 12 tokens of the
long-gpl reference prompt with Gemma 3 270M in one batch, f16 K/V, flash_attn_type disabled,
2 threads, n_ctx 256, and saves llama_state_seq_get_data of sequence 0 (a u32 io magic and the
i32 seq id, then the iSWA memory's state: base cache, SWA cache) and the session file
llama_state_save_file writes for those tokens, as one gzip: u64 length of the sequence state,
its first 8 bytes (magic, seq id), then the session file, which ends with the rest of the
sequence state (one sequence: the whole memory's state is sequence 0's; checked here).

    /work/oracle/bin/python tests/make_state_vtrans_fixture.py [MODEL]
"""
import ctypes
import gzip
import os
import struct
import sys
import tempfile

import llama_cpp as L

HERE = os.path.dirname(os.path.abspath(__file__))
IDS = [2, 236787, 107, 236769, 236770, 236768, 4613, 17097, 580, 506, 5368, 236764]
OUT = os.path.join(HERE, "data", "state-gemma-f16-nofa-llamacpp.bin.gz")


def main(path: str) -> None:
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 256, 256, 256
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = 0                     # LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = L.llama_init_from_model(model, cp)
    assert ctx
    batch = L.llama_batch_init(256, 0, 1)
    batch.n_tokens = len(IDS)
    for j, t in enumerate(IDS):
        batch.token[j], batch.pos[j], batch.n_seq_id[j] = t, j, 1
        batch.seq_id[j][0], batch.logits[j] = 0, j == len(IDS) - 1
    assert L.llama_decode(ctx, batch) == 0
    size = L.llama_state_seq_get_size(ctx, 0)
    data = (ctypes.c_uint8 * size)()
    got = L.llama_state_seq_get_data(ctx, data, size, 0)
    seq = bytes(data[:got])
    toks = (L.llama_token * len(IDS))(*IDS)
    with tempfile.TemporaryDirectory() as d:
        sess = os.path.join(d, "s.bin")
        assert L.llama_state_save_file(ctx, sess.encode(), toks, len(IDS))
        with open(sess, "rb") as f:
            session = f.read()
    assert session.endswith(seq[8:])
    with open(OUT, "wb") as f:
        f.write(gzip.compress(struct.pack("<Q", len(seq)) + seq[:8] + session, 9, mtime=0))
    print(len(seq), len(session), file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        model_path = sys.argv[1]
    else:
        sys.path.insert(0, os.path.dirname(HERE))
        from pyllama.models import resolve
        model_path = resolve("gemma-3-270m")
    main(model_path)
