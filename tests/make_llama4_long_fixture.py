"""Record llama.cpp's logits for llama4 over a prompt longer than its SWA cache
(tests/data/llama4_long-Q8_0.npz, compared by tests/test_arch_llama4.py's slow test).

The random "llama4" model of tests/archsupport/specs.py, quantized to Q8_0 by llama.cpp, decoded
by llama.cpp through its C API with n_ctx 9216, n_batch = n_ubatch 512, twice: swa_full off (the
tools' default; the C API's default is on), where the SWA cache holds pad256(8192 + 512) = 8704
cells, so the 8800-token prompt recycles cells of the first chunk (`logits`, and the oldest
position left, `pos_min`), and swa_full on (`logits_full`). Kept: the logits of the prompt's last
N_ROWS rows and of N_DECODE single-token decodes. Runs under the llama.cpp oracle like
tests/archsupport/record.py (numpy, gguf, llama_cpp; not pyllama):

    /work/oracle/bin/python tests/make_llama4_long_fixture.py [--out tests/data]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "archsupport"))
import record  # noqa: E402
import specs  # noqa: E402

NAME, FTYPE = "llama4", "Q8_0"
N_CTX, N_BATCH, N_PROMPT, N_ROWS, N_DECODE = 9216, 512, 8800, 4, 4
SEED = 7


def run(L, path: str, toks: np.ndarray, swa_full: bool):
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = N_CTX, N_BATCH, N_BATCH
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = 0
    cp.swa_full = swa_full
    ctx = L.llama_init_from_model(model, cp)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    batch = L.llama_batch_init(N_BATCH, 0, 1)
    out = []

    def decode(p0, p1):
        batch.n_tokens = p1 - p0
        for i, p in enumerate(range(p0, p1)):
            batch.token[i], batch.pos[i] = int(toks[p]), p
            batch.n_seq_id[i], batch.seq_id[i][0] = 1, 0
            batch.logits[i] = 1 if p >= N_PROMPT - N_ROWS else 0
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        for i, p in enumerate(range(p0, p1)):
            if p >= N_PROMPT - N_ROWS:
                out.append(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i),
                                                 shape=(n_vocab,)).copy())
    for b0 in range(0, N_PROMPT, N_BATCH):
        decode(b0, min(b0 + N_BATCH, N_PROMPT))
    for p in range(N_PROMPT, N_PROMPT + N_DECODE):
        decode(p, p + 1)
    mem = L.llama_get_memory(ctx)
    pos_min = L.llama_memory_seq_pos_min(mem, 0)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return np.stack(out).astype(np.float32), int(pos_min)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "data"))
    a = ap.parse_args(argv)
    import llama_cpp as L
    L.llama_backend_init()
    quiet = L.llama_log_callback(record._quiet)
    L.llama_log_set(quiet, ctypes.c_void_p(0))
    toks = np.random.default_rng(SEED).integers(0, specs.N_VOCAB, N_PROMPT + N_DECODE)
    toks = toks.astype(np.int32)
    with tempfile.TemporaryDirectory() as tmp:
        src, path = os.path.join(tmp, "f32.gguf"), os.path.join(tmp, f"{FTYPE}.gguf")
        specs.write_model(src, NAME)
        record.quantize(L, src, path, FTYPE)
        types, hashes = record.tensor_table(path)
        logits, pos_min = run(L, path, toks, False)
        logits_full, _ = run(L, path, toks, True)
    dst = os.path.join(a.out, f"{NAME}_long-{FTYPE}.npz")
    np.savez_compressed(dst, tokens=toks, logits=logits, pos_min=pos_min, logits_full=logits_full,
                        table=json.dumps({"types": types, "sha256": hashes, "seed": 0}))
    print(dst, "seq_pos_min", pos_min)


if __name__ == "__main__":
    main()
