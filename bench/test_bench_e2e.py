"""End-to-end throughput of the bundled models through the Python API (pytest-benchmark).

    python -m pytest bench/test_bench_e2e.py --benchmark-only

pp512: one decode of 512 prompt tokens (logits for the last); tg: single-token decodes. For the
side-by-side comparison with llama.cpp use bench/side_by_side.py. Nothing here asserts a time.
"""
import pyllama


def test_pp512(benchmark, model, tokens):
    toks = tokens(512)

    def run():
        ctx = pyllama.Context(model, n_ctx=1024, n_batch=512, n_ubatch=512)
        ctx.eval(toks)
    benchmark.pedantic(run, rounds=3, iterations=1)
    benchmark.extra_info["tokens_per_s"] = 512 / benchmark.stats["median"]


def test_tg32(benchmark, model, tokens):
    toks = tokens(33)
    ctx = pyllama.Context(model, n_ctx=1024)

    def setup():
        ctx.memory.clear()
        ctx.eval(toks[:1])
        return (), {}

    def run():
        for i in range(1, 33):
            ctx.eval(toks[i:i + 1])
    benchmark.pedantic(run, setup=setup, rounds=3, iterations=1)
    benchmark.extra_info["tokens_per_s"] = 32 / benchmark.stats["median"]
