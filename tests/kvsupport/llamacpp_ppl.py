"""llama.cpp's perplexity with any KV cache types, through llama-cpp-python's C API only (how the
llama.cpp column of docs/kv_cache_types.md was measured). Reproduces llama-perplexity's numbers:
chunks of -c tokens, BOS in front when the vocab adds it, the second half of each chunk scored,
--nseq chunks per decode as separate sequences in a unified cache (llama-perplexity's default
n_batch 2048 gives 4 at -c 512). With f16 K/V it gives 6.1921 on Qwen2.5-Coder 0.5B, c512, 4
chunks: tests/data/perplexity.json's figure.

    PYTHONPATH=/path/to/llama_cpp python tests/kvsupport/llamacpp_ppl.py -m MODEL \
        -f tests/data/GPL-3.txt -c 512 --chunks 4 --nseq 4 -ctk 8 -ctv 8

-ctk/-ctv take ggml type ids (1 f16, 8 q8_0, 2 q4_0); -fa -1 auto (on for quantized V), 0, 1.
LLAMA_ATTN_ROT_DISABLE=1 in the environment turns llama.cpp's K/V Hadamard rotation off.
"""
import argparse
import math
import sys

import numpy as np
import llama_cpp as L


def args():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", required=True)
    ap.add_argument("-f", required=True)
    ap.add_argument("-c", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--nseq", type=int, default=1)
    ap.add_argument("-ctk", type=int, default=1)
    ap.add_argument("-ctv", type=int, default=1)
    ap.add_argument("-fa", type=int, default=-1)
    ap.add_argument("-t", type=int, default=2)
    return ap.parse_args()


def tokenize(vocab, path):
    text = open(path, "rb").read()
    buf = (L.llama_token * (len(text) + 16))()
    n = L.llama_tokenize(vocab, text, len(text), buf, len(buf), True, False)
    return np.array(buf[:n], dtype=np.int32)


def context(model, a):
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = a.c * a.nseq
    cp.n_ubatch = min(512, a.c * a.nseq)
    cp.n_seq_max = a.nseq
    cp.kv_unified = a.nseq > 1
    cp.n_threads = cp.n_threads_batch = a.t
    cp.type_k, cp.type_v, cp.flash_attn_type = a.ctk, a.ctv, a.fa
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("context init failed (a quantized V needs -fa -1 or 1)")
    return ctx


def nll(logits, target):
    """-log p(target) with llama-perplexity's float32 logits, float64 sum of expf."""
    mx = logits.max()
    return float(mx) + math.log(np.exp(logits - mx, dtype=np.float32).sum(dtype=np.float64)) \
        - float(logits[target])


def main():
    a = args()
    L.llama_backend_init()
    quiet = L.llama_log_callback(lambda lvl, txt, ud: None)
    L.llama_log_set(quiet, None)
    model = L.llama_model_load_from_file(a.m.encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    toks = tokenize(vocab, a.f)
    bos = L.llama_vocab_bos(vocab) if L.llama_vocab_get_add_bos(vocab) else None
    ctx = context(model, a)
    batch = L.llama_batch_init(a.c * a.nseq, 0, 1)
    N, first, s, s2, cnt = a.c, a.c // 2, 0.0, 0.0, 0
    n_chunk = min(a.chunks, len(toks) // N)
    for c0 in range(0, n_chunk, a.nseq):
        L.llama_memory_clear(L.llama_get_memory(ctx), True)
        seqs = list(range(c0, min(n_chunk, c0 + a.nseq)))
        batch.n_tokens = len(seqs) * N
        for si, c in enumerate(seqs):
            chunk = toks[c * N:(c + 1) * N].copy()
            if bos is not None:
                chunk[0] = bos
            for j in range(N):
                k = si * N + j
                batch.token[k], batch.pos[k], batch.n_seq_id[k] = int(chunk[j]), j, 1
                batch.seq_id[k][0], batch.logits[k] = si, j >= first
        if L.llama_decode(ctx, batch) != 0:
            sys.exit("llama_decode failed")
        for si, c in enumerate(seqs):
            for j in range(first, N - 1):
                lg = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, si * N + j), shape=(n_vocab,))
                x = nll(lg.astype(np.float32), toks[c * N + j + 1])
                s, s2, cnt = s + x, s2 + x * x, cnt + 1
    mean = s / cnt
    err = math.sqrt((s2 / cnt - mean * mean) / (cnt - 1)) * math.exp(mean)
    print(f"PPL {math.exp(mean):.4f} +/- {err:.5f} (ctk {a.ctk} ctv {a.ctv} fa {a.fa} nseq {a.nseq})")


if __name__ == "__main__":
    main()
