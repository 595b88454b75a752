"""The CPU backend's fused mul_mat_id (cpu/mmid.py: the experts with few rows in one native call)
must give the bits of Backend.mul_mat_id, the per-expert path (one matmul / one-token matvec per
expert), for decode (one token: m = 1 shared row, m = n_used rows) and prefill batches where some
experts get many rows and others few, in both numerics (one_token: llama.cpp's kernel choice)."""
import numpy as np
import pytest

from pyllama.backend.base import Backend, Weight
from pyllama.backend.cpu import CpuBackend
from pyllama.backend.cpu import matmul as mm
from pyllama.backend.cpu import mmid
from pyllama.gguf import GGMLType as T
from test_matmul import act, rand_weight  # tests/backend is on sys.path

TYPES = [T.Q4_0, T.Q8_0, T.Q4_K, T.Q5_K, T.Q6_K, T.Q2_K, T.Q3_K, T.F16, T.F32]
N_EXP, N_USED, K = 6, 3, 512


def experts(t, rows, seed):
    raws = [rand_weight(t, rows, K, seed=seed + e) for e in range(N_EXP)]
    return Weight(f"exps.{t.name}", t, (N_EXP, rows, K), np.stack(raws))


def routing(n, seed):
    """ids [n, N_USED], distinct per token; expert 0 in every token (many rows), 5 in one."""
    rng = np.random.default_rng(seed)
    ids = np.stack([np.concatenate([[0], rng.choice(np.arange(1, 5), N_USED - 1, replace=False)])
                    for _ in range(n)]).astype(np.int32)
    if n > 1:
        ids[n // 2, 1] = 5
    return ids


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def be(request):
    old = mmid.PARALLEL_MIN_BYTES
    mmid.PARALLEL_MIN_BYTES = 0               # split the fused loop even for these small shapes
    mm.set_parallel_min_bytes(0)
    yield CpuBackend(n_threads=request.param)
    mmid.PARALLEL_MIN_BYTES = old
    mm.set_parallel_min_bytes(131072)


@pytest.mark.parametrize("t", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("rows", [16, 12])            # Q4_K: repacked (gemv) / not
@pytest.mark.parametrize("one_token", [False, True], ids=["invariant", "llama.cpp"])
def test_fused_equals_per_expert(t, rows, one_token, be):
    w = experts(t, rows, seed=3)
    for n, m in ((1, 1), (1, N_USED), (12, 1), (12, N_USED), (3, N_USED)):
        x = act(n * m, K, seed=n + m).reshape(n, m, K)
        ids = routing(n, seed=n)
        want = Backend.mul_mat_id(be, w, x, ids, one_token)
        got = be.mul_mat_id(w, x, ids, one_token)
        np.testing.assert_array_equal(got, want, err_msg=f"{t.name} n={n} m={m}")
