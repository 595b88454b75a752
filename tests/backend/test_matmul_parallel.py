"""The serial/parallel threshold of the CPU matmul changes only the work split, never a bit."""
import numpy as np
import pytest
from gguf import GGMLQuantizationType as GQ
from gguf import quants

from pyllama.backend.base import Weight
from pyllama.backend.cpu import matmul as mm
from pyllama.gguf import GGMLType as T


@pytest.mark.parametrize("t", [T.Q8_0, T.Q5_0, T.Q4_0])
@pytest.mark.parametrize("n", [1, 2, 9])
def test_parallel_threshold_bit_exact(t, n):
    rng = np.random.default_rng(3)
    raw = quants.quantize(rng.standard_normal((203, 256)).astype(np.float32), GQ(int(t)))
    w = Weight(f"w.{t.name}", t, (203, 256), raw)
    x = rng.standard_normal((n, 256)).astype(np.float32)
    old = mm.get_num_threads()
    try:
        mm.set_num_threads(2)
        ys = []
        for pmb in (0, 1 << 40, 131072):
            mm.set_parallel_min_bytes(pmb)
            ys.append(mm.matmul(w, x))
    finally:
        mm.set_num_threads(old)
    np.testing.assert_array_equal(ys[0], ys[1])
    np.testing.assert_array_equal(ys[0], ys[2])


def _w(rng, t, rows, k):
    from pyllama.quant import quantize
    raw = quantize(rng.standard_normal((rows, k)).astype(np.float32), t)
    return Weight(f"w.{t.name}.{rows}", t, (rows, k), raw)


@pytest.mark.parametrize("types", [(T.Q5_0, T.Q5_0, T.Q8_0), (T.Q5_0, T.Q5_0), (T.Q4_K, T.Q4_K),
                                   (T.Q6_K,), (T.Q5_0, T.Q6_K), (T.Q4_0, T.Q8_0, T.Q4_1)])
@pytest.mark.parametrize("n", [1, 3, 9, 40])
@pytest.mark.parametrize("nth", [1, 2])
def test_matmul_many_same_bits_as_separate(types, n, nth):
    """matmul_many (one activation quantization, all weights' tiles in one parallel region;
    weights of different activation kinds fall back to separate calls) gives every output
    bit for bit as its own matmul, whatever the thread count and the parallel threshold."""
    rng = np.random.default_rng(5)
    ws = [_w(rng, t, rows, 512) for t, rows in zip(types, (203, 64, 96, 130))]
    x = rng.standard_normal((n, 512)).astype(np.float32)
    old = mm.get_num_threads()
    try:
        mm.set_num_threads(nth)
        want = [mm.matmul(w, x) for w in ws]
        for pmb in (0, 131072, 1 << 40):
            mm.set_parallel_min_bytes(pmb)
            got = mm.matmul_many(ws, x)
            for g, e in zip(got, want):
                np.testing.assert_array_equal(g, e)
    finally:
        mm.set_num_threads(old)
        mm.set_parallel_min_bytes(131072)


def test_graph_matmuls_uses_backend_fusion():
    """Graph.matmuls adds biases after the fused call and equals separate Graph.matmul calls."""
    from pyllama.backend import get_backend
    from pyllama.graph import Graph
    rng = np.random.default_rng(7)
    be = get_backend("cpu", 2)
    ws = [_w(rng, T.Q5_0, 96, 256), _w(rng, T.Q8_0, 32, 256)]
    b = Weight("b", T.F32, (32,), rng.standard_normal(32).astype(np.float32))
    g = Graph.__new__(Graph)
    g.be, g.llama_cpp, g.loras = be, False, ()
    x = rng.standard_normal((2, 256)).astype(np.float32)
    got = g.matmuls(ws, x, (None, b))
    want = [g.matmul(ws[0], x), g.matmul(ws[1], x, b)]
    for a, e in zip(got, want):
        np.testing.assert_array_equal(a, e)
