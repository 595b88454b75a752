"""CudaBackend op by op against numpy oracles and RefBackend (needs a GPU; skipped without one).

Tolerances: dequantization (get_rows) is bit-exact with the gguf package's dequantize; matmul
(f32 dot over dequantized weights, fmaf accumulation) within 1e-5 of sum |w x| from a float64
product; rms_norm / rope / elementwise ops within 2 ulp of RefBackend (same f32 roundings,
transcendentals in double; GELU through ggml's f16 rounding like RefBackend); attention within
2e-5 of a float64 softmax (RefBackend, which rounds q and p to f16 as llama.cpp's CPU path,
within 5e-3). Batch invariance is bit-exact: a token's row alone == the same row inside a
larger launch.
"""
import gguf
import numpy as np
import pytest

from pyllama.backend import ROPE_NEOX, ROPE_NORM
from pyllama.backend.base import Weight
from pyllama.backend.cuda import DevArray
from pyllama.errors import BackendError
from pyllama.gguf import GGMLType
from pyllama.quant import quantize

pytestmark = pytest.mark.cuda

QT = gguf.GGMLQuantizationType
TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q5_0, GGMLType.Q4_K, GGMLType.Q6_K]


class _Info:
    """The fields Backend.weight reads from a reader TensorInfo."""

    def __init__(self, name, qtype, shape, data):
        self.name, self.type, self.shape, self.data = name, qtype, shape, data


def make_weight(be, rng, qtype, rows, cols):
    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    if qtype == GGMLType.F32:
        raw = w
    elif qtype == GGMLType.F16:
        raw = w.astype(np.float16)
    else:
        raw = quantize(w, qtype)                      # gguf cannot quantize K-quants
    deq = gguf.quants.dequantize(raw, QT(int(qtype))).reshape(rows, cols).astype(np.float32)
    return be.weight(_Info(f"w.{qtype.name}", qtype, (rows, cols), raw)), deq, raw


def ulp_close(actual, desired, maxulp=2):
    np.testing.assert_array_max_ulp(np.asarray(actual), np.asarray(desired), maxulp=maxulp)


# -- weights ------------------------------------------------------------------------------------
@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_get_rows_bit_exact(cuda, rng, qtype):
    w, deq, _ = make_weight(cuda, rng, qtype, 40, 512)
    ids = np.array([3, 0, 39, 3, 17], dtype=np.int32)
    np.testing.assert_array_equal(np.asarray(cuda.get_rows(w, ids)), deq[ids])


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("n", [1, 3, 8, 19])
def test_matmul_vs_float64(cuda, ref, rng, qtype, n):
    rows, cols = 70, 768
    w, deq, raw = make_weight(cuda, rng, qtype, rows, cols)
    x = rng.standard_normal((n, cols)).astype(np.float32)
    y = np.asarray(cuda.matmul(w, x))
    exact = x.astype(np.float64) @ deq.astype(np.float64).T
    bound = np.abs(x).astype(np.float64) @ np.abs(deq).astype(np.float64).T
    assert y.shape == (n, rows)
    assert np.all(np.abs(y - exact) <= 1e-5 * bound + 1e-30)
    # RefBackend quantizes activations to q8 blocks as llama.cpp's CPU vec_dot does
    yr = ref.matmul(Weight(w.name, w.type, w.shape, raw), x)
    assert np.all(np.abs(y - yr) <= 2e-2 * bound + 1e-6)


@pytest.mark.parametrize("qtype", [GGMLType.Q4_K, GGMLType.Q8_0, GGMLType.F16], ids=str)
def test_matmul_batch_invariant(cuda, rng, qtype):
    w, _, _ = make_weight(cuda, rng, qtype, 33, 512)
    x = rng.standard_normal((21, 512)).astype(np.float32)
    full = np.asarray(cuda.matmul(w, x))
    for i in (0, 7, 8, 20):
        np.testing.assert_array_equal(np.asarray(cuda.matmul(w, x[i:i + 1]))[0], full[i])
    np.testing.assert_array_equal(np.asarray(cuda.matmul(w, x[5:14])), full[5:14])


