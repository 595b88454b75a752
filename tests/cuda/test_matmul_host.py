"""cuda/matmul.cu's arithmetic run on the host (nvcc, no GPU): the kernel's own per-lane loop
(pyl_mm_lane) plus a lane-by-lane replay of the warp butterfly. Checks the chunk/tile indexing
and the reduction against a float64 product of the gguf-dequantized weights (within 1e-5 of
sum |w x|), RefBackend (q8 activations, within 2e-2 of sum |w x|), and batch invariance (a
token's row is bit-identical alone, at any tile position, in any batch size)."""
import ctypes
import os
import shutil
import subprocess

import gguf
import numpy as np
import pytest

from pyllama.backend import get_backend
from pyllama.backend.base import Weight
from pyllama.gguf import GGMLType
from pyllama.quant import quantize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q5_0, GGMLType.Q4_K, GGMLType.Q6_K]
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
P = ctypes.c_void_p


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = str(tmp_path_factory.mktemp("mm") / "libmm.so")
    subprocess.run(["nvcc", "-shared", "-std=c++17", "-Xcompiler", "-fPIC,-ffp-contract=off",
                    "-Werror", "all-warnings", "-I", os.path.join(ROOT, "cuda"), "-o", so,
                    os.path.join(HERE, "matmul_host.cu")], check=True, timeout=600)
    return ctypes.CDLL(so)


def host_mm(lib, qtype, raw, rows, cols, x):
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(rows, -1)
    x = np.ascontiguousarray(x, dtype=np.float32)
    y = np.full((x.shape[0], rows), np.nan, np.float32)
    assert lib.pyl_host_mm(int(qtype), raw.ctypes.data_as(P), ctypes.c_longlong(raw.shape[1]),
                           rows, cols, x.ctypes.data_as(P), x.shape[0], y.ctypes.data_as(P)) == 0
    return y


def make(qtype, rows, cols, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)
    raw = w if qtype == GGMLType.F32 else (w.astype(np.float16) if qtype == GGMLType.F16
                                           else quantize(w, qtype))
    deq = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(int(qtype)))
    return raw, deq.reshape(rows, cols).astype(np.float64)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_vs_float64_and_ref(lib, qtype):
    rows, cols = 24, 1536                      # 48 chunks: lanes take 1 or 2 chunks
    raw, deq = make(qtype, rows, cols, int(qtype))
    x = np.random.default_rng(1).standard_normal((11, cols)).astype(np.float32)
    y = host_mm(lib, qtype, raw, rows, cols, x)
    exact = x.astype(np.float64) @ deq.T
    bound = np.abs(x).astype(np.float64) @ np.abs(deq).T
    assert np.all(np.abs(y - exact) <= 1e-5 * bound)
    yr = get_backend("ref").matmul(Weight("w", qtype, (rows, cols), raw), x)
    assert np.all(np.abs(y - yr) <= 2e-2 * bound + 1e-6)


@pytest.mark.parametrize("qtype", [GGMLType.Q4_K, GGMLType.F32], ids=lambda t: t.name)
def test_batch_invariant(lib, qtype):
    cols = 512 if qtype == GGMLType.Q4_K else 70     # F32 70: the row-tail path
    raw, _ = make(qtype, 9, cols, 3)
    x = np.random.default_rng(2).standard_normal((19, cols)).astype(np.float32)
    full = host_mm(lib, qtype, raw, 9, cols, x)
    for i in (0, 7, 8, 18):
        np.testing.assert_array_equal(host_mm(lib, qtype, raw, 9, cols, x[i:i + 1])[0], full[i])
    np.testing.assert_array_equal(host_mm(lib, qtype, raw, 9, cols, x[3:14]), full[3:14])
