"""cuda/ops.cu's per-item formulas built for the host (nvcc, no GPU) vs RefBackend and
pyllama.quant: RoPE (norm/neox, partial rotation, negative positions, per-layer bases) and
GELU/SiLU/softcap/gates within 1 ulp (the host's libm exp/tanh/cos/sin stand in for CUDA's, both
within an ulp of the double result), the q8_0 KV block quantizer bit-exact."""
import ctypes
import os
import shutil
import subprocess

import numpy as np
import pytest

from pyllama.backend import ROPE_NEOX, ROPE_NORM, get_backend
from pyllama.backend.ref import rope_theta_scale
from pyllama.gguf import GGMLType
from pyllama.quant import quantize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
P = ctypes.c_void_p


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = str(tmp_path_factory.mktemp("ops") / "libops.so")
    subprocess.run(["nvcc", "-shared", "-std=c++17", "-Xcompiler", "-fPIC,-ffp-contract=off",
                    "-Werror", "all-warnings", "-I", os.path.join(ROOT, "cuda"), "-o", so,
                    os.path.join(HERE, "ops_host.cu")], check=True, timeout=600)
    return ctypes.CDLL(so)


@pytest.fixture(scope="module")
def ref():
    return get_backend("ref")


def ptr(a):
    return a.ctypes.data_as(P)


@pytest.mark.parametrize("mode", [ROPE_NORM, ROPE_NEOX])
@pytest.mark.parametrize("hd,n_rot", [(64, 64), (256, 256), (128, 64), (16, 16)])
@pytest.mark.parametrize("base", [10000.0, 1e6])
def test_rope(lib, ref, mode, hd, n_rot, base):
    rng = np.random.default_rng(hd + n_rot)
    x = rng.standard_normal((7, 3, hd)).astype(np.float32)
    pos = np.array([0, 1, 5, 4095, 32768, -3, 100000], dtype=np.int32)
    y = np.full_like(x, np.nan)
    lib.pyl_host_rope(ptr(x), ptr(pos), 7, 3, hd, n_rot,
                      ctypes.c_float(rope_theta_scale(base, n_rot)), ctypes.c_float(1.0),
                      int(mode == ROPE_NEOX), ptr(y))
    np.testing.assert_array_max_ulp(y, ref.rope(x, pos, n_rot, base, 1.0, mode), maxulp=1)


def unary(lib, kind, x, g=None, a=0.0, b=0.0):
    y = np.empty_like(x)
    lib.pyl_host_unary(kind, ptr(x), ptr(g if g is not None else x), ctypes.c_longlong(x.size),
                       ctypes.c_float(a), ctypes.c_float(b), ptr(y))
    return y


def test_activations_and_gates(lib, ref):
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(20000).astype(np.float32) * 5,
                        np.array([0, -0.0, 90, -90, 1e-30, 1e30, -1e30], np.float32)])
    g = rng.standard_normal(x.size).astype(np.float32)
    np.testing.assert_array_max_ulp(unary(lib, 0, x), ref.gelu(x), maxulp=1)
    np.testing.assert_array_max_ulp(unary(lib, 1, x), ref.silu(x), maxulp=1)
    np.testing.assert_array_max_ulp(unary(lib, 3, x, g), ref.mul(ref.gelu(x), g), maxulp=1)
    np.testing.assert_array_max_ulp(unary(lib, 4, x, g), ref.mul(ref.silu(x), g), maxulp=1)
    cap = 30.0
    inv = float(np.float32(1.0) / np.float32(cap))
    np.testing.assert_array_max_ulp(unary(lib, 2, x * 20, None, inv, cap),
                                    ref.softcap(x * 20, cap), maxulp=1)


def test_q8_0_kv_block(lib):
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 256)).astype(np.float32) * rng.uniform(0.1, 100, (4, 1))
    x = x.astype(np.float32)
    x[1, :64] = 0.0
    x[2, 5] = 1e5
    out = np.zeros((4, 8 * 34), np.uint8)
    lib.pyl_host_q8_0(ptr(x), ctypes.c_longlong(32), ptr(out))
    want = np.asarray(quantize(x, GGMLType.Q8_0)).view(np.uint8).reshape(4, -1)
    np.testing.assert_array_equal(out, want)
