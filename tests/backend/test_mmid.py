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
from test_matmul import act, rand_weight, weight  # tests/backend is on sys.path

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
    x3 = x.reshape(x.shape[0], 1, -1)
    u = be.mul_mat_id(up, x3, ids, one_token)
    g = be.mul_mat_id(gate, x3, ids, one_token)
    d = be.mul_mat_id(down, be.swiglu(g, u), ids, one_token)
    return Graph.sum_experts(be.mul(d, wts[..., None]))


def _experts(name, t, rows, cols, seed):
    return Weight(f"{name}.{t.name}", t, (N_EXP, rows, cols),
                  np.stack([rand_weight(t, rows, cols, seed=seed + e) for e in range(N_EXP)]))


# (gate / up type, expert width, down type): K-quants as in Q4_K_M files; 32-block and float
# types; a width of 42 rows (a partial row tile / row group) with an F32 down
CASES = [(T.Q4_K, 256, T.Q6_K), (T.Q4_K, 256, T.Q4_K), (T.Q6_K, 256, T.Q4_K),
         (T.Q8_0, 256, T.Q5_K), (T.Q4_0, 256, T.Q8_0), (T.F16, 256, T.Q6_K), (T.Q8_0, 42, T.F32),
         (T.Q4_K, 256, T.Q6_K, T.Q8_0)]      # up of another type (activation kind) than gate


def _moe_weights(case):
    t, ff, down_t = case[:3]
    up_t = case[3] if len(case) > 3 else t
    return (_experts("gate", t, ff, K, 100), _experts("up", up_t, ff, K, 200),
            _experts("down", down_t, K, ff, 300))


def _case_id(c):
    return f"{c[0].name}-{c[1]}-{c[2].name}" + (f"-up_{c[3].name}" if len(c) > 3 else "")


@pytest.mark.parametrize("case", CASES, ids=_case_id)
@pytest.mark.parametrize("one_token", [False, True], ids=["invariant", "llama.cpp"])
def test_fused_moe_token_equals_ops(case, one_token, be):
    """One token's whole expert FFN in one call (Backend.moe_swiglu) gives the bits of the ops it
    replaces (Graph.moe_swiglu's mul_mat_id up / gate / down, swiglu, mul, sum_experts)."""
    t, down_t = case[0], case[2]
    gate, up, down = _moe_weights(case)
    rng = np.random.default_rng(case[1])
    for i, n_used in enumerate((N_USED, 4, 5, 2)):    # 2 threads: tasks / whole experts
        x = act(1, K, seed=10 + i)
        ids = rng.choice(N_EXP, n_used, replace=False).astype(np.int32).reshape(1, n_used)
        wts = rng.random((1, n_used)).astype(np.float32)
        got = be.moe_swiglu(gate, up, down, x, ids, wts, one_token)
        if got is None:             # llama.cpp's one-token float kernels are not fused
            assert one_token and (T.F16 in (t, down_t) or T.F32 in (t, down_t))
            continue
        np.testing.assert_array_equal(got, _moe_ops(be, gate, up, down, x, ids, wts, one_token))


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_fused_moe_batch_equals_ops(case, be):
    """A batch's expert FFNs in one call (Backend.moe_swiglu, numerics "invariant": slots sorted
    by expert, one task list) give the bits of the ops; experts with one row and with many."""
    gate, up, down = _moe_weights(case)
    for n, n_used in ((12, N_USED), (9, 4), (2, 2)):
        x = act(n, K, seed=n)
        ids = routing(n, seed=n) if n_used == N_USED else np.stack(
            [np.random.default_rng(n + i).choice(N_EXP, n_used, replace=False)
             for i in range(n)]).astype(np.int32)
        wts = np.random.default_rng(n).random((n, n_used)).astype(np.float32)
        got = be.moe_swiglu(gate, up, down, x, ids, wts, False)
        assert got is not None
        np.testing.assert_array_equal(got, _moe_ops(be, gate, up, down, x, ids, wts, False),
                                      err_msg=f"n={n}")
        assert be.moe_swiglu(gate, up, down, x, ids, wts, True) is None     # llama.cpp: ops
    assert be.moe_swiglu(gate, up, down, x[:0], ids[:0], wts[:0], False) is None   # no rows


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[-2], CASES[-1]], ids=_case_id)
@pytest.mark.parametrize("router_t", [T.F32, T.Q8_0], ids=lambda t: "router_" + t.name)
def test_fused_moe_routed_token_equals_ops(case, router_t, be):
    """One token's router logits, softmax gating and experts in one call
    (Backend.moe_routed_swiglu, numerics "invariant") give the bits of matmul, moe_route and the
    expert ops."""
    gate, up, down = _moe_weights(case)
    router = weight(router_t, rand_weight(router_t, N_EXP, K, seed=7))
    for i, (n_used, norm, scale) in enumerate(((N_USED, True, 0.0), (4, False, 2.5),
                                               (2, True, 1.0))):
        x = act(1, K, seed=20 + i)
        got = be.moe_routed_swiglu(router, gate, up, down, x, n_used, norm, scale)
        assert got is not None
        ids, wts = be.moe_route(be.matmul(router, x), n_used, norm, scale)
        np.testing.assert_array_equal(got, _moe_ops(be, gate, up, down, x, ids, wts, False))


@pytest.mark.parametrize("arch", ["qwen3moe", "qwen2moe", "deepseek2", "glm4moe"])
@pytest.mark.parametrize("numerics", ["invariant", "llama.cpp"])
def test_fused_moe_model_logits_equal_ops(tiny_model_path, arch, numerics, monkeypatch):
    """A tiny MoE model's logits (a prefill, then one-token decodes) are the same bits with the
    CPU backend's fused MoE calls as with the graph's separate ops."""
    import pyllama
    from tiny import random_tokens
    m = pyllama.load_model(tiny_model_path(arch), n_threads=2)
    toks = random_tokens(24, seed=5)

    def run():
        ctx = pyllama.Context(m, n_ctx=128, numerics=numerics, n_threads=2)
        a = ctx.eval(toks[:16], logits_all=True)
        return np.concatenate([a] + [ctx.eval([int(t)]) for t in toks[16:]])
    fused = run()
    monkeypatch.setattr(CpuBackend, "moe_swiglu", Backend.moe_swiglu)
    monkeypatch.setattr(CpuBackend, "moe_routed_swiglu", Backend.moe_routed_swiglu)
    np.testing.assert_array_equal(fused, run())