def test_matmul_3d_input_and_unsupported_type(cuda, rng):
    w, deq, _ = make_weight(cuda, rng, GGMLType.F32, 16, 64)
    x = rng.standard_normal((3, 2, 64)).astype(np.float32)
    y = np.asarray(cuda.matmul(w, x))
    assert y.shape == (3, 2, 16)
    np.testing.assert_allclose(y, x @ deq.T, rtol=1e-5, atol=1e-6)
    q4 = quantize(rng.standard_normal((8, 64)).astype(np.float32), GGMLType.Q4_0)
    w4 = cuda.weight(_Info("q4_0", GGMLType.Q4_0, (8, 64), q4))   # uploaded as F32
    deq4 = gguf.quants.dequantize(q4, QT.Q4_0).reshape(8, 64)
    np.testing.assert_allclose(np.asarray(cuda.matmul(w4, x[0])), x[0] @ deq4.T, rtol=1e-5,
                               atol=1e-5)


# -- normalisation, rope, elementwise ------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 640), (7, 896), (5, 4, 256), (3, 14, 64), (2, 3)])
@pytest.mark.parametrize("with_w", [True, False])
def test_rms_norm(cuda, ref, rng, shape, with_w):
    x = rng.standard_normal(shape).astype(np.float32) * 3
    w = rng.standard_normal(shape[-1]).astype(np.float32) if with_w else None
    ulp_close(cuda.rms_norm(x, w, 1e-6), ref.rms_norm(x, w, 1e-6))


@pytest.mark.parametrize("mode", [ROPE_NORM, ROPE_NEOX])
@pytest.mark.parametrize("hd,n_rot", [(64, 64), (256, 256), (128, 64)])
def test_rope(cuda, ref, rng, mode, hd, n_rot):
    x = rng.standard_normal((9, 3, hd)).astype(np.float32)
    pos = np.array([0, 1, 2, 100, 4095, 33000, -5, 7, 1], dtype=np.int32)
    for base in (10000.0, 1e6):
        got = np.asarray(cuda.rope(x, pos, n_rot, base, 1.0, mode))
        np.testing.assert_allclose(got, ref.rope(x, pos, n_rot, base, 1.0, mode), atol=2e-6)


@pytest.mark.parametrize("op", ["gelu", "silu"])
def test_activations(cuda, ref, rng, op):
    x = np.concatenate([rng.standard_normal(5000).astype(np.float32) * 4,
                        np.array([0, -0.0, 90, -90, 1e-30, 1e30, -1e30], np.float32)])
    ulp_close(getattr(cuda, op)(x), getattr(ref, op)(x))


def test_gates_softcap_binary(cuda, ref, rng):
    g = rng.standard_normal((6, 300)).astype(np.float32) * 3
    u = rng.standard_normal((6, 300)).astype(np.float32)
    ulp_close(cuda.geglu(g, u), ref.mul(ref.gelu(g), u))
    ulp_close(cuda.swiglu(g, u), ref.mul(ref.silu(g), u))
    ulp_close(cuda.softcap(g * 20, 30.0), ref.softcap(g * 20, 30.0))
    np.testing.assert_array_equal(np.asarray(cuda.add(g, u)), g + u)
    np.testing.assert_array_equal(np.asarray(cuda.mul(g, u)), g * u)
    np.testing.assert_array_equal(np.asarray(cuda.add(g, u[0])), g + u[0])     # bias broadcast
    np.testing.assert_array_equal(np.asarray(cuda.mul(u[1], g)), g * u[1])
    np.testing.assert_array_equal(np.asarray(cuda.scale(g, 0.125)), g * np.float32(0.125))
    with pytest.raises(BackendError):
        cuda.add(g, u[0, :7])


def test_argmax(cuda, rng):
    x = rng.standard_normal((4, 151936)).astype(np.float32)
    x[2, 10] = x[2, 20] = 50.0                       # tie -> first index
    x[3, 0] = np.nan
    got = cuda.argmax(x)
    want = np.nanargmax(x, axis=1)
    np.testing.assert_array_equal(got, want)


