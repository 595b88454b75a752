"""tests/data/rerank-qwen3.gguf + rerank-llamacpp.json: a random-weight qwen3 reranker (all F32,
tests/tiny.py's vocabulary, `qwen3.pooling_type` = rank, labels yes/no, a `cls.output.weight`
head: llama.cpp's tensor name, [n_cls_out, n_embd]) and llama.cpp 0c1e570's rank-pooled scores
(llama_get_embeddings_seq after the qwen3 softmax) of a few query/document prompts, built as
format_prompt_rerank does for a vocabulary without a rerank template.
Run (two interpreters): .venv/bin/python tests/make_rerank_fixture.py write
                        /work/oracle/bin/python tests/make_rerank_fixture.py score"""
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "data", "rerank-qwen3.gguf")
OUT = os.path.join(HERE, "data", "rerank-llamacpp.json")
QUERY = "what is a cat"
DOCS = ["a cat is a small animal", "the stock market fell", "cats purr and meow", "hello"]


def write():
    sys.path.insert(0, HERE)
    from tiny import write_tiny_gguf
    rng = np.random.default_rng(7)
    head = (rng.standard_normal((2, 64)) / 8).astype(np.float32)
    write_tiny_gguf(MODEL, "qwen3", seed=3, all_f32=True, overrides={
        "pooling_type": 4, "classifier.output_labels": ["yes", "no"]},
        extra_tensors={"cls.output.weight": head})


def score():
    import llama_cpp as L
    model = L.llama_model_load_from_file(MODEL.encode(), L.llama_model_default_params())
    p = L.llama_context_default_params()
    p.n_ctx, p.n_batch, p.n_ubatch, p.n_seq_max = 256, 256, 256, 1
    p.embeddings, p.pooling_type, p.flash_attn_type = True, L.LLAMA_POOLING_TYPE_RANK, 0
    p.n_threads = p.n_threads_batch = 1
    ctx = L.llama_init_from_model(model, p)
    vocab = L.llama_model_get_vocab(model)

    def tok(text):
        b = text.encode()
        buf = (L.llama_token * 256)()
        return list(buf[:L.llama_tokenize(vocab, b, len(b), buf, 256, False, False)])
    eos = L.llama_vocab_eos(vocab)
    out = {"query": QUERY, "documents": DOCS, "n_cls_out": L.llama_model_n_cls_out(model),
           "prompts": [], "scores": []}
    for d in DOCS:
        toks = ([L.llama_vocab_bos(vocab)] if L.llama_vocab_get_add_bos(vocab) else []) + tok(QUERY)
        if L.llama_vocab_get_add_eos(vocab):
            toks.append(eos)
        if L.llama_vocab_get_add_sep(vocab):
            toks.append(L.llama_vocab_sep(vocab))
        toks += tok(d)
        if L.llama_vocab_get_add_eos(vocab):
            toks.append(eos)
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        batch = L.llama_batch_init(len(toks), 0, 1)
        for i, t in enumerate(toks):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, True
        batch.n_tokens = len(toks)
        assert L.llama_decode(ctx, batch) == 0
        v = np.ctypeslib.as_array(L.llama_get_embeddings_seq(ctx, 0), (out["n_cls_out"],))
        out["prompts"].append(toks)
        out["scores"].append([float(x) for x in v])
        L.llama_batch_free(batch)
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    {"write": write, "score": score}[sys.argv[1]]()
