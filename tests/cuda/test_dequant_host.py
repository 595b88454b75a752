"""cuda/common.cuh's dequantizers built for the host (nvcc, no GPU): bit-exact with the gguf
package's dequantize on random blocks of every type the kernels read, and with pyllama.quant on
rows of the bundled models' tensors. This is the weight decoding every CUDA matmul and get_rows
uses, checked where no GPU is available."""
import ctypes
import os
import shutil
import subprocess

import gguf
import numpy as np
import pytest

from pyllama.gguf import GGML_BLOCK, GGMLType
from pyllama.quant import quantize

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TYPES = [GGMLType.F32, GGMLType.F16, GGMLType.Q8_0, GGMLType.Q5_0, GGMLType.Q4_K, GGMLType.Q6_K]

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    so = str(tmp_path_factory.mktemp("dq") / "libdq.so")
    subprocess.run(["nvcc", "-shared", "-std=c++17", "-Xcompiler", "-fPIC,-ffp-contract=off",
                    "-Werror", "all-warnings", "-I", os.path.join(ROOT, "cuda"), "-o", so,
                    os.path.join(HERE, "dequant_host.cu")], check=True, timeout=300)
    lib = ctypes.CDLL(so)
    lib.pyl_dequant_rows.restype = ctypes.c_int
    return lib


def dequant(lib, qtype, raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(rows, -1)
    out = np.full((rows, cols), np.nan, dtype=np.float32)
    rc = lib.pyl_dequant_rows(int(qtype), raw.ctypes.data_as(ctypes.c_void_p),
                              ctypes.c_longlong(raw.shape[1]), rows, cols,
                              out.ctypes.data_as(ctypes.c_void_p))
    assert rc == 0
    return out


@pytest.mark.parametrize("qtype", TYPES, ids=lambda t: t.name)
def test_random_blocks_bit_exact(lib, qtype):
    rng = np.random.default_rng(int(qtype))
    rows, cols = 6, 1024
    x = (rng.standard_normal((rows, cols)) * rng.uniform(0.01, 10, (rows, 1))).astype(np.float32)
    x[1, :300] = 0.0                                  # zero blocks / scales
    if qtype == GGMLType.F32:
        raw = x
    elif qtype == GGMLType.F16:
        raw = x.astype(np.float16)
    else:
        raw = quantize(x, qtype)                      # gguf cannot quantize K-quants
    want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(int(qtype))).reshape(rows, cols)
    np.testing.assert_array_equal(dequant(lib, qtype, raw, rows, cols), want)


def test_random_bytes_bit_exact(lib):
    """Arbitrary bit patterns (all scale/min/high-bit combinations), not just quantizer output."""
    rng = np.random.default_rng(7)
    for qtype in TYPES[2:]:
        blck, bsize = GGML_BLOCK[qtype]
        raw = rng.integers(0, 256, (4, 4 * bsize), dtype=np.uint8)
        blocks = raw.reshape(4, 4, bsize)
        for off in {GGMLType.Q8_0: (0,), GGMLType.Q5_0: (0,), GGMLType.Q4_K: (0, 2),
                    GGMLType.Q6_K: (208,)}[qtype]:   # finite f16 scales
            scales = rng.uniform(-1, 1, (4, 4)).astype(np.float16)
            blocks[:, :, off:off + 2] = scales.view(np.uint8).reshape(4, 4, 2)
        want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType(int(qtype)))
        np.testing.assert_array_equal(dequant(lib, qtype, raw, 4, 4 * blck), want.reshape(4, -1))


def test_f16_f32_row_tail(lib):
    x = np.random.default_rng(3).standard_normal((3, 70)).astype(np.float32)
    np.testing.assert_array_equal(dequant(lib, GGMLType.F32, x, 3, 70), x)
    np.testing.assert_array_equal(dequant(lib, GGMLType.F16, x.astype(np.float16), 3, 70),
                                  x.astype(np.float16).astype(np.float32))


@pytest.mark.realmodel
@pytest.mark.parametrize("alias", ["gemma-3-270m", "qwen2.5-coder-0.5b"])
def test_bundled_model_rows(lib, request, alias):
    from pyllama.gguf import GGUFReader
    from pyllama.quant import dequantize
    r = GGUFReader(request.getfixturevalue({"gemma-3-270m": "gemma_path",
                                            "qwen2.5-coder-0.5b": "qwen_path"}[alias]))
    seen = set()
    for t in r.tensors.values():
        if t.type in seen or t.type not in TYPES or len(t.shape) != 2:
            continue
        seen.add(t.type)
        raw = t.data[:4]
        want = dequantize(np.asarray(raw), t.type, (4, t.shape[1]))
        np.testing.assert_array_equal(dequant(lib, t.type, raw, 4, t.shape[1]), want)
    assert len(seen) >= 4
