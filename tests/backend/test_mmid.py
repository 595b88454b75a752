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


def _moe_ops(be, gate, up, down, x, ids, wts, one_token):
    """Graph.moe_swiglu's separate ops (mul_mat_id up / gate / down, swiglu, mul, sum_experts)."""
    from pyllama.graph import Graph
    x3 = x.reshape(1, 1, -1)
    u = be.mul_mat_id(up, x3, ids, one_token)
    g = be.mul_mat_id(gate, x3, ids, one_token)
    d = be.mul_mat_id(down, be.swiglu(g, u), ids, one_token)
    return Graph.sum_experts(be.mul(d, wts[..., None]))


def _experts(name, t, rows, cols, seed):
    return Weight(f"{name}.{t.name}", t, (N_EXP, rows, cols),
                  np.stack([rand_weight(t, rows, cols, seed=seed + e) for e in range(N_EXP)]))


# (gate / up type, expert width, down type): K-quants as in Q4_K_M files; 32-block and float
# types; a width of 44 rows (a partial row tile / row group) with an F32 down
CASES = [(T.Q4_K, 256, T.Q6_K), (T.Q4_K, 256, T.Q4_K), (T.Q6_K, 256, T.Q4_K),
         (T.Q8_0, 256, T.Q5_K), (T.Q4_0, 256, T.Q8_0), (T.F16, 256, T.Q6_K), (T.Q8_0, 44, T.F32)]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0].name}-{c[1]}-{c[2].name}")
@pytest.mark.parametrize("one_token", [False, True], ids=["invariant", "llama.cpp"])
def test_fused_moe_token_equals_ops(case, one_token, be):
    """One token's whole expert FFN in one call (mmid.moe_swiglu1) gives the bits of the ops it
    replaces (Graph.moe_swiglu's mul_mat_id up / gate / down, swiglu, mul, sum_experts)."""
    t, ff, down_t = case
    gate, up = _experts("gate", t, ff, K, 100), _experts("up", t, ff, K, 200)
    down = _experts("down", down_t, K, ff, 300)
    rng = np.random.default_rng(ff)
    for i, n_used in enumerate((N_USED, 4, 5, 2)):    # 2 threads: tasks / whole experts
        x = act(1, K, seed=10 + i)
        ids = rng.choice(N_EXP, n_used, replace=False).astype(np.int32).reshape(1, n_used)
        wts = rng.random((1, n_used)).astype(np.float32)
        got = be.moe_swiglu1(gate, up, down, x, ids, wts, one_token)
        if got is None:             # llama.cpp's one-token float kernels are not fused
            assert one_token and T.F16 in (t, down_t) or one_token and T.F32 in (t, down_t)
            continue
        np.testing.assert_array_equal(got, _moe_ops(be, gate, up, down, x, ids, wts, one_token))
