"""F32/F16/BF16 weights in the llama.cpp numerics: one activation row, and weights llamafile's
tinyBLAS refuses (rows % 4 != 0 or k % 8 != 0, e.g. a tied output of 279 rows), are computed by
ggml_vec_dot_<type> per element. The native kernel (_compat.matvec_float) must give the bits of the
numpy oracle (ref_compat.matvec_float), and compat.matmul must pick it exactly where llama.cpp
leaves tinyBLAS."""
import numpy as np
import pytest

from pyllama.backend import compat
from pyllama.backend.base import Backend, Weight
from pyllama.backend.cpu import CpuBackend
from pyllama.gguf import GGMLType as T


def weight(t, rows, k, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, k)) / np.sqrt(k)).astype(np.float32)
    if t == T.F16:
        raw = w.astype(np.float16)                 # as the loader maps F16 tensors
    elif t == T.BF16:
        raw = (w.view(np.uint32) >> 16).astype(np.uint16)
    else:
        raw = w
    return Weight(f"w.{t.name}", t, (rows, k), raw)


@pytest.mark.parametrize("t", [T.F32, T.F16, T.BF16])
@pytest.mark.parametrize("rows,k,n", [(279, 256, 24), (64, 100, 3), (7, 45, 1), (128, 768, 1)])
def test_native_matches_oracle(t, rows, k, n):
    w = weight(t, rows, k, seed=rows + k)
    x = np.random.default_rng(n).standard_normal((n, k)).astype(np.float32) * 3
    for nth in (1, 2):
        y = CpuBackend(n_threads=nth).matvec_float(w, x)
        ref = Backend.matvec_float(CpuBackend(n_threads=1), w, x)
        assert y.shape == (n, rows)
        np.testing.assert_array_equal(y.view(np.int32), ref.view(np.int32))


@pytest.mark.parametrize("rows,k,vec", [(279, 256, True), (256, 100, True), (276, 256, False)])
def test_kernel_choice(rows, k, vec):
    w = weight(T.F16, rows, k, seed=1)
    assert compat.tinyblas_float(w) is not vec
    x = np.random.default_rng(2).standard_normal((5, k)).astype(np.float32)
    be = CpuBackend(n_threads=1)
    y = compat.matmul(be, w, x)
    ref = be.matvec_float(w, x) if vec else be.matmul(w, x)
    np.testing.assert_array_equal(y.view(np.int32), ref.view(np.int32))
