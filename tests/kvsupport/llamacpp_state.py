"""How tests/data/state-gemma-q4_0-llamacpp.bin.gz was made: llama.cpp 0c1e570 (llama-cpp-python
0.3.36 built for AVX2: CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON")
decodes the first 12 tokens of the long-gpl reference prompt with Gemma 3 270M, -ctk/-ctv q4_0,
flash attention on, 2 threads, n_ctx 2048, and saves llama_state_seq_get_data of sequence 0 (a u32
io magic and the i32 seq id, then the iSWA memory's state: base cache, SWA cache).

    PYTHONPATH=/path/to/llama_cpp python tests/kvsupport/llamacpp_state.py MODEL OUT.bin.gz
"""
import ctypes
import gzip
import sys

import llama_cpp as L

IDS = [2, 236787, 107, 236769, 236770, 236768, 4613, 17097, 580, 506, 5368, 236764]
Q4_0 = 2


def main(path: str, out: str) -> None:
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 2048, 512, 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.type_k = cp.type_v = Q4_0
    cp.flash_attn_type = 1
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(512, 0, 1)
    batch.n_tokens = len(IDS)
    for j, t in enumerate(IDS):
        batch.token[j], batch.pos[j], batch.n_seq_id[j] = t, j, 1
        batch.seq_id[j][0], batch.logits[j] = 0, j == len(IDS) - 1
    assert L.llama_decode(ctx, batch) == 0
    size = L.llama_state_seq_get_size(ctx, 0)
    data = (ctypes.c_uint8 * size)()
    got = L.llama_state_seq_get_data(ctx, data, size, 0)
    with open(out, "wb") as f:
        f.write(gzip.compress(bytes(data[:got]), 9))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
