"""pyllama.gguf.GGUFReader reads back exactly what gguf.GGUFWriter wrote, and agrees with
gguf.GGUFReader on every field and tensor."""
import math

import gguf
import numpy as np
import pytest

from ggufsamples import NESTED, SCALAR_ARRAYS, SCALARS, STRINGS, write_sample
from pyllama.gguf import GGMLType, GGUFReader, StringArray
from pyllama.quant import dequantize


@pytest.fixture(scope="module", params=[None, 64, 1, 4096], ids=lambda a: f"align{a}")
def sample(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("gguf") / "sample.gguf"
    tensors = write_sample(path, alignment=request.param)
    return path, tensors, request.param


def same_value(got, want, vtype):
    if vtype == gguf.GGUFValueType.FLOAT32:
        return np.float32(got) == np.float32(want)
    if isinstance(want, float):
        return math.isclose(got, want, rel_tol=0, abs_tol=0)
    return got == want and type(got) is type(want)


def test_scalars(sample):
    r = GGUFReader(sample[0])
    assert r.version == 3
    assert r.architecture == "llama"
    for k, (vt, v) in SCALARS.items():
        assert same_value(r.metadata[k], v, vt), (k, r.metadata[k], v)


def test_scalar_arrays(sample):
    r = GGUFReader(sample[0])
    for k, (vt, v) in SCALAR_ARRAYS.items():
        got = r.metadata[k]
        assert isinstance(got, np.ndarray) and not got.flags.writeable
        if vt == gguf.GGUFValueType.FLOAT32:
            assert np.array_equal(got, np.array(v, np.float32)), k
        else:
            assert got.tolist() == v, k


def test_string_and_nested_arrays(sample):
    r = GGUFReader(sample[0])
    s = r.metadata["s.strs"]
    assert isinstance(s, StringArray) and len(s) == len(STRINGS)
    assert s.tolist() == STRINGS and list(s) == STRINGS and s[2] == STRINGS[2]
    assert s[1:3] == STRINGS[1:3] and s.raw(2) == STRINGS[2].encode()
    assert [a.tolist() for a in r.metadata["n.ints"]] == NESTED["n.ints"]
    assert [a.tolist() for a in r.metadata["n.strs"]] == NESTED["n.strs"]


def test_alignment(sample):
    r = GGUFReader(sample[0])
    align = sample[2] or 32
    assert r.alignment == align
    assert r.data_offset % align == 0
    for t in r.tensors.values():
        assert (t.offset - r.data_offset) % align == 0


def test_tensors_roundtrip(sample):
    path, tensors, _ = sample
    r = GGUFReader(path)
    assert list(r.tensors) == list(tensors)
    for name, (data, raw, shape) in tensors.items():
        t = r.tensors[name]
        assert t.shape == shape and t.ne == tuple(reversed(shape))
        if raw is None:
            assert t.data.dtype == data.dtype and np.array_equal(t.data, data), name
        else:
            assert t.type == GGMLType(int(raw))
            assert t.data.view(np.uint8).tobytes() == data.tobytes(), name
        assert t.nbytes == data.nbytes
        assert not t.data.flags.writeable


def test_quantized_tensor_dequantizes(sample):
    path, tensors, _ = sample
    r = GGUFReader(path)
    t = r.tensors["q4_k.mat"]
    y = dequantize(t.data, t.type, t.shape)
    assert y.shape == (4, 256) and np.isfinite(y).all()


def test_agrees_with_gguf_reader(sample):
    path = sample[0]
    ours, ref = GGUFReader(path), gguf.GGUFReader(str(path))
    ref_keys = [k for k in ref.fields if not k.startswith("GGUF.")]
    assert list(ours.metadata) == ref_keys
    for k in ref_keys:
        f = ref.fields[k]
        if k.startswith("n."):
            continue            # gguf's contents() flattens nested arrays; checked above
        want, got = f.contents(), ours.metadata[k]
        got = got.tolist() if hasattr(got, "tolist") else got
        if f.types[-1] == gguf.GGUFValueType.FLOAT32:
            assert np.array_equal(np.float32(got), np.float32(want)), k
        else:
            assert got == want, k
    assert len(ref.tensors) == len(ours.tensors)
    for rt in ref.tensors:
        t = ours.tensors[rt.name]
        assert t.offset == rt.data_offset and t.nbytes == rt.n_bytes
        assert int(t.type) == int(rt.tensor_type)
        assert t.ne == tuple(int(d) for d in rt.shape)
        assert t.data.view(np.uint8).tobytes() == np.asarray(rt.data).view(np.uint8).tobytes()


def test_helpers(sample):
    r = GGUFReader(sample[0])
    assert "t.u8" in r and "nope" not in r
    assert r.get("nope", 5) == 5 and r.get("t.u8") == 250
    assert r.tensors["f32.3d"].n_elements == 30
    r.close()
    assert r.tensors == {}
