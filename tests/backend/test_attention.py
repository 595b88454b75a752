"""attention(q, k_cache, v_cache, kv_cells, q_start, q_end, scale, softcap) and its invariants.

Oracles: a dense masked-softmax numpy reference in float64 (independent of RefBackend's gather
loop), then CpuBackend == RefBackend within atol 1e-5 / rtol 1e-5 (outputs are convex combinations
of unit-scale V rows; f32 accumulation vs float64). Batch, thread, placement and unlisted-NaN
invariants are bit-exact on CpuBackend.
"""
import numpy as np
import pytest

from pyllama.backend import get_backend
from pyllama.errors import BackendError

SHAPES = {  # name: (n_head, n_head_kv, head_dim)
    "gemma270m": (4, 1, 256),
    "qwen05b": (14, 2, 64),
    "mha128": (4, 4, 128),
    "odd": (6, 3, 40),          # head_dim not a multiple of 32, v tail path
}


@pytest.fixture(scope="module")
def ref():
    return get_backend("ref")


@pytest.fixture(scope="module")
def cpu():
    return get_backend("cpu", 2)


def make_kv(rng, n_cells, n_kv, d, dtype, nan_fill=False):
    k = (rng.standard_normal((n_cells, n_kv * d))).astype(dtype)
    v = (rng.standard_normal((n_cells, n_kv * d))).astype(dtype)
    if nan_fill:
        k[:] = np.nan
        v[:] = np.nan
    return k, v


def random_lists(rng, n_q, n_cells, max_len):
    """Per query a random subset of cells (random order = its 'position order'); returns the
    concatenated kv_cells and q_start/q_end."""
    lists = [rng.permutation(n_cells)[:rng.integers(0, max_len + 1)] for _ in range(n_q)]
    return pack(lists)


def pack(lists):
    lens = np.array([len(c) for c in lists], np.int64)
    q_end = np.cumsum(lens)
    cells = np.concatenate(lists).astype(np.int32) if lists else np.zeros(0, np.int32)
    return cells, q_end - lens, q_end


def dense_attention(q, k, v, cells, q_start, q_end, scale, softcap=0.0):
    """Masked softmax over ALL cells in float64 (unlisted -> -inf; their values zeroed first)."""
    n_q, n_head, d = q.shape
    n_kv = k.shape[1] // d
    kk = np.nan_to_num(k.astype(np.float64)).reshape(len(k), n_kv, d)
    vv = np.nan_to_num(v.astype(np.float64)).reshape(len(v), n_kv, -1)
    out = np.zeros((n_q, n_head, vv.shape[2]))
    for i in range(n_q):
        listed = cells[q_start[i]:q_end[i]]
        if len(listed) == 0:
            continue
        mask = np.full(len(k), -np.inf)
        mask[listed] = 0.0
        for h in range(n_head):
            g = h // (n_head // n_kv)
            s = scale * (kk[:, g] @ q[i, h].astype(np.float64))
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            s = s + mask
            p = np.exp(s - s.max())
            out[i, h] = (p / p.sum()) @ vv[:, g]
    return out


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("softcap", [0.0, 5.0])
def test_ref_and_cpu_vs_dense(ref, cpu, shape, dtype, softcap):
    rng = np.random.default_rng([len(shape), int(softcap), SHAPES[shape][2]])
    nh, nkv, d = SHAPES[shape]
    k, v = make_kv(rng, 97, nkv, d, dtype)
    q = rng.standard_normal((9, nh, d)).astype(np.float32)
    cells, qs, qe = random_lists(rng, 9, 97, 60)
    scale = 1.0 / np.sqrt(d)
    want = dense_attention(q, k, v, cells, qs, qe, scale, softcap)
    got_ref = ref.attention(q, k, v, cells, qs, qe, scale, softcap)
    got_cpu = cpu.attention(q, k, v, cells, qs, qe, scale, softcap)
    assert got_ref.dtype == got_cpu.dtype == np.float32
    # an f16 cache rounds q and the probabilities to f16 as llama.cpp's mul_mat does (|v| <= ~4.5)
    tol = 2e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got_ref, want, rtol=tol, atol=tol)
    # same lanes, roundings and exp: bit-equal but for tanhf vs numpy's tanh (softcap)
    if softcap:
        np.testing.assert_allclose(got_cpu, got_ref, rtol=1e-6, atol=1e-6)
    else:
        assert np.array_equal(got_cpu, got_ref)


