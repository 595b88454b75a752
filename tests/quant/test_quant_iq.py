"""Every weight type's numpy dequantization against ggml's own dequantize_row_* (bit for bit),
and the generated IQ grid tables against llama.cpp's ggml-common.h.

Fixture: tests/data/quant/ggml_iq_ref.npz, recorded by make_ggml_iq_ref.py from llama.cpp's
libggml (llama-cpp-python 0.3.36)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from pyllama.gguf import GGMLType
from pyllama.quant import DEQUANTIZE_TYPES, dequantize
from matmul_checks import assert_token_slices_exact  # tests/ is on sys.path

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
REF = os.path.join(ROOT, "tests", "data", "quant", "ggml_iq_ref.npz")
TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
         "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_NL",
         "IQ4_XS", "TQ1_0", "TQ2_0", "MXFP4"]


@pytest.fixture(scope="module")
def ref():
    with np.load(REF) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("name", TYPES)
def test_dequantize_bitexact_vs_ggml(ref, name):
    t = GGMLType[name]
    want = ref["deq_" + name]
    raw = ref["raw_" + name][:len(want)]
    if name == "F16":
        raw = raw.view(np.float16)
    elif name == "BF16":
        raw = raw.view("<u2")
    got = dequantize(raw, t)
    assert got.shape == want.shape
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_every_published_type_dequantizes():
    assert {GGMLType[n] for n in TYPES} | {GGMLType.F32} <= DEQUANTIZE_TYPES


def _ggml_common():
    src = os.path.expanduser("~/.cache/pyllama-oracle/llama_cpp_python-0.3.36")
    path = os.path.join(src, "vendor", "llama.cpp", "ggml", "src", "ggml-common.h")
    return path if os.path.exists(path) else None


@pytest.mark.skipif(_ggml_common() is None, reason="llama.cpp source tree not unpacked "
                    "(bash scripts/build_llamacpp.sh src)")
def test_iq_grids_match_source(tmp_path):
    """scripts/gen_iq_grids.py regenerates grids.py and pyl_iq_grids.h byte for byte."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import gen_iq_grids as gen
    with open(_ggml_common()) as f:
        tables, defines = gen.parse(f.read())
    src = "llama.cpp ggml/src/ggml-common.h"
    with open(gen.PY_OUT) as f:
        assert f.read() == gen.write_py(tables, defines, src)
    with open(gen.H_OUT) as f:
        assert f.read() == gen.write_h(tables, defines, src)


# ------------------------------------------------------------------------- matmul ---------
IQ_TILED = ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "IQ4_XS"]


def _weight(ref, name):
    from pyllama.backend.base import Weight
    raw = ref["raw_" + name]
    return Weight("w." + name, GGMLType[name], (raw.shape[0], 512), raw)


@pytest.mark.parametrize("name", IQ_TILED)
def test_iq_matmul_equals_llama_cpp_tiled_kernel(ref, name):
    """From 8 rows llama.cpp multiplies i-quants with its tiled kernel (ggml-cpu/tiled): the CPU
    kernels and the numpy oracle give its bits; every row count uses that arithmetic."""
    from pyllama.backend.cpu import matmul as mm
    from pyllama.backend.ref_matmul import matmul_ref
    w, x = _weight(ref, name), ref["x"]
    for n in (8, 9):
        want = ref[f"mm{n}_{name}"]
        assert np.array_equal(mm.matmul(w, x[:n]), want)
        assert np.array_equal(matmul_ref(w.type, w.raw, x[:n]), want)
    full = mm.matmul(w, x)
    for n in (1, 2, 3, 5):     # the direct mat-vec path and partial tiles: the same bits
        assert np.array_equal(mm.matmul(w, x[:n]), full[:n])


@pytest.mark.parametrize("name", IQ_TILED)
def test_iq_get_rows_is_ggml_dequantize(ref, name):
    from pyllama.backend.cpu import matmul as mm
    want = ref["deq_" + name]
    got = mm.get_rows(_weight(ref, name), np.arange(len(want)))
    assert np.array_equal(got, want)


@pytest.mark.parametrize("name", ["Q2_K", "Q3_K", "Q5_K", "Q6_K"])
def test_kquant_prefill_equals_llama_cpp_tiled_kernel(ref, name):
    """K-quants llama.cpp does not repack on AVX2 (all but Q4_K) go through its tiled kernel
    from 8 rows; Q2_K / Q5_K with their mins: res = fma(-dmin, S2, d*S1) per super-block."""
    from pyllama.backend.cpu import matmul as mm
    from pyllama.backend.ref_matmul import matmul_ref
    w, x = _weight(ref, name), ref["x"]
    for n in (8, 9):
        assert np.array_equal(mm.matmul(w, x[:n]), ref[f"mm{n}_{name}"])
        assert np.array_equal(matmul_ref(w.type, w.raw, x[:n]), ref[f"mm{n}_{name}"])


