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
