"""pytest-benchmark: CPU attention (decode/prefill, Gemma 3 270M and Qwen2.5 0.5B head layouts),
rms_norm, rope and GELU on realistic shapes. Reports times, asserts nothing about them.

    PYTHONPATH=. python -m pytest bench/test_bench_ops.py --benchmark-only [-k attention]
"""
import numpy as np
import pytest

from pyllama.backend import ROPE_NEOX, get_backend

LAYOUTS = {"gemma270m": (4, 1, 256, 640), "qwen05b": (14, 2, 64, 896)}  # heads, kv, d, n_embd
RNG = np.random.default_rng(0)


@pytest.fixture(scope="module", params=[1, 2], ids=["t1", "t2"])
def cpu(request):
    return get_backend("cpu", request.param)


def _kv(n_cells, n_kv, d):
    k = RNG.standard_normal((n_cells, n_kv * d)).astype(np.float16)
    return k, RNG.standard_normal((n_cells, n_kv * d)).astype(np.float16)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("n_cells", [512, 4096])
def test_attention_decode(benchmark, cpu, layout, n_cells):
    nh, nkv, d, _ = LAYOUTS[layout]
    k, v = _kv(n_cells, nkv, d)
    q = RNG.standard_normal((1, nh, d)).astype(np.float32)
    cells = np.arange(n_cells, dtype=np.int32)
    benchmark(cpu.attention, q, k, v, cells, np.array([0]), np.array([n_cells]), d ** -0.5)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_attention_prefill_512_causal(benchmark, cpu, layout):
    nh, nkv, d, _ = LAYOUTS[layout]
    n = 512
    k, v = _kv(n, nkv, d)
    q = RNG.standard_normal((n, nh, d)).astype(np.float32)
    cells = np.arange(n, dtype=np.int32)                 # query i sees cells 0..i
    q_start, q_end = np.zeros(n, np.int64), np.arange(1, n + 1, dtype=np.int64)
    benchmark(cpu.attention, q, k, v, cells, q_start, q_end, d ** -0.5)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("n_tokens", [1, 512])
def test_rms_norm(benchmark, cpu, layout, n_tokens):
    n_embd = LAYOUTS[layout][3]
    x = RNG.standard_normal((n_tokens, n_embd)).astype(np.float32)
    w = RNG.standard_normal(n_embd).astype(np.float32)
    out = np.empty_like(x)
    benchmark(cpu.rms_norm, x, w, 1e-6, out)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("n_tokens", [1, 512])
def test_rope(benchmark, cpu, layout, n_tokens):
    nh, _, d, _ = LAYOUTS[layout]
    x = RNG.standard_normal((n_tokens, nh, d)).astype(np.float32)
    pos = np.arange(n_tokens, dtype=np.int32) + 1000
    benchmark(cpu.rope, x, pos, d, 1e6, 1.0, ROPE_NEOX)


@pytest.mark.parametrize("n_tokens", [1, 512])
def test_geglu_gemma_ffn(benchmark, cpu, n_tokens):
    g = RNG.standard_normal((n_tokens, 2048)).astype(np.float32)
    u = RNG.standard_normal((n_tokens, 2048)).astype(np.float32)
    benchmark(cpu.geglu, g, u)