@pytest.mark.parametrize("name", ["IQ4_NL", "Q4_0"])
def test_unrepacked_32_blocks_equal_llama_cpp(ref, name):
    """rows % 8 != 0 (not repacked): tinyBLAS from 2 rows (and for Q4_0 vec_dot, the same)."""
    from pyllama.backend.base import Weight
    from pyllama.backend.cpu import matmul as mm
    raw, x = ref["raw_" + name][:15], ref["x"]
    w = Weight("w", GGMLType[name], (15, 512), raw)
    for n in (3, 8, 9):
        assert np.array_equal(mm.matmul(w, x[:n]), ref[f"mm{n}_{name}"][:, :15])


@pytest.mark.parametrize("name", ["Q4_0", "IQ4_NL", "MXFP4"])
def test_repacked_8x8_kernel_equals_oracle(ref, name):
    """rows % 8 == 0: llama.cpp's ggml_gemm/gemv_*_8x8_q8_0 arithmetic (one exact integer per
    32-block, one fma chain); kernels == numpy oracle for every row count, and the 1-row result
    differs from the vec_dot / tinyBLAS lanes (so the path is really taken)."""
    from pyllama.backend.cpu import matmul as mm
    from pyllama.backend.ref_matmul import matmul_ref
    w, x = _weight(ref, name), ref["x"]
    full = mm.matmul(w, x)
    assert np.array_equal(full, matmul_ref(w.type, w.raw, x))
    for n in (1, 2, 3, 5):
        assert np.array_equal(mm.matmul(w, x[:n]), full[:n])
    assert not np.array_equal(full, ref["vd_" + name])
    np.testing.assert_allclose(full, ref["vd_" + name], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["Q4_0", "IQ4_NL", "MXFP4"])
def test_repacked_8x8_simd_bodies_and_tails_equal_oracle(ref, name):
    """The SIMD paths of the 8x8 arithmetic (under 8 tokens: 4 rows per block reduced together;
    from 8: groups of 8 tokens with the block scales laid out per chunk of 64 blocks, the rest
    token by token) on 80 blocks per row (a full chunk and a partial one) and 24 rows (6 row
    tiles), every token count up to 8 and a few past it: the numpy oracle's bits."""
    from pyllama.backend.base import Weight
    from pyllama.backend.ref_matmul import matmul_ref
    raw = np.ascontiguousarray(np.tile(ref["raw_" + name], (2, 5))[:24])
    w = Weight("w." + name, GGMLType[name], (24, 2560), raw)
    x = np.random.default_rng(7).standard_normal((25, 2560)).astype(np.float32)
    x[3, 64:96] = 0.0                      # an all-zero activation block (d = 0)
    x[10] *= 1e-3
    want = matmul_ref(w.type, w.raw, x)
    assert_token_slices_exact(w, x, want)


@pytest.mark.parametrize("name", ["TQ1_0", "TQ2_0"])
def test_ternary_matmul_equals_llama_cpp(ref, name):
    """TQ1_0 / TQ2_0: llama.cpp's ggml_vec_dot_tq*_q8_K at every row count (lanes minus bsums,
    fma chain); kernels and oracle give its bits."""
    from pyllama.backend.cpu import matmul as mm
    from pyllama.backend.ref_matmul import matmul_ref
    w, x = _weight(ref, name), ref["x"]
    assert np.array_equal(mm.matmul(w, x), ref["vd_" + name])
    assert np.array_equal(matmul_ref(w.type, w.raw, x), ref["vd_" + name])
    for n in (1, 3, 8, 9):
        assert np.array_equal(mm.matmul(w, x[:n]), ref[f"mm{n}_{name}"])
    assert np.array_equal(mm.get_rows(w, np.arange(4)), ref["deq_" + name])


def _patch_type(path, tensor, type_id):
    """Rewrite the ggml type id of one tensor in a GGUF file's tensor info."""
    import struct
    data = bytearray(open(path, "rb").read())
    key = struct.pack("<Q", len(tensor)) + tensor.encode()
    i = data.index(key) + len(key)
    n_dims = struct.unpack_from("<I", data, i)[0]
    struct.pack_into("<I", data, i + 4 + 8 * n_dims, type_id)
    open(path, "wb").write(bytes(data))


