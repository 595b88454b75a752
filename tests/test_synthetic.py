"""pyllama.synthetic: same header and tensor table as the source, new valid random weights."""
import gguf
import numpy as np

from pyllama import Context, load_model
from pyllama.gguf import GGUFReader
from pyllama.synthetic import main, write_skeleton, write_synthetic


def _header(path):
    r = GGUFReader(path)
    with open(path, "rb") as f:
        return f.read(r.data_offset), {n: (t.type, t.shape, t.offset) for n, t in r.tensors.items()}


def test_same_header_new_weights(tiny_model_path, tmp_path):
    src = tiny_model_path("gemma3")
    out = write_synthetic(src, str(tmp_path / "syn.gguf"), seed=1)
    assert _header(out) == _header(src)
    ra, rb = gguf.GGUFReader(src), gguf.GGUFReader(out)
    quantized = 0
    for ta, tb in zip(ra.tensors, rb.tensors):
        assert ta.name == tb.name and ta.tensor_type == tb.tensor_type
        assert not np.array_equal(np.asarray(ta.data), np.asarray(tb.data))
        w = gguf.quants.dequantize(np.asarray(tb.data), tb.tensor_type)
        assert np.isfinite(w).all(), tb.name
        if tb.tensor_type not in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            quantized += 1
            assert 0.002 < w.std() < 0.2, (tb.name, tb.tensor_type.name, w.std())
    assert quantized > 0


def test_skeleton_roundtrip_runs(tiny_model_path, tmp_path):
    src = tiny_model_path("qwen2")
    skel = write_skeleton(src, str(tmp_path / "s.gguf.gz"))
    out = str(tmp_path / "from-skel.gguf")
    assert main([skel, out, "--seed", "3"]) == 0
    assert _header(out) == _header(src)
    ctx = Context(load_model(out, backend="ref"), n_ctx=64)
    logits = ctx.eval([1, 2, 3])
    assert np.isfinite(logits).all()
