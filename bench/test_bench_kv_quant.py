"""Decode speed with quantized KV caches (-ctk/-ctv q8_0, q4_0) against f16, and the attention
kernel alone at Gemma 3 270M's shape (4 heads, 1 KV head, head size 256) and Qwen2.5 0.5B's
(14 heads, 2 KV heads, head size 64, 512 cells: a decode step at ~500 cached positions).

    PYTHONPATH=. python -m pytest bench/test_bench_kv_quant.py --benchmark-only \
        --benchmark-columns=min,median,rounds

tg32@d{depth}: 32 single-token decodes after a `depth`-token prompt (the prompt is not timed).
attn_decode_gemma: one query over 4096 cells; attn_decode_qwen: one query over 512 cells. Nothing here asserts a time; read `min` (shared box).
"""
import numpy as np
import pytest

import pyllama

TYPES = ["f16", "q8_0", "q4_0"]


@pytest.mark.parametrize("depth", [512, 2048])
@pytest.mark.parametrize("kv", TYPES)
def test_tg32(benchmark, model, kv, depth, tokens):
    toks = tokens(depth + 32)
    ctx = pyllama.Context(model, n_ctx=depth + 256, n_batch=512, n_ubatch=512, type_k=kv,
                          type_v=kv, flash_attn=True)
    ctx.eval(toks[:depth])

    def setup():
        ctx.memory.seq_rm(0, depth, -1)
        return (), {}

    def run():
        for i in range(depth, depth + 32):
            ctx.eval(toks[i:i + 1])
    benchmark.pedantic(run, setup=setup, rounds=3, iterations=1)
    benchmark.extra_info["tokens_per_s"] = 32 / benchmark.stats["min"]


def _decode_attention(benchmark, kv, n_threads, n_cells, n_head, n_head_kv, head_dim, scale):
    """One query's attention over n_cells cached rows of type kv."""
    from pyllama.backend.cpu import CpuBackend
    be = CpuBackend(n_threads)
    rng = np.random.default_rng(0)
    row = n_head_kv * head_dim
    k, v = be.alloc_kv(n_cells, row, kv), be.alloc_kv(n_cells, row, kv)
    be.set_rows(k, np.arange(n_cells), rng.standard_normal((n_cells, row)).astype(np.float32))
    be.set_rows(v, np.arange(n_cells), rng.standard_normal((n_cells, row)).astype(np.float32))
    q = rng.standard_normal((1, n_head, head_dim)).astype(np.float32)
    cells = np.arange(n_cells, dtype=np.int32)
    benchmark(be.attention, q, k, v, cells, np.array([0]), np.array([n_cells]), scale)


@pytest.mark.parametrize("kv", TYPES)
def test_attn_decode_gemma_shape(benchmark, kv):
    _decode_attention(benchmark, kv, None, 4096, 4, 1, 256, 0.0625)


@pytest.mark.parametrize("kv", TYPES)
def test_attn_decode_qwen_shape(benchmark, kv):
    _decode_attention(benchmark, kv, 2, 512, 14, 2, 64, 0.125)
