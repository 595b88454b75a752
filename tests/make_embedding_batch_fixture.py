"""Write tests/data/embeddings-batch-llamacpp.npz: llama.cpp 0c1e570's mean-pooled embeddings of
two prompts decoded in ONE batch (seq 0 and 1, unified KV cache, 256 sequences: what
llama-embedding does with -np 1), Qwen2.5-Coder, flash attention off, unnormalised. In llama.cpp's
arithmetic a batch of several sequences is not bit-equal to one sequence per batch, so the
llama-embedding test compares with this batch (llama-cpp-python 0.3.36's C API).
Run: /work/oracle/bin/python tests/make_embedding_batch_fixture.py"""
import os

import numpy as np
import llama_cpp as L

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.expanduser("~/.cache/pyllama/qwen2.5-coder-0.5b-instruct.gguf")
PROMPTS = ["Hello world, this is a test.", "Le chat est sur la table."]


def main():
    model = L.llama_model_load_from_file(MODEL.encode(), L.llama_model_default_params())
    p = L.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max, p.kv_unified = 512, 512, 512, 256, True
    p.embeddings, p.pooling_type, p.flash_attn_type = True, L.LLAMA_POOLING_TYPE_MEAN, 0
    p.n_threads = p.n_threads_batch = 2
    ctx = L.llama_init_from_model(model, p)
    vocab = L.llama_model_get_vocab(model)
    seqs = []
    for text in PROMPTS:
        b = text.encode()
        buf = (L.llama_token * 64)()
        seqs.append(list(buf[:L.llama_tokenize(vocab, b, len(b), buf, 64, True, True)]))
    n = sum(map(len, seqs))
    batch = L.llama_batch_init(n, 0, 1)
    i = 0
    for sid, s in enumerate(seqs):
        for j, t in enumerate(s):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, j, 1
            batch.seq_id[i][0], batch.logits[i] = sid, True
            i += 1
    batch.n_tokens = n
    assert L.llama_decode(ctx, batch) == 0
    n_embd = L.llama_model_n_embd(model)
    out = {f"mean/{k}": np.ctypeslib.as_array(L.llama_get_embeddings_seq(ctx, k), (n_embd,)).copy()
           for k in range(len(PROMPTS))}
    np.savez_compressed(os.path.join(HERE, "data", "embeddings-batch-llamacpp.npz"), **out)


if __name__ == "__main__":
    main()