def test_unsupported_type_is_one_error_naming_it(tmp_path):
    """A tensor type the CPU backend cannot compute with: ModelError naming tensor and type; a
    ggml type the reader does not know (NVFP4): GgufError naming it."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from tiny import write_tiny_gguf

    import pyllama
    from pyllama.errors import GgufError, ModelError
    path = str(tmp_path / "m.gguf")
    write_tiny_gguf(path, "llama")
    _patch_type(path, "output_norm.weight", int(GGMLType.I8))
    with pytest.raises(ModelError, match=r"tensor 'output_norm.weight' has type I8, which the cpu "
                                         r"backend does not support"):
        pyllama.load_model(path)
    _patch_type(path, "output_norm.weight", 40)
    with pytest.raises(GgufError, match=r"unknown tensor type 40 \(NVFP4\), which pyllama does "
                                        r"not support .*tensor 'output_norm.weight'"):
        pyllama.load_model(path)


def test_iq4_xs_one_token_kernel_equals_llama_cpp(ref):
    """numerics="llama.cpp": under 8 rows llama.cpp runs ggml_vec_dot_iq4_xs_q8_K (8 float lanes);
    the CPU kernel and the numpy oracle give its bits (the vec_dot fixture and mul_mat at 1, 3
    rows)."""
    from pyllama.backend import ref_compat
    from pyllama.backend.compat import vec_row_start
    from pyllama.backend.cpu import compat
    w, x = _weight(ref, "IQ4_XS"), ref["x"]
    assert np.array_equal(compat.matvec_k(w, x, 2), ref["vd_IQ4_XS"])
    assert np.array_equal(ref_compat.matvec_k(w.type, w.raw, x), ref["vd_IQ4_XS"])
    for n in (1, 3):
        assert np.array_equal(compat.matvec_k(w, x[:n], 1), ref[f"mm{n}_IQ4_XS"])
    assert vec_row_start(w.type, 16, 7) == 0 and vec_row_start(w.type, 16, 8) == 8


@pytest.mark.parametrize("name", ["IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S",
                                  "IQ1_M"])
def test_iq_one_token_kernels_equal_llama_cpp(ref, name):
    """numerics="llama.cpp" under 8 rows: llama.cpp's AVX2 vec_dot of each grid i-quant (lanes,
    fma chain, its final scale); CPU kernel and numpy oracle give the vec_dot fixture's bits."""
    from pyllama.backend import ref_compat
    from pyllama.backend.compat import vec_row_start
    from pyllama.backend.cpu import compat
    w, x = _weight(ref, name), ref["x"]
    assert np.array_equal(compat.matvec_k(w, x, 2), ref["vd_" + name])
    assert np.array_equal(ref_compat.matvec_k(w.type, w.raw, x), ref["vd_" + name])
    for n in (1, 3):
        assert np.array_equal(compat.matvec_k(w, x[:n], 1), ref[f"mm{n}_{name}"])
    assert vec_row_start(w.type, 16, 7) == 0 and vec_row_start(w.type, 16, 8) == 8


@pytest.mark.parametrize("name", ["IQ4_NL", "MXFP4"])
def test_unrepacked_iq4_nl_mxfp4_vec_dot(ref, name):
    """rows % 8 != 0: llama.cpp runs ggml_vec_dot_{iq4_nl,mxfp4}_q8_0 (two chains) for MXFP4 at
    every row count and for IQ4_NL on one row (numerics="llama.cpp"); kernels and oracle give
    its bits."""
    from pyllama.backend import ref_compat
    from pyllama.backend.base import Weight
    from pyllama.backend.compat import vec_row_start
    from pyllama.backend.cpu import compat
    from pyllama.backend.cpu import matmul as mm
    raw, x = ref["raw_" + name][:15], ref["x"]
    w = Weight("w", GGMLType[name], (15, 512), raw)
    want = ref["vd_" + name][:, :15]
    assert np.array_equal(compat.matvec_k(w, x, 2), want)
    assert np.array_equal(ref_compat.matvec_k(w.type, raw, x), want)
    if name == "MXFP4":
        for n in (1, 3, 8, 9):
            assert np.array_equal(mm.matmul(w, x[:n]), ref[f"mm{n}_{name}"][:, :15])
    else:
        assert vec_row_start(w.type, 15, 1) == 0 and vec_row_start(w.type, 15, 2) == 2
        assert vec_row_start(w.type, 16, 1) == 1


def test_unrepacked_q4_k_prefill_is_tiled(ref):
    """A Q4_K with rows % 8 != 0 is not repacked: llama.cpp's tiled kernel from 8 rows (plain
    q8_K activations, mins by fma(-dmin, S2, d*S1))."""
    from pyllama.backend.base import Weight
    from pyllama.backend.cpu import matmul as mm
    from pyllama.backend.ref_matmul import matmul_ref
    raw, x = ref["raw_Q4_K"][:15], ref["x"]
    w = Weight("w", GGMLType.Q4_K, (15, 512), raw)
    for n in (8, 9):
        assert np.array_equal(mm.matmul(w, x[:n]), ref[f"mm{n}_Q4_K"][:, :15])
        assert np.array_equal(matmul_ref(w.type, raw, x[:n]), ref[f"mm{n}_Q4_K"][:, :15])


def test_bf16_one_row_equals_llama_cpp(ref):
    """numerics="llama.cpp", one row: ggml_vec_dot_bf16 (AVX2: 4x8 fma lanes, (c1+c3)+(c2+c4))."""
    from pyllama.backend import ref_compat
    raw, x = ref["raw_BF16"].view(np.uint16), ref["x"]
    got = np.concatenate([ref_compat.matvec_float(GGMLType.BF16, raw, x[i:i + 1])
                          for i in range(len(x))])
    assert np.array_equal(got, ref["vd_BF16"])
    assert np.array_equal(got[:1], ref["mm1_BF16"])
