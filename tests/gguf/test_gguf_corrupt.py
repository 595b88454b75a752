"""Malformed GGUF files: every one must raise exactly pyllama.errors.GgufError with a message that
says what and where -- never IndexError/struct.error/MemoryError, a crash or a hang."""
import os
import struct

import pytest

from ggufsamples import (Q, VT, RawGGUF, arr, gstr, kv, kv_str, kv_u32, minimal_valid,
                         write_sample)
from pyllama.errors import GgufError
from pyllama.gguf import GGUFReader

BIG = 2 ** 63 - 1


def open_bytes(tmp_path, data: bytes, name="x.gguf"):
    p = tmp_path / name
    p.write_bytes(data)
    return GGUFReader(p)


def expect(tmp_path, data: bytes, *needles: str) -> str:
    with pytest.raises(GgufError) as ei:
        open_bytes(tmp_path, data)
    assert type(ei.value) is GgufError
    msg = str(ei.value)
    for n in needles:
        assert n in msg, (n, msg)
    return msg


def test_minimal_valid_reads(tmp_path):
    r = open_bytes(tmp_path, minimal_valid().build())
    assert r.metadata == {"general.architecture": "llama", "x.n": 7}
    assert r.tensors["b"].data.tolist() == [list(range(8)), list(range(8, 16))]


def test_missing_empty_and_directory(tmp_path):
    expect(tmp_path, b"", "empty file")
    with pytest.raises(GgufError, match="not found"):
        GGUFReader(tmp_path / "missing.gguf")
    with pytest.raises(GgufError):
        GGUFReader(tmp_path)


@pytest.mark.parametrize("magic", [b"GGUX", b"\0\0\0\0", b"GGML", b"FUGG"])
def test_bad_magic(tmp_path, magic):
    g = minimal_valid()
    g.magic = magic
    expect(tmp_path, g.build(), "bad magic", "offset 0")


def test_tiny_files(tmp_path):
    for data in (b"G", b"GGU", b"GGUF", b"GGUF\3\0\0"):
        expect(tmp_path, data, "offset")


@pytest.mark.parametrize("version", [0, 1, 4, 0x03000000, 0xFFFFFFFF])
def test_unsupported_version(tmp_path, version):
    g = minimal_valid()
    g.version = version
    expect(tmp_path, g.build(), "unsupported GGUF version", "offset 4")


@pytest.mark.parametrize("n_kv,n_t", [(BIG, None), (2 ** 64 - 1, None), (None, BIG),
                                      (None, 2 ** 40), (10 ** 6, None)])
def test_impossible_counts(tmp_path, n_kv, n_t):
    g = minimal_valid()
    g.n_kv, g.n_tensors = n_kv, n_t
    expect(tmp_path, g.build(), "bad ", "count", "offset")


@pytest.mark.parametrize("n_kv,n_t", [(3, None), (1, None), (None, 3), (None, 1), (0, 0)])
def test_off_by_one_counts(tmp_path, n_kv, n_t):
    """Counts that still fit the file: either a GgufError or a consistent read, nothing else."""
    g = minimal_valid()
    g.n_kv, g.n_tensors = n_kv, n_t
    try:
        open_bytes(tmp_path, g.build())
    except GgufError as e:
        assert "offset" in str(e)


def test_huge_key_length(tmp_path):
    g = minimal_valid()
    g.kvs[1] = struct.pack("<Q", BIG) + b"x.n"
    msg = expect(tmp_path, g.build(), "truncated", "metadata entry 1")
    assert f"offset {g.offsets['kv1'] + 8}" in msg


def test_huge_string_value(tmp_path):
    g = minimal_valid()
    g.kvs[1] = kv("x.s", VT.STRING, struct.pack("<Q", 2 ** 62) + b"abc")
    expect(tmp_path, g.build(), "truncated", "x.s")


@pytest.mark.parametrize("etype,count", [(VT.UINT32, 2 ** 62), (VT.UINT8, BIG),
                                         (VT.FLOAT64, 2 ** 61), (VT.STRING, BIG),
                                         (VT.ARRAY, 2 ** 60), (VT.STRING, 2 ** 40)])
def test_huge_array_length(tmp_path, etype, count):
    g = minimal_valid()
    g.kvs[1] = kv("x.arr", VT.ARRAY, arr(etype, count, struct.pack("<Q", 1) + b"z"))
    expect(tmp_path, g.build(), "x.arr", "offset")


def test_huge_string_inside_array(tmp_path):
    g = minimal_valid()
    body = gstr("ok") + struct.pack("<Q", 2 ** 62) + b"zz"
    g.kvs[1] = kv("tok", VT.ARRAY, arr(VT.STRING, 2, body))
    expect(tmp_path, g.build(), "tok", "entry 1", "offset")


@pytest.mark.parametrize("vtype", [13, 99, 2 ** 31, 2 ** 32 - 1])
def test_unknown_value_type(tmp_path, vtype):
    g = minimal_valid()
    g.kvs[1] = kv("x.bad", vtype, b"\0" * 16)
    expect(tmp_path, g.build(), "unknown value type", "x.bad", "offset")