# -- KV writes and attention ---------------------------------------------------------------------
@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_set_rows(cuda, rng, dtype):
    cache = cuda.alloc_kv(64, 96, dtype)
    cells = np.array([5, 63, 0, 17], dtype=np.int32)
    rows = rng.standard_normal((4, 96)).astype(np.float32) * 100
    rows[0, 0] = 1e6                                 # f16 overflow -> inf, as ggml
    cuda.set_rows(cache, cells, rows)
    want = np.zeros((64, 96), cache.dtype)
    with np.errstate(over="ignore"):
        want[cells] = rows.astype(cache.dtype)
    np.testing.assert_array_equal(np.asarray(cache), want)


def test_set_rows_q8_0_kernel(cuda, rng):
    """The q8_0 KV write kernel (not yet wired to alloc_kv) == pyllama.quant's ggml quantizer."""
    rows = rng.standard_normal((3, 128)).astype(np.float32)
    rows[1] = 0.0
    cache = DevArray.empty(cuda.dev, (8, 4 * 34), np.uint8)
    cache[...] = 0
    cells = cuda._in(np.array([6, 1, 3], np.int32), np.int32)
    x = cuda._in(rows)
    cuda._launch("set_rows_q8_0", (1, 1), (256, 1, 1), cache.ptr, 128, cells.ptr, x.ptr, 12)
    got = np.asarray(cache)
    want = np.asarray(quantize(rows, GGMLType.Q8_0)).view(np.uint8).reshape(3, -1)
    np.testing.assert_array_equal(got[[6, 1, 3]], want)


def attention_f64(q, k, v, cells, qs, qe, scale, softcap):
    """Dense float64 softmax attention over each query's listed cells (independent oracle)."""
    n_q, n_head, d = q.shape
    n_kv = k.shape[1] // d
    out = np.zeros((n_q, n_head, d))
    for i in range(n_q):
        c = cells[qs[i]:qe[i]]
        for h in range(n_head):
            kh = h // (n_head // n_kv)
            kk = k[c, kh * d:(kh + 1) * d].astype(np.float64)
            vv = v[c, kh * d:(kh + 1) * d].astype(np.float64)
            s = scale * (kk @ q[i, h].astype(np.float64))
            if softcap > 0:
                s = softcap * np.tanh(s / softcap)
            if len(c):
                p = np.exp(s - s.max())
                out[i, h] = p @ vv / p.sum()
    return out.astype(np.float32)


SHAPES = {"gemma270m": (4, 1, 256), "qwen05b": (14, 2, 64), "mha128": (4, 4, 128),
          "tiny": (4, 2, 16), "odd": (6, 3, 40)}


def _attn_inputs(rng, n_head, n_kv, d, dtype, n_q=6, n_cells=300):
    k = rng.standard_normal((n_cells, n_kv * d)).astype(dtype)
    v = rng.standard_normal((n_cells, n_kv * d)).astype(dtype)
    k[250:] = np.nan                                  # never listed: must never be read
    v[250:] = np.nan
    cells = rng.permutation(250)[:200].astype(np.int32)
    q_start = np.array([0, 0, 10, 5, 199, 0], dtype=np.int64)[:n_q]
    q_end = np.array([1, 200, 150, 5, 200, 37], dtype=np.int64)[:n_q]   # query 3: empty list
    q = rng.standard_normal((n_q, n_head, d)).astype(np.float32)
    return q, k, v, cells, q_start, q_end


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float16, np.float32], ids=["f16", "f32"])
@pytest.mark.parametrize("softcap", [0.0, 20.0])
def test_attention_vs_ref(cuda, ref, rng, shape, dtype, softcap):
    n_head, n_kv, d = SHAPES[shape]
    q, k, v, cells, qs, qe = _attn_inputs(rng, n_head, n_kv, d, dtype)
    kd = cuda.alloc_kv(*k.shape, "f16" if dtype == np.float16 else "f32")
    vd = cuda.alloc_kv(*v.shape, "f16" if dtype == np.float16 else "f32")
    kd[...], vd[...] = k, v
    scale = 1.0 / np.sqrt(d)
    want = attention_f64(q, k, v, cells, qs, qe, scale, softcap)
    # RefBackend mirrors llama.cpp's CPU attention (q and p rounded to f16): close, not equal
    near = ref.attention(q, k, v, cells, qs, qe, scale, softcap)
    saved = cuda.attn_tiled_min_queries
    try:
        for threshold in (1, 1 << 30):                # the tiled kernel, then the decode kernel
            cuda.attn_tiled_min_queries = threshold
            got = np.asarray(cuda.attention(q, kd, vd, cells, qs, qe, scale, softcap))
            np.testing.assert_allclose(got, want, atol=2e-5, rtol=2e-5)
            np.testing.assert_allclose(got, near, atol=5e-3)
            assert np.all(got[3] == 0)
    finally:
        cuda.attn_tiled_min_queries = saved