def test_unlisted_cells_never_read(cpu, ref):
    """Unlisted cells hold NaN: no NaN may appear, and the result equals the zero-filled one."""
    rng = np.random.default_rng(7)
    nh, nkv, d = SHAPES["qwen05b"]
    k, v = make_kv(rng, 300, nkv, d, np.float16)
    q = rng.standard_normal((12, nh, d)).astype(np.float32)
    cells, qs, qe = random_lists(rng, 12, 150, 150)      # only cells < 150 are ever listed
    clean = cpu.attention(q, k, v, cells, qs, qe, 0.125)
    k[150:], v[150:] = np.nan, np.nan
    for b in (cpu, ref):
        out = b.attention(q, k, v, cells, qs, qe, 0.125)
        assert not np.isnan(out).any()
    assert np.array_equal(cpu.attention(q, k, v, cells, qs, qe, 0.125), clean)


@pytest.mark.parametrize("b", ["ref", "cpu"])
def test_empty_lists(b):
    be = get_backend(b, 2)
    rng = np.random.default_rng(3)
    k, v = make_kv(rng, 8, 1, 64, np.float16, nan_fill=True)
    q = rng.standard_normal((3, 2, 64)).astype(np.float32)
    z = np.zeros(3, np.int64)
    out = be.attention(q, k, v, np.zeros(0, np.int32), z, z, 0.1)
    assert out.shape == (3, 2, 64) and np.all(out == 0)
    k[:] = 1.0
    v[:] = 2.0
    out = be.attention(q, k, v, np.array([5], np.int32), np.array([0, 1, 0]),
                       np.array([0, 1, 1]), 0.1)
    assert np.all(out[0] == 0) and np.all(out[1] == 0) and np.allclose(out[2], 2.0)
    none = be.attention(q[:0], k, v, np.array([5], np.int32), z[:0], z[:0], 0.1)
    assert none.shape == (0, 2, 64)


def test_batch_and_thread_invariance(cpu):
    """A query's output is bit-identical alone, in any batch, with 1 or 2 threads."""
    rng = np.random.default_rng(11)
    for nh, nkv, d in SHAPES.values():
        k, v = make_kv(rng, 200, nkv, d, np.float16)
        q = rng.standard_normal((60, nh, d)).astype(np.float32)   # big enough for 2 threads
        cells, qs, qe = random_lists(rng, 60, 200, 200)
        full = cpu.attention(q, k, v, cells, qs, qe, 0.1, 0.0)
        one_thread = get_backend("cpu", 1).attention(q, k, v, cells, qs, qe, 0.1, 0.0)
        assert np.array_equal(full, one_thread)
        for i in (0, 5, 59):
            lst = cells[qs[i]:qe[i]]
            alone = cpu.attention(q[i:i + 1], k, v, lst, np.array([0]), np.array([len(lst)]),
                                  0.1, 0.0)
            assert np.array_equal(alone[0], full[i])
        sub = [3, 9, 10]                                 # a different batch containing query 9
        c2, s2, e2 = pack([cells[qs[j]:qe[j]] for j in sub])
        assert np.array_equal(cpu.attention(q[sub], k, v, c2, s2, e2, 0.1)[1], full[9])


def test_head_grouping_invariance():
    """Splitting a KV head's query heads into tasks of 1..4 heads changes no bit."""
    rng = np.random.default_rng(21)
    be = get_backend("cpu", 2)
    for nh, nkv, d in SHAPES.values():
        k, v = make_kv(rng, 90, nkv, d, np.float16)
        q = rng.standard_normal((5, nh, d)).astype(np.float32)
        cells, qs, qe = random_lists(rng, 5, 90, 90)
        outs = []
        for hb in (1, 2, 3, 4):
            be.attn_heads_per_task = hb
            outs.append(be.attention(q, k, v, cells, qs, qe, 0.1, 3.0))
        for o in outs[1:]:
            assert np.array_equal(o, outs[0])


def test_prefill_equals_token_by_token(cpu):
    """Causal prefill in one call == one call per token (cells listed in position order)."""
    rng = np.random.default_rng(5)
    nh, nkv, d = SHAPES["gemma270m"]
    n = 40
    k, v = make_kv(rng, 64, nkv, d, np.float16)
    slots = rng.permutation(64)[:n].astype(np.int32)     # where position p lives
    q = rng.standard_normal((n, nh, d)).astype(np.float32)
    cells, qs, qe = pack([slots[:p + 1] for p in range(n)])
    batch = cpu.attention(q, k, v, cells, qs, qe, 0.0625)
    for p in range(n):
        step = cpu.attention(q[p:p + 1], k, v, slots[:p + 1], np.array([0]), np.array([p + 1]),
                             0.0625)
        assert np.array_equal(step[0], batch[p])


def test_cell_placement_invariance(cpu):
    """The same rows stored in other cells (listed in the same order) give identical output."""
    rng = np.random.default_rng(9)
    nh, nkv, d = SHAPES["qwen05b"]
    k, v = make_kv(rng, 50, nkv, d, np.float16)
    q = rng.standard_normal((2, nh, d)).astype(np.float32)
    order = rng.permutation(50).astype(np.int32)
    a = cpu.attention(q, k, v, np.tile(order, 2), np.array([0, 50]), np.array([50, 100]), 0.2)
    perm = rng.permutation(50)                           # cell c moves to perm[c]
    k2, v2 = np.empty_like(k), np.empty_like(v)
    k2[perm], v2[perm] = k, v
    moved = perm[order].astype(np.int32)
    b = cpu.attention(q, k2, v2, np.tile(moved, 2), np.array([0, 50]), np.array([50, 100]), 0.2)
    assert np.array_equal(a, b)


