"""KV memory: cells bookkeeping, the KV cache, the iSWA pair (llama.cpp src/llama-kv-cells.h, llama-kv-cache.cpp, llama-kv-cache-iswa.cpp).

How the Context drives it (one object for both cases, per-layer calls take the layer index):

    mem = make_memory(KVLayout(n_embd_k_gqa, n_embd_v_gqa, n_head_kv, is_swa, swa_type, n_swa),
                      n_ctx=..., n_seq_max=..., n_ubatch=..., kv_unified=..., swa_full=...,
                      swa_extra=..., type_k='f16', type_v='f16', alloc=backend.alloc_kv,
                      rope=lambda k_rows, delta, il: ...)       # KVCache or ISWACache
    rc, why = batch.validate(b, n_vocab, n_seq_max, mem)      # -1: invalid, memory untouched
    mem.update()                                               # pending K-shift / stream copies
    ubs = mem.init_batch(b, n_ubatch)                          # None -> decode returns 1
    for ub in ubs:
        mem.apply_ubatch(ub)                                   # cells mutated for this ubatch
        for il in layers:
            cells = mem.cells_for(il)                          # int32[n_tokens] K/V rows to write
            backend.set_rows(mem.k[il], cells, k); backend.set_rows(mem.v[il], cells, v)
            kv_cells, q_start, q_end = mem.attn_plan(ub, il)   # memoised per cache and ubatch
            out = backend.attention(q, mem.k[il], mem.v[il], kv_cells, q_start, q_end, scale)
        # outputs: ub.idx[ub.output] are the batch indices of this ubatch's logits rows

A failed ubatch: for every seq in it, mem.seq_rm(s, min pos of s in that ubatch, -1).
"""
from .cache import KVCache
from .cells import KVCells
from .iswa import STATE_SEQ_FLAGS_PARTIAL_ONLY, ISWACache, make_memory
from .layout import KVLayout
from .swa import (SWA_CHUNKED, SWA_NONE, SWA_STANDARD, SWA_SYMMETRIC, cache_sizes, ctx_geometry,
                  is_masked_swa, pad256, swa_cells)

__all__ = ["KVCache", "KVCells", "ISWACache", "KVLayout", "make_memory", "cache_sizes", "ctx_geometry",
           "is_masked_swa", "pad256", "swa_cells", "STATE_SEQ_FLAGS_PARTIAL_ONLY",
           "SWA_NONE", "SWA_STANDARD", "SWA_CHUNKED", "SWA_SYMMETRIC"]
