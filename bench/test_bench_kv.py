"""pytest-benchmark: KV bookkeeping cost per decode on Gemma 3 270M geometry (n_swa 512, 3 dense +
15 SWA layers, n_ctx 4096, ub 512): one generated token (validate + init_batch + apply_ubatch +
the two attention plans) at steady state, and one 512-token prompt ubatch. No tensors; reports
times, asserts nothing about them.

    PYTHONPATH=. python -m pytest bench/test_bench_kv.py --benchmark-only
"""
import copy

import numpy as np
import pytest

from pyllama.batch import Batch, validate
from pyllama.kv import KVLayout, make_memory

LAYOUT = KVLayout(n_embd_k_gqa=[256] * 18, n_embd_v_gqa=[256] * 18, n_head_kv=[1] * 18,
                  is_swa=[il % 6 != 5 for il in range(18)], swa_type=1, n_swa=512)


def decode(mem, batch, n_ubatch=512):
    assert validate(batch, 1000, mem.n_seq_max, mem)[0] == 0
    for ub in mem.init_batch(batch, n_ubatch):
        mem.apply_ubatch(ub)
        mem.attn_plan(ub, 0)
        mem.attn_plan(ub, 5)


@pytest.fixture(scope="module")
def steady():
    mem = make_memory(LAYOUT, n_ctx=4096, n_ubatch=512)
    decode(mem, Batch(np.zeros(1000, np.int32)))
    for p in range(1000, 1300):
        decode(mem, Batch.one(1, p))
    return mem


def test_generate_token(benchmark, steady):
    mem = copy.deepcopy(steady)
    pos = iter(range(1300, 10**6))
    benchmark(lambda: decode(mem, Batch.one(1, next(pos))))


@pytest.mark.parametrize("swa_full", [False, True])
def test_prompt_ubatch_512(benchmark, steady, swa_full):
    mem = make_memory(LAYOUT, n_ctx=4096, n_ubatch=512, swa_full=swa_full)
    decode(mem, Batch(np.zeros(1000, np.int32)))

    def run():
        decode(mem, Batch(np.zeros(512, np.int32)))
        mem.seq_rm(0, 1000, -1)
    benchmark(run)
