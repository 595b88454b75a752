"""Dequantize real tensors of the bundled models: bit-exact vs gguf.quants, a few rows per type."""
import gguf
import gguf.quants as gq
import numpy as np
import pytest

from pyllama.gguf import GGMLType as T
from pyllama.gguf import GGUFReader
from pyllama.quant import dequantize, quantize

pytestmark = pytest.mark.realmodel


def rows_of_each_type(path, per_type=2):
    """{type: [(tensor, row indices)]} for the first `per_type` tensors of every type."""
    r = GGUFReader(path)
    out = {}
    for t in r.tensors.values():
        lst = out.setdefault(t.type, [])
        if len(lst) < per_type:
            n_rows = int(np.prod(t.shape[:-1], dtype=np.int64)) if len(t.shape) > 1 else 1
            lst.append((t, sorted({0, min(1, n_rows - 1), n_rows // 2, n_rows - 1})))
    return out


def check_model(path, expected_types):
    found = rows_of_each_type(path)
    assert expected_types <= set(found)
    for qtype, tensors in found.items():
        for t, rows in tensors:
            data = t.data.reshape(-1, t.data.shape[-1]) if t.data.ndim > 1 else t.data[None]
            raw = np.ascontiguousarray(data[rows])
            n = t.ne[0]
            ours = dequantize(raw, qtype, (len(rows), n))
            ref = gq.dequantize(raw.view(np.uint8) if qtype != T.F32 else raw,
                                gguf.GGMLQuantizationType(int(qtype)))
            ref = np.asarray(ref, np.float32).reshape(len(rows), n)
            assert np.array_equal(ours.view(np.uint32), ref.view(np.uint32)), t.name
            assert np.isfinite(ours).all(), t.name


def test_gemma_tensors(gemma_path):
    check_model(gemma_path, {T.F32, T.Q5_0, T.Q4_K, T.Q8_0, T.Q6_K})


def test_qwen_tensors(qwen_path):
    check_model(qwen_path, {T.F32, T.Q5_0, T.Q4_K, T.Q8_0, T.Q6_K})


def test_requantize_q8_0_real_rows(gemma_path):
    """Q8_0 rows dequantized and quantized again come back byte-identical (llama.cpp's
    quantizer is idempotent on its own output); checked on token_embd rows."""
    t = GGUFReader(gemma_path).tensors["token_embd.weight"]
    assert t.type == T.Q8_0
    raw = np.ascontiguousarray(t.data[[0, 7, 1000, 262143]])
    x = dequantize(raw, T.Q8_0, (4, t.ne[0]))
    again = quantize(x, T.Q8_0)
    same = (again == raw).mean()
    assert same > 0.999