def test_attention_batch_invariant(cuda, rng):
    q, k, v, cells, qs, qe = _attn_inputs(rng, 14, 2, 64, np.float16)
    kd, vd = cuda.alloc_kv(*k.shape, "f16"), cuda.alloc_kv(*v.shape, "f16")
    kd[...], vd[...] = k, v
    full = np.asarray(cuda.attention(q, kd, vd, cells, qs, qe, 0.125))
    for i in range(len(q)):
        one = np.asarray(cuda.attention(q[i:i + 1], kd, vd, cells, qs[i:i + 1], qe[i:i + 1],
                                        0.125))
        np.testing.assert_array_equal(one[0], full[i])


# -- device arrays -------------------------------------------------------------------------------
def test_devarray_views_and_assignment(cuda, rng):
    a = rng.standard_normal((10, 6)).astype(np.float32)
    d = DevArray.upload(cuda.dev, a)
    np.testing.assert_array_equal(np.asarray(d[2:5]), a[2:5])
    np.testing.assert_array_equal(np.asarray(d.reshape(5, -1)), a.reshape(5, 12))
    np.testing.assert_array_equal(d[[1, 7]], a[[1, 7]])
    d[0:3] = d[5:8]
    a[0:3] = a[5:8]
    d[[9]] = np.ones((1, 6), np.float32)
    a[[9]] = 1
    np.testing.assert_array_equal(np.asarray(d), a)
    d[...] = 0
    assert not np.asarray(d).any()


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("softcap", [0.0, 20.0])
def test_tiled_attention_equals_decode_kernel(cuda, rng, shape, softcap):
    """The prefill (tiled, shared-memory) kernel and the decode kernel give identical bits."""
    n_head, n_kv, d = SHAPES[shape]
    q, k, v, cells, qs, qe = _attn_inputs(rng, n_head, n_kv, d, np.float16)
    kd, vd = cuda.alloc_kv(*k.shape, "f16"), cuda.alloc_kv(*v.shape, "f16")
    kd[...], vd[...] = k, v
    saved = cuda.attn_tiled_min_queries
    try:
        cuda.attn_tiled_min_queries = 1
        tiled = np.asarray(cuda.attention(q, kd, vd, cells, qs, qe, 0.1, softcap))
        cuda.attn_tiled_min_queries = 1 << 30
        decode = np.asarray(cuda.attention(q, kd, vd, cells, qs, qe, 0.1, softcap))
    finally:
        cuda.attn_tiled_min_queries = saved
    np.testing.assert_array_equal(tiled, decode)


def test_worker_thread_and_exit_do_not_abort(cuda):
    """A model loaded on one thread and used on another (the server's engine thread): results
    are right, and neither the worker's end nor the interpreter's exit aborts (PyCUDA aborts a
    process when a thread ends with a context pushed)."""
    import subprocess
    import sys
    code = (
        "import threading, numpy as np\n"
        "from pyllama.backend.cuda import CudaBackend\n"
        "be = CudaBackend()\n"
        "out = {}\n"
        "def work():\n"
        "    x = np.arange(12, dtype=np.float32)\n"
        "    out['y'] = np.asarray(be.scale(x, 2.0))\n"
        "t = threading.Thread(target=work); t.start(); t.join()\n"
        "assert (out['y'] == np.arange(12) * 2).all()\n"
        "print(np.asarray(be.add(out['y'], out['y']))[-1])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "44.0"
