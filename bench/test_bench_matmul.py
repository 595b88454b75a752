"""Matmul kernel benchmarks on the bundled models' real tensors (pytest-benchmark).

Mat-vec (1 token, token generation): GB/s of weight bytes read; target ~15 GB/s with 2 threads
on the reference box (17.7 GB/s read bandwidth). Small batches (2-16 tokens, speculative
verification): ms per call and the cost relative to one token. Mat-mat (512 tokens, prompt processing):
GFLOP/s counted as 2*n*rows*k. Figures go to extra_info; nothing asserts a time.
Run: PYTHONPATH=. pytest bench/test_bench_matmul.py --benchmark-only
"""
import numpy as np
import pytest

from pyllama.backend.base import Weight
from pyllama.backend.cpu import matmul as mm
from pyllama.errors import PyllamaError

CASES = {
    "gemma-3-270m": ["token_embd.weight",          # Q8_0 262144x640 (tied output)
                     "blk.0.ffn_gate.weight",      # Q5_0 2048x640
                     "blk.0.attn_q.weight",        # Q5_0 1024x640
                     "blk.0.attn_v.weight",        # Q8_0 256x640
                     "blk.0.attn_output.weight",   # Q4_K 640x1024
                     "blk.0.ffn_down.weight"],     # Q6_K 640x2048
    "qwen2.5-coder-0.5b": ["output.weight",        # Q8_0 151936x896
                           "blk.0.ffn_up.weight",  # Q5_0 4864x896
                           "blk.0.attn_q.weight",  # Q5_0 896x896
                           "blk.0.ffn_down.weight",  # Q6_K 896x4864
                           "blk.2.ffn_down.weight"],  # Q4_K 896x4864
}
_readers = {}


def _weight(model, name):
    from pyllama.gguf import GGUFReader
    from pyllama.models import resolve
    if model not in _readers:
        try:
            _readers[model] = GGUFReader(resolve(model, progress=False))
        except PyllamaError as e:
            pytest.skip(f"{model} unavailable: {e}")
    info = _readers[model].tensors[name]
    return Weight(name, info.type, info.shape, info.data), info.nbytes


@pytest.fixture(params=[2, 1], ids=["2t", "1t"])
def threads(request):
    old = mm.get_num_threads()
    mm.set_num_threads(request.param)
    yield request.param
    mm.set_num_threads(old)


@pytest.mark.parametrize("model,name", [(m, n) for m, ns in CASES.items() for n in ns])
def test_matvec(benchmark, model, name, threads):
    w, nbytes = _weight(model, name)
    rows, k = w.shape
    x = np.random.default_rng(0).standard_normal((1, k)).astype(np.float32)
    out = np.empty((1, rows), np.float32)
    mm.matmul(w, x, out)                      # page the weight in
    rounds = max(5, min(200, int(3e8 / nbytes)))
    benchmark.pedantic(mm.matmul, args=(w, x, out), rounds=rounds, iterations=1, warmup_rounds=1)
    best = benchmark.stats.stats.min
    benchmark.extra_info.update(type=w.type.name, shape=f"{rows}x{k}", threads=threads,
                                gb_per_s=round(nbytes / best / 1e9, 2))


@pytest.mark.parametrize("model,name", [(m, n) for m, ns in CASES.items() for n in ns[1:]])
def test_matmat_512(benchmark, model, name, threads):
    w, _ = _weight(model, name)
    rows, k = w.shape
    x = np.random.default_rng(0).standard_normal((512, k)).astype(np.float32)
    out = np.empty((512, rows), np.float32)
    benchmark.pedantic(mm.matmul, args=(w, x, out), rounds=5, iterations=1, warmup_rounds=1)
    best = benchmark.stats.stats.min
    benchmark.extra_info.update(type=w.type.name, shape=f"{rows}x{k}", threads=threads,
                                gflop_per_s=round(2 * 512 * rows * k / best / 1e9, 1))


@pytest.mark.parametrize("n", [2, 4, 9, 16])
@pytest.mark.parametrize("model,name", [(m, n) for m, ns in CASES.items() for n in ns[1:]])
def test_small_batch(benchmark, model, name, n, threads):
    w, nbytes = _weight(model, name)
    rows, k = w.shape
    x = np.random.default_rng(0).standard_normal((n, k)).astype(np.float32)
    out = np.empty((n, rows), np.float32)
    mm.matmul(w, x, out)
    benchmark.pedantic(mm.matmul, args=(w, x, out), rounds=20, iterations=1, warmup_rounds=1)
    best = benchmark.stats.stats.min
    benchmark.extra_info.update(type=w.type.name, shape=f"{rows}x{k}", threads=threads, tokens=n,
                                ms=round(best * 1e3, 3), gb_per_s=round(nbytes / best / 1e9, 2))
