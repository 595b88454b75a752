"""How tests/data/kvq-qwen-q8_0-llamacpp.npz was made: llama.cpp (llama-cpp-python's C API,
0c1e570) decodes a 22-token prompt with -ctk q8_0 -ctv q8_0 (flash attention auto) and saves the
K and V cache rows of layers 0-5 from its sequence state (llama_state_seq_get_data: a u64 header,
then the layout pyllama/kv/state.py reads).

    PYTHONPATH=/path/to/llama_cpp python tests/kvsupport/llamacpp_kv_rows.py MODEL OUT.npz
"""
import ctypes
import struct
import sys

import numpy as np
import llama_cpp as L

TEXT = b"The quick brown fox jumps over the lazy dog. Then it ran away into the forest, far from home."
Q8_0 = 8


def decode_prompt(path):
    L.llama_backend_init()
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    buf = (L.llama_token * 256)()
    n = L.llama_tokenize(L.llama_model_get_vocab(model), TEXT, len(TEXT), buf, 256, True, False)
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.type_k = cp.type_v = Q8_0
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(512, 0, 1)
    batch.n_tokens = n
    for j in range(n):
        batch.token[j], batch.pos[j], batch.n_seq_id[j] = buf[j], j, 1
        batch.seq_id[j][0], batch.logits[j] = 0, j == n - 1
    assert L.llama_decode(ctx, batch) == 0
    size = L.llama_state_seq_get_size(ctx, 0)
    data = (ctypes.c_uint8 * size)()
    got = L.llama_state_seq_get_data(ctx, data, size, 0)
    return np.array(buf[:n], np.int32), bytes(data[:got])[8:]


def rows(state):
    """[K rows per layer], [V rows per layer] (uint8 [cells, row bytes]) of a one-stream state."""
    off, out = 0, ([], [])

    def take(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, state, off)
        off += struct.calcsize("<" + fmt)
        return v
    _, cells = take("II")
    for _ in range(cells):
        _, n_seq = take("iI")
        take(f"{n_seq}i")
    _, n_layer = take("II")
    for lst in out:
        for _ in range(n_layer):
            _, rb = take("iQ")
            lst.append(np.frombuffer(state, np.uint8, cells * rb, off).reshape(cells, rb))
            off += cells * rb
    return out


if __name__ == "__main__":
    toks, state = decode_prompt(sys.argv[1])
    k, v = rows(state)
    np.savez_compressed(sys.argv[2], tokens=toks, k=np.stack(k[:6]), v=np.stack(v[:6]))
