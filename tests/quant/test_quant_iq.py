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