@pytest.mark.parametrize("etype", [13, 12345])
def test_unknown_array_element_type(tmp_path, etype):
    g = minimal_valid()
    g.kvs[1] = kv("x.bad", VT.ARRAY, arr(etype, 1, b"\0" * 16))
    expect(tmp_path, g.build(), "unknown array element type", "x.bad")


def test_arrays_nested_too_deep(tmp_path):
    body = arr(VT.UINT8, 1, b"\1")
    for _ in range(12):
        body = arr(VT.ARRAY, 1, body)
    g = minimal_valid()
    g.kvs[1] = kv("deep", VT.ARRAY, body)
    expect(tmp_path, g.build(), "nested too deeply", "deep")


def test_empty_arrays_are_valid(tmp_path):
    g = minimal_valid()
    g.kvs += [kv("e.u32", VT.ARRAY, arr(VT.UINT32, 0, b"")),
              kv("e.str", VT.ARRAY, arr(VT.STRING, 0, b"")),
              kv("e.nest", VT.ARRAY, arr(VT.ARRAY, 0, b""))]
    r = open_bytes(tmp_path, g.build())
    assert len(r.metadata["e.u32"]) == 0 and len(r.metadata["e.str"]) == 0
    assert r.metadata["e.nest"] == []


def test_invalid_utf8_key(tmp_path):
    g = minimal_valid()
    g.kvs[1] = kv(b"x.\xff\xfe", VT.UINT32, b"\0\0\0\0")
    expect(tmp_path, g.build(), "UTF-8", "metadata entry 1")


def test_duplicate_key_and_tensor(tmp_path):
    g = minimal_valid()
    g.kvs.append(kv_u32("x.n", 8))
    expect(tmp_path, g.build(), "duplicate metadata key", "x.n")
    g = minimal_valid()
    g.tinfos[1] = ("a",) + g.tinfos[1][1:]
    expect(tmp_path, g.build(), "duplicate tensor name", "'a'")


@pytest.mark.parametrize("payload", [
    kv_u32("general.alignment", 0), kv_u32("general.alignment", 48),
    kv_str("general.alignment", "32"), kv("general.alignment", VT.FLOAT32, struct.pack("<f", 32)),
    kv("general.alignment", VT.BOOL, b"\1")])
def test_bad_alignment(tmp_path, payload):
    g = minimal_valid()
    g.kvs.append(payload)
    expect(tmp_path, g.build(), "general.alignment")


@pytest.mark.parametrize("ttype", [4, 5, 31, 36, 1000, 2 ** 32 - 1])
def test_unknown_tensor_type(tmp_path, ttype):
    g = minimal_valid()
    g.tinfos[1] = ("b", (8, 2), ttype, 32)
    expect(tmp_path, g.build(), "unknown tensor type", "'b'")


@pytest.mark.parametrize("ne", [(), (1, 1, 1, 1, 1), (0, 2), (8, 0), (2 ** 41, 1)])
def test_bad_dims(tmp_path, ne):
    g = minimal_valid()
    g.tinfos[1] = ("b", ne, Q.F32, 32)
    expect(tmp_path, g.build(), "'b'", "offset")


def test_row_not_multiple_of_block(tmp_path):
    g = minimal_valid()
    g.tinfos[1] = ("b", (16, 1), Q.Q8_0, 32)
    expect(tmp_path, g.build(), "not a multiple", "Q8_0", "'b'")


@pytest.mark.parametrize("rel", [1, 16, 33])
def test_misaligned_offset(tmp_path, rel):
    g = minimal_valid()
    g.tinfos[1] = ("b", (8, 2), Q.F32, rel)
    expect(tmp_path, g.build(), "not aligned", "'b'")


@pytest.mark.parametrize("ne,rel", [((8, 3), 32), ((8, 2), 64), ((8, 2), 2 ** 60),
                                    ((2 ** 40, 2 ** 40), 0)])
def test_tensor_data_past_eof(tmp_path, ne, rel):
    g = minimal_valid()
    g.tinfos[1] = ("b", ne, Q.F32, rel)
    expect(tmp_path, g.build(), "past the end", "'b'")


def test_truncation_at_every_offset(tmp_path):
    """Cut a small GGUFWriter file at every byte of its first 512, every 2nd header byte, every
    7th data byte and the ends: GgufError before the last tensor byte, a normal read after."""
    src = tmp_path / "full.gguf"
    write_sample(src, alignment=32)
    full = src.read_bytes()
    r = GGUFReader(src)
    end = max(t.offset + t.nbytes for t in r.tensors.values())
    assert len(full) < 12000
    cuts = sorted(set(range(512)) | set(range(0, r.data_offset + 1, 2))
                  | set(range(r.data_offset - 40, len(full), 7))
                  | {r.data_offset, end - 1, end, len(full) - 1}, reverse=True)
    p = tmp_path / "cut.gguf"
    p.write_bytes(full)
    for n in cuts:                      # shrink one file in place, longest cut first
        os.truncate(p, n)
        if n < end:
            with pytest.raises(GgufError) as ei:
                GGUFReader(p)
            assert type(ei.value) is GgufError and ("offset" in str(ei.value) or n == 0)
        else:
            assert GGUFReader(p).tensors.keys() == r.tensors.keys()
