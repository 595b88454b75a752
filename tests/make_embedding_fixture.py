"""Write tests/data/embeddings-llamacpp.npz: llama.cpp 0c1e570's embeddings of the bundled models
(llama-cpp-python 0.3.36 with embedding=True, flash attention off, f16 KV, one batch per prompt),
per token (pooling none) and pooled (mean, cls, last), unnormalised (llama_get_embeddings_ith /
llama_get_embeddings_seq as the C API returns them).
Run: /work/oracle/bin/python tests/make_embedding_fixture.py"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
import llama_cpp as L  # noqa: E402

MODELS = {"qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct.gguf",
          "gemma-3-270m": "gemma-3-270m-q4_k_m.gguf"}

PROMPTS = ["Hello world, this is a test.", "def fib(n):\n    return n if n < 2 else fib(n - 1)",
           "Le chat est sur la table."]
POOLING = {"none": L.LLAMA_POOLING_TYPE_NONE, "mean": L.LLAMA_POOLING_TYPE_MEAN,
           "cls": L.LLAMA_POOLING_TYPE_CLS, "last": L.LLAMA_POOLING_TYPE_LAST}


def embed(path, pooling, text):
    llm = L.Llama(model_path=path, embedding=True, pooling_type=POOLING[pooling], n_ctx=512,
                  n_batch=512, n_ubatch=512, flash_attn=False, verbose=False, n_threads=2)
    toks = llm.tokenize(text.encode(), add_bos=True, special=True)
    ctx = llm._ctx.ctx
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    batch = L.llama_batch_init(len(toks), 0, 1)
    for i, t in enumerate(toks):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, True
    batch.n_tokens = len(toks)
    assert L.llama_decode(ctx, batch) == 0
    n = L.llama_model_n_embd(llm._model.model)
    if pooling == "none":
        rows = [np.ctypeslib.as_array(L.llama_get_embeddings_ith(ctx, i), (n,)).copy()
                for i in range(len(toks))]
        out = np.stack(rows)
    else:
        out = np.ctypeslib.as_array(L.llama_get_embeddings_seq(ctx, 0), (n,)).copy()
    L.llama_batch_free(batch)
    return toks, out.astype(np.float32)


def main():
    arrays, meta = {}, {"prompts": PROMPTS, "tokens": {}}
    for name in ("qwen2.5-coder-0.5b", "gemma-3-270m"):
        path = os.path.expanduser(os.path.join("~/.cache/pyllama", MODELS[name]))
        for pool in POOLING:
            for k, text in enumerate(PROMPTS):
                toks, out = embed(path, pool, text)
                meta["tokens"][f"{name}/{k}"] = list(map(int, toks))
                arrays[f"{name}/{pool}/{k}"] = out
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    np.savez_compressed(os.path.join(HERE, "data", "embeddings-llamacpp.npz"), **arrays)


if __name__ == "__main__":
    main()
