"""Backend ops other than attention: CpuBackend == RefBackend (stated tolerances), RefBackend ==
independent numpy formulas, factory and contract coverage.

Tolerances: rms_norm rtol 1e-6 (same f32 roundings; only the double sum order differs); rope
atol 2e-6 on unit-scale inputs (cosf/sinf vs double-rounded cos/sin, FMA contraction);
gelu: ggml's f16 table (CPU) vs f16(gelu(f16 x)) in double (ref), one f16 step; silu rtol 3e-5,
atol 1e-35 (ggml_v_expf; the f32 argument z of exp costs ~|z|
ulp relative, |z| <= 87 before exp flushes to 0); softcap rtol 1e-6.
"""
import hashlib
import sys

import numpy as np
import pytest

from pyllama.backend import OPS, ROPE_NEOX, ROPE_NORM, get_backend
from pyllama.backend.base import Backend, Weight
from pyllama.errors import BackendError
from pyllama.gguf import GGMLType

RNG = np.random.default_rng(1234)


@pytest.fixture(scope="module")
def ref():
    return get_backend("ref")


@pytest.fixture(scope="module", params=[1, 2])
def cpu(request):
    return get_backend("cpu", request.param)


def randn(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


# -- factory and contract ----------------------------------------------------------------------
def test_factory_names():
    assert get_backend("ref").name == "ref"
    b = get_backend("cpu", 2)
    assert b.name == "cpu" and b.n_threads == 2
    with pytest.raises(BackendError):
        get_backend("tpu")


def test_cuda_not_imported_by_backend_package():
    import pyllama.backend  # noqa: F401
    assert "pycuda" not in sys.modules


@pytest.mark.parametrize("name", ["ref", "cpu"])
def test_every_op_implemented(name):
    b = get_backend(name)
    assert isinstance(b, Backend)
    for op in OPS:
        assert callable(getattr(b, op)), op
    assert not getattr(type(b), "__abstractmethods__", None)


# -- rms_norm ----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 640), (7, 896), (5, 4, 256), (3, 14, 64), (2, 3)])
@pytest.mark.parametrize("with_w", [False, True])
def test_rms_norm_cpu_vs_ref(ref, cpu, shape, with_w):
    x = randn(*shape, scale=3.0)
    w = randn(shape[-1]) if with_w else None
    np.testing.assert_allclose(cpu.rms_norm(x, w, 1e-6), ref.rms_norm(x, w, 1e-6), rtol=1e-6)


def test_rms_norm_ref_formula(ref):
    x = randn(6, 640)
    w = randn(640)
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(ref.rms_norm(x, w, 1e-6), want, rtol=2e-6)


def test_rms_norm_zero_row_and_empty(ref, cpu):
    x = np.zeros((2, 8), np.float32)
    for b in (ref, cpu):
        assert np.array_equal(b.rms_norm(x, None, 1e-6), x)
        assert b.rms_norm(np.zeros((0, 8), np.float32), None, 1e-6).shape == (0, 8)


def test_rms_norm_row_invariant(cpu):
    x = randn(33, 640)
    w = randn(640)
    full = cpu.rms_norm(x, w, 1e-6)
    for i in (0, 17, 32):
        assert np.array_equal(cpu.rms_norm(x[i:i + 1], w, 1e-6)[0], full[i])


# -- rope --------------------------------------------------------------------------------------
ROPE_CASES = [  # (n_head, head_dim, n_rot, base, freq_scale, mode)
    (4, 256, 256, 1e6, 1.0, ROPE_NEOX),      # gemma3 global
    (4, 256, 256, 1e4, 1.0, ROPE_NEOX),      # gemma3 local
    (14, 64, 64, 1e6, 1.0, ROPE_NEOX),       # qwen2
    (8, 128, 128, 5e5, 0.125, ROPE_NORM),    # llama, linear scaling
    (2, 64, 32, 1e4, 1.0, ROPE_NORM),        # partial rotation
    (2, 64, 48, 1e4, 0.5, ROPE_NEOX),
]


@pytest.mark.parametrize("case", ROPE_CASES)
def test_rope_cpu_vs_ref(ref, cpu, case):
    nh, hd, n_rot, base, fs, mode = case
    pos = np.array([0, 1, 2, 7, 100, 511, 4095, 30000, -3, -700], np.int32)   # <0: K-shift
    x = randn(len(pos), nh, hd)
    a = ref.rope(x, pos, n_rot, base, fs, mode)
    b = cpu.rope(x, pos, n_rot, base, fs, mode)
    np.testing.assert_allclose(b, a, rtol=0, atol=2e-6)
    assert np.array_equal(b[..., n_rot:], x[..., n_rot:])       # unrotated tail copied


@pytest.mark.parametrize("mode", [ROPE_NORM, ROPE_NEOX])
def test_rope_ref_formula(ref, mode):
    """Small positions: the f32 theta recurrence agrees with the closed form."""
    nh, hd, n_rot, base, fs = 3, 64, 64, 10000.0, 0.5
    pos = np.arange(0, 40, 3, dtype=np.int32)
    x = randn(len(pos), nh, hd)
    i = np.arange(n_rot // 2)
    theta = pos[:, None] * fs * base ** (-2.0 * i / n_rot)          # [n, n_rot/2]
    c, s = np.cos(theta)[:, None], np.sin(theta)[:, None]
    x64 = x.astype(np.float64)
    if mode == ROPE_NEOX:
        a, b = x64[..., :n_rot // 2], x64[..., n_rot // 2:n_rot]
        want = np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    else:
        a, b = x64[..., 0::2], x64[..., 1::2]
        want = np.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(x.shape)
    np.testing.assert_allclose(ref.rope(x, pos, n_rot, base, fs, mode), want, atol=2e-5)


def test_rope_position_zero_is_identity(ref, cpu):
    x = randn(1, 4, 64)
    for b in (ref, cpu):
        assert np.array_equal(b.rope(x, np.zeros(1, np.int32), 64, 1e4, 1.0, ROPE_NEOX), x)


def test_rope_token_invariant(cpu):
    pos = np.arange(50, 90, dtype=np.int32)
    x = randn(len(pos), 4, 256)
    full = cpu.rope(x, pos, 256, 1e6, 1.0, ROPE_NEOX)
    for i in (0, 21, 39):
        one = cpu.rope(x[i:i + 1], pos[i:i + 1], 256, 1e6, 1.0, ROPE_NEOX)
        assert np.array_equal(one[0], full[i])


def test_rope_table_reuse(ref):
    """Cached cos/sin tables never leak between positions or parameters."""
    cpu = get_backend("cpu", 1)
    x = randn(6, 2, 64)
    p1, p2 = np.arange(6, dtype=np.int32), np.arange(6, dtype=np.int32) + 1
    calls = [(p1, 1e4, 1.0), (p2, 1e4, 1.0), (p1, 1e6, 1.0), (p1, 1e4, 0.5), (p1, 1e4, 1.0)] * 2
    for pos, base, fs in calls:
        for n_rot in (64, 32):
            np.testing.assert_allclose(cpu.rope(x, pos, n_rot, base, fs, ROPE_NEOX),
                                       ref.rope(x, pos, n_rot, base, fs, ROPE_NEOX), atol=2e-6)


def test_rope_rejects_bad_args(cpu):
    with pytest.raises(BackendError):
        cpu.rope(randn(1, 1, 8), np.zeros(1, np.int32), 8, 1e4, 1.0, 5)
    with pytest.raises(BackendError):
        cpu.rope(randn(1, 1, 8), np.zeros(1, np.int32), 16, 1e4, 1.0, ROPE_NEOX)


# -- activations -------------------------------------------------------------------------------
def _act_inputs():
    rng = np.random.default_rng(99)
    x = np.concatenate([rng.standard_normal(20000) * 4, np.linspace(-120, 120, 20001),
                        [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-30, -1e-30]])
    return x.astype(np.float32)


@pytest.mark.parametrize("op", ["gelu", "silu"])
def test_activation_cpu_vs_ref(ref, cpu, op):
    x = _act_inputs()
    with np.errstate(all="ignore"):
        a = getattr(ref, op)(x)
    b = getattr(cpu, op)(x)
    if op == "gelu":   # ggml's f16 table vs ref's double formula: one f16 step (two for tiny
        # results: ggml's f32 tanhf cancels in 1 + tanh for x << 0)
        np.testing.assert_allclose(b, a, rtol=1e-3, atol=2.5e-7, equal_nan=True)
        return
    # relative error grows with |z| (f32 argument, ~|z| ulp: 3e-5 near the flush point); the
    # 8-lane exp flushes exp(z) to 0 below z = -87: results under ~1e-35 may become 0
    np.testing.assert_allclose(b, a, rtol=3e-5, atol=1e-35, equal_nan=True)


# sha256 of ggml_table_gelu_f16 (llama.cpp 0c1e570, AVX2 build) over the finite f16 values in
# (-10, 10), read from libggml-cpu after ggml_cpu_init
GGML_GELU_TABLE_SHA256 = "941d5b3ccda9cd5ca0a10eb534559bb12b9a4512387d4ba59e4532bb9644d812"


def test_gelu_is_ggml_f16_table(cpu):
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    x = h.astype(np.float32)
    x = x[np.isfinite(x) & (x > -10) & (x < 10)]
    y = cpu.gelu(x)
    assert np.array_equal(y.astype(np.float16).astype(np.float32), y)
    assert hashlib.sha256(y.astype(np.float16).view(np.uint16).tobytes()).hexdigest() == \
        GGML_GELU_TABLE_SHA256
    big = np.array([-1e4, -10.0, 10.0, 12.5], np.float32)
    assert np.array_equal(cpu.gelu(big), np.array([0, 0, 10.0, 12.5], np.float32))
    # the same cases through the 8-wide path, and values by the thresholds and beyond f16
    edge = np.array([-1e4, -10.0, 10.0, 12.5, -10.0001, 9.9999, np.inf, -np.inf, 7e4, -7e4,
                     -9.99, 1e-8, -0.0, 6e-5, 0.5, -3.0], np.float32)
    one_by_one = np.array([cpu.gelu(edge[i:i + 1])[0] for i in range(edge.size)], np.float32)
    assert np.array_equal(cpu.gelu(edge), one_by_one)
    assert np.array_equal(cpu.gelu(edge)[:4], np.array([0, 0, 10.0, 12.5], np.float32))


def test_activation_known_values(ref, cpu):
    x = np.array([-3.0, -1.0, 0.0, 0.5, 1.0, 3.0], np.float32)
    u = np.sqrt(2 / np.pi) * x.astype(np.float64) * (1 + 0.044715 * x.astype(np.float64) ** 2)
    gelu = 0.5 * x * (1 + np.tanh(u))
    silu = x / (1 + np.exp(-x.astype(np.float64)))
    for b in (ref, cpu):   # GELU: f16 in, f16 out (ggml's table)
        np.testing.assert_allclose(b.gelu(x), gelu, rtol=1e-3, atol=1e-7)
        np.testing.assert_allclose(b.silu(x), silu, rtol=2e-6, atol=1e-7)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 2047, 2048, 2049, 5000])
def test_activation_position_invariant(cpu, n):
    """An element's value does not depend on where it sits (vector body vs padded tail)."""
    x = randn(n, scale=3.0)
    full_g, full_s = cpu.gelu(x), cpu.silu(x)
    for i in {0, n // 2, n - 1}:
        assert full_g[i] == cpu.gelu(x[i:i + 1])[0]
        assert full_s[i] == cpu.silu(x[i:i + 1])[0]


@pytest.mark.parametrize("op,act", [("geglu", "gelu"), ("swiglu", "silu")])
def test_gated_cpu_vs_ref(ref, cpu, op, act):
    g, u = randn(13, 2051, scale=3.0), randn(13, 2051)
    a = getattr(ref, op)(g, u)
    b = getattr(cpu, op)(g, u)
    tol = (1e-3, 1.2e-6) if act == "gelu" else (3e-5, 1e-35)
    np.testing.assert_allclose(b, a, rtol=tol[0], atol=tol[1])
    assert np.array_equal(b, getattr(cpu, act)(g) * u)


def test_softcap_cpu_vs_ref(ref, cpu):
    x = randn(9, 1000, scale=40.0)
    a, b = ref.softcap(x, 30.0), cpu.softcap(x, 30.0)
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=2e-6)
    assert np.abs(b).max() <= 30.0
    np.testing.assert_allclose(a, 30.0 * np.tanh(x.astype(np.float64) / 30.0), rtol=1e-6,
                               atol=4e-6)


def test_elementwise_arith(ref, cpu):
    a, b = randn(4, 5), randn(4, 5)
    for be in (ref, cpu):
        assert np.array_equal(be.add(a, b), a + b)
        assert np.array_equal(be.mul(a, b), a * b)
        assert np.array_equal(be.scale(a, 0.125), a * np.float32(0.125))


def test_thread_count_invariance():
    """Large enough to run multi-threaded: 1 and 2 threads give identical bits."""
    one, two = get_backend("cpu", 1), get_backend("cpu", 2)
    x = randn(300, 4, 256, scale=2.0)
    w = randn(256)
    pos = np.arange(300, dtype=np.int32) * 7
    for f in (lambda b: b.rms_norm(x, w, 1e-6),
              lambda b: b.rope(x, pos, 256, 1e6, 1.0, ROPE_NEOX),
              lambda b: b.gelu(x), lambda b: b.silu(x), lambda b: b.softcap(x, 3.0),
              lambda b: b.geglu(x, x[::-1]), lambda b: b.swiglu(x, x[::-1])):
        assert np.array_equal(f(one), f(two))


# -- set_rows ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_set_rows(ref, cpu, dtype):
    for b in (ref, cpu):
        cache = b.alloc_kv(16, 24, dtype)
        cache[:] = 7
        cells = np.array([3, 0, 15], np.int32)
        rows = randn(3, 2, 12, scale=100.0)
        rows[0, 0, :3] = [65520.0, 1e-8, 0.1]             # overflow, underflow, rounding
        b.set_rows(cache, cells, rows)
        with np.errstate(over="ignore"):
            want = rows.reshape(3, 24).astype(cache.dtype)  # numpy: round-to-nearest-even
        assert np.array_equal(cache[cells], want, equal_nan=True)
        untouched = np.setdiff1d(np.arange(16), cells)
        assert np.all(cache[untouched] == 7)
    if dtype == "f16":
        assert np.isinf(cache[3, 0]) and cache[3, 1] == 0


def test_set_rows_f16_ties_to_even(cpu):
    cache = cpu.alloc_kv(1, 2, "f16")
    # 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even -> 1.0; 1 + 3*2^-11 -> 1 + 2^-9
    cpu.set_rows(cache, np.array([0]), np.array([[1 + 2 ** -11, 1 + 3 * 2 ** -11]], np.float32))
    assert cache[0, 0] == 1.0 and cache[0, 1] == np.float16(1 + 2 ** -9)


@pytest.mark.parametrize("width", [7, 16, 21])      # 7: scalar path only; 16: vector; 21: both
def test_set_rows_f16_rounding_all_classes(ref, cpu, width):
    """Random f32 bit patterns (normals, f16 subnormals, ties, overflow, inf, NaN) round exactly
    like numpy's astype(float16) (round to nearest even)."""
    rng = np.random.default_rng(width)
    n = 30000
    bits = rng.integers(0, 2**32, size=(n, width), dtype=np.uint64).astype(np.uint32)
    # bias half of the patterns into the f16 range (exponents 100..145) and onto exact ties
    near = (bits & 0x807FFFFF) | (rng.integers(100, 146, size=bits.shape, dtype=np.uint32) << 23)
    bits[: n // 2] = near[: n // 2]
    bits[n // 4: n // 2] = (bits[n // 4: n // 2] & ~np.uint32(0x1FFF)) | np.uint32(0x1000)
    rows = bits.view(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        want = rows.astype(np.float16)
    for b in (ref, cpu):
        cache = b.alloc_kv(n, width, "f16")
        b.set_rows(cache, np.arange(n), rows)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(cache), nan)
        assert np.array_equal(cache.view(np.uint16)[~nan], want.view(np.uint16)[~nan])


def test_set_rows_rejects_bad_cell(cpu):
    cache = cpu.alloc_kv(4, 8, "f16")
    with pytest.raises(BackendError):
        cpu.set_rows(cache, np.array([4]), randn(1, 8))
    assert np.all(cache == 0)


# -- matmul / get_rows delegate to the quantized-matmul modules --------------------------------
def test_matmul_and_get_rows_f32(ref, cpu):
    w = randn(40, 64)
    wt = Weight("w", GGMLType.F32, w.shape, w)
    x = randn(5, 64)
    np.testing.assert_allclose(cpu.matmul(wt, x), ref.matmul(wt, x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ref.matmul(wt, x), x @ w.T, rtol=1e-5, atol=1e-5)
    ids = np.array([3, 0, 39, 3])
    assert np.array_equal(cpu.get_rows(wt, ids), w[ids])
    assert np.array_equal(ref.get_rows(wt, ids), w[ids])
