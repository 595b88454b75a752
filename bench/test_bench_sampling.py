"""pytest-benchmark: one SamplerChain.sample() on the two real vocabulary sizes, for the default
chain and the configurations that leave the whole vocabulary to later samplers. Reports times,
asserts nothing about them.

    PYTHONPATH=. python -m pytest bench/test_bench_sampling.py --benchmark-only
"""
import numpy as np
import pytest

from pyllama.sampling import SamplerChain, SamplerParams, greedy

VOCABS = {"qwen2": 151936, "gemma3": 262144}
CONFIGS = {
    "default": {},
    "greedy_temp0": {"temp": 0.0},
    "penalties": {"penalty_repeat": 1.1, "penalty_freq": 0.1, "penalty_present": 0.1},
    "top_k0": {"top_k": 0},
    "top_k0_min_p": {"top_k": 0, "top_p": 1.0},
    "top_n_sigma": {"top_n_sigma": 1.0},
    "mirostat2": {"mirostat": 2},
}


def _logits(n):
    return (np.random.default_rng(0).standard_normal(n) * 3).astype(np.float32)


@pytest.mark.parametrize("vocab", list(VOCABS))
@pytest.mark.parametrize("config", list(CONFIGS))
def test_sample(benchmark, vocab, config):
    n = VOCABS[vocab]
    chain = SamplerChain(SamplerParams(seed=1, **CONFIGS[config]), n)
    for t in range(64):
        chain.accept(t * 7)
    x = _logits(n)
    benchmark(chain.sample, x)


@pytest.mark.parametrize("vocab", list(VOCABS))
def test_greedy_argmax(benchmark, vocab):
    benchmark(greedy, _logits(VOCABS[vocab]))
