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


def test_f32_rest_equals_llamacpp():
    """ggml_vec_dot_f32's k % 32 rest as llama.cpp's build computes it (unrolled by 4, unfused,
    the last k % 4 fused), every k in 1..72: tests/data/vec-dot-f32-llamacpp.npz, recorded by
    tests/make_vec_dot_f32_fixture.py from llama.cpp's libggml-cpu."""
    import os
    d = np.load(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                             "vec-dot-f32-llamacpp.npz"))
    for k in range(1, d["x"].shape[0] + 1):
        xs, ys = d["x"][k - 1, :, :k], d["y"][k - 1, :, :k]
        w = Weight("w", T.F32, (xs.shape[0], k), np.ascontiguousarray(ys))
        ref = Backend.matvec_float(CpuBackend(n_threads=1), w, np.ascontiguousarray(xs))
        nat = CpuBackend(n_threads=1).matvec_float(w, np.ascontiguousarray(xs))
        want = d["out"][k - 1]
        np.testing.assert_array_equal(np.diagonal(ref), want, err_msg=f"oracle k={k}")
        np.testing.assert_array_equal(np.diagonal(nat), want, err_msg=f"native k={k}")