def test_large_scores_stable(ref, cpu):
    rng = np.random.default_rng(2)
    k, v = make_kv(rng, 30, 1, 64, np.float32)
    q = (rng.standard_normal((2, 2, 64)) * 50).astype(np.float32)
    cells = np.arange(30, dtype=np.int32)
    qs, qe = np.array([0, 0]), np.array([30, 30])
    a = ref.attention(q, k, v, cells, qs, qe, 10.0)
    b = cpu.attention(q, k, v, cells, qs, qe, 10.0)
    assert np.isfinite(b).all()
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_long_decode_matches_ref(ref, cpu):
    rng = np.random.default_rng(4)
    for nh, nkv, d in (SHAPES["gemma270m"], SHAPES["qwen05b"]):
        k, v = make_kv(rng, 4096, nkv, d, np.float16)
        q = rng.standard_normal((1, nh, d)).astype(np.float32)
        cells = rng.permutation(4096).astype(np.int32)
        a = ref.attention(q, k, v, cells, np.array([0]), np.array([4096]), 1 / np.sqrt(d))
        b = cpu.attention(q, k, v, cells, np.array([0]), np.array([4096]), 1 / np.sqrt(d))
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-5)


def test_validation(cpu):
    rng = np.random.default_rng(1)
    k, v = make_kv(rng, 8, 1, 64, np.float16)
    q = rng.standard_normal((1, 2, 64)).astype(np.float32)
    one = (np.array([0]), np.array([1]))
    with pytest.raises(BackendError):
        cpu.attention(q, k, v, np.array([8], np.int32), *one, 0.1)
    with pytest.raises(BackendError):
        cpu.attention(q, k, v, np.array([-1], np.int32), *one, 0.1)
    with pytest.raises(BackendError):
        cpu.attention(q, k, v, np.array([0], np.int32), np.array([0]), np.array([2]), 0.1)
    with pytest.raises(BackendError):
        cpu.attention(q, k, v.view(np.int16), np.array([0], np.int32), *one, 0.1)
    with pytest.raises(BackendError):
        cpu.attention(q[:, :, :48], k, v, np.array([0], np.int32), *one, 0.1)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("n_q,n_head,n_kv,d", [(1, 8, 2, 64), (5, 8, 8, 64), (9, 6, 2, 40)])
def test_sinks_native_matches_ref(dtype, n_q, n_head, n_kv, d):
    """gpt-oss's attention sinks (ggml_soft_max_add_sinks) in the CPU kernel: the bits of the numpy
    reference (Backend.attention_sinks: ref.attention_lanes with sinks), whatever the thread count
    and head grouping; sinks large enough to dominate some heads."""
    from pyllama.backend.base import Backend
    from pyllama.backend.cpu import CpuBackend
    rng = np.random.default_rng([n_q, n_head, d])
    k, v = make_kv(rng, 70, n_kv, d, dtype)
    lists = [np.sort(rng.permutation(70)[:rng.integers(1, 70)]) for _ in range(n_q)]
    cells, qs, qe = pack(lists)
    q = rng.standard_normal((n_q, n_head, d)).astype(np.float32)
    sinks = (rng.standard_normal(n_head) * 3).astype(np.float32)
    sinks[0] = 40.0
    want = Backend.attention_sinks(CpuBackend(1), q, k, v, cells, qs, qe, 0.125, sinks)
    for nt, hb in ((1, 1), (2, 4), (2, 2)):
        be = CpuBackend(nt)
        be.attn_heads_per_task = hb
        got = be.attention_sinks(q, k, v, cells, qs, qe, 0.125, sinks)
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("head_dim", [20, 256])
def test_long_lists_equal_ref(ref, cpu, head_dim):
    """Lists of hundreds of cells (the V product runs over blocks of 32 cells, carrying each
    column group's 8 lane chains between blocks; head sizes with and without a % 8 tail): the
    native kernel equals the reference bit for bit."""
    rng = np.random.default_rng(head_dim)
    k, v = make_kv(rng, 400, 1, head_dim, np.float16)
    q = rng.standard_normal((5, 2, head_dim)).astype(np.float32)
    cells, qs, qe = random_lists(rng, 5, 400, 390)
    scale = 1.0 / np.sqrt(head_dim)
    assert np.array_equal(cpu.attention(q, k, v, cells, qs, qe, scale),
                          ref.attention(q, k, v, cells, qs, qe, scale))
