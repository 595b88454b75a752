"""Hypothesis fuzz: mutate bytes of a valid GGUF; opening it either works (and every value and
tensor is then readable) or raises GgufError -- nothing else."""
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ggufsamples import write_sample
from pyllama.errors import GgufError
from pyllama.gguf import GGUFReader, StringArray


_BASE = {}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """Fills _BASE (kept out of hypothesis' arguments so failures print short)."""
    path = tmp_path_factory.mktemp("fuzz") / "base.gguf"
    write_sample(path, alignment=32)
    _BASE.update(data=path.read_bytes(), header_len=GGUFReader(path).data_offset)


INTERESTING = [0, 1, 2, 3, 4, 7, 8, 9, 12, 13, 31, 32, 255, 2 ** 31, 2 ** 32 - 1, 2 ** 32,
               2 ** 40, 2 ** 62, 2 ** 63 - 1, 2 ** 64 - 1]

mutation = st.one_of(
    st.tuples(st.just("byte"), st.integers(0, 10 ** 6), st.integers(0, 255)),
    st.tuples(st.just("u32"), st.integers(0, 10 ** 6), st.sampled_from(INTERESTING[:15])),
    st.tuples(st.just("u64"), st.integers(0, 10 ** 6), st.sampled_from(INTERESTING)),
)


def mutate(data: bytes, header_len: int, muts, cut) -> bytes:
    b = bytearray(data)
    for kind, pos, val in muts:
        pos %= header_len + 64          # the header is where the structure lives
        if kind == "byte":
            b[pos] = val
        else:
            raw = struct.pack("<I" if kind == "u32" else "<Q", val)
            b[pos:pos + len(raw)] = raw
    if cut is not None:
        del b[cut % (len(b) + 1):]
    return bytes(b)


def touch_everything(r: GGUFReader) -> None:
    for v in r.metadata.values():
        if isinstance(v, StringArray):
            v.tolist()
        elif isinstance(v, list):
            [x.tolist() if hasattr(x, "tolist") else x for x in v]
    for t in r.tensors.values():
        d = t.data
        assert d.nbytes == t.nbytes
        np.asarray(d).view(np.uint8).sum()


@pytest.mark.slow
@settings(max_examples=300, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(muts=st.lists(mutation, min_size=1, max_size=6),
       cut=st.one_of(st.none(), st.integers(0, 10 ** 6)))
def test_mutated_files_raise_only_gguferror(base, tmp_path, muts, cut):
    data, header_len = _BASE["data"], _BASE["header_len"]
    p = tmp_path / "m.gguf"
    p.write_bytes(mutate(data, header_len, muts, cut))
    try:
        r = GGUFReader(p)
    except GgufError as e:
        assert type(e) is GgufError and str(e)
        return
    touch_everything(r)
