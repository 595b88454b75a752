"""Our own GGUF v2/v3 reader: mmap + struct, zero-copy tensor views.

The `gguf` package's GGUFReader builds Python objects for every array element and took 23-105 s on
the bundled models; this parser walks the header once and keeps big arrays as views of the mapping,
so opening a model costs well under a second. Every malformed input raises one GgufError that names
what and where (byte offset, key or tensor).
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..errors import GgufError
from .constants import (GGML_BLOCK, GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, SUPPORTED_VERSIONS,
                        GGMLType, ValueType)

# ggml type ids (ggml.h, llama.cpp 0c1e570) that GGMLType does not read: named in the error
_UNREAD_TYPES = {31: "Q4_0_4_4 (removed from GGUF files)", 32: "Q4_0_4_8 (removed from GGUF files)",
                 33: "Q4_0_8_8 (removed from GGUF files)", 36: "IQ4_NL_4_4 (removed from GGUF files)",
                 37: "IQ4_NL_4_8 (removed from GGUF files)", 38: "IQ4_NL_8_8 (removed from GGUF files)",
                 40: "NVFP4", 41: "Q1_0", 42: "Q2_0"}

_SCALAR = {
    ValueType.UINT8: ("<B", np.uint8), ValueType.INT8: ("<b", np.int8),
    ValueType.UINT16: ("<H", np.uint16), ValueType.INT16: ("<h", np.int16),
    ValueType.UINT32: ("<I", np.uint32), ValueType.INT32: ("<i", np.int32),
    ValueType.FLOAT32: ("<f", np.float32), ValueType.BOOL: ("<?", np.bool_),
    ValueType.UINT64: ("<Q", np.uint64), ValueType.INT64: ("<q", np.int64),
    ValueType.FLOAT64: ("<d", np.float64),
}
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")
MAX_DIMS = 4


class StringArray:
    """A GGUF array of strings, decoded on access. Holds offsets into the mapping."""

    __slots__ = ("_buf", "_offs", "_lens", "_cache")

    def __init__(self, buf, offs: list[int], lens: list[int]):
        self._buf, self._offs, self._lens, self._cache = buf, offs, lens, None

    def __len__(self) -> int:
        return len(self._offs)

    def raw(self, i: int) -> bytes:
        o = self._offs[i]
        return bytes(self._buf[o:o + self._lens[i]])

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if self._cache is not None:
            return self._cache[i]
        return self.raw(i).decode("utf-8", errors="replace")

    def tolist(self) -> list[str]:
        if self._cache is None:
            buf = self._buf
            self._cache = [bytes(buf[o:o + n]).decode("utf-8", errors="replace")
                           for o, n in zip(self._offs, self._lens)]
        return self._cache

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def __eq__(self, other):
        return list(self) == list(other)

    def __repr__(self) -> str:
        return f"StringArray(len={len(self)})"


@dataclass(frozen=True)
class TensorInfo:
    name: str
    ne: tuple[int, ...]        # ggml order: ne[0] is the row length
    type: GGMLType
    offset: int                # absolute byte offset in the file
    nbytes: int
    _reader: "GGUFReader"

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy order: (..., rows, row_length)."""
        return tuple(reversed(self.ne))

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.ne:
            n *= d
        return n

    @property
    def data(self) -> np.ndarray:
        """Zero-copy, read-only view of the tensor bytes.

        F32/F16/F64/I* come typed with `shape`; BF16 as uint16 with `shape`; block-quantized
        types as uint8 of shape (..., row_bytes) (the last numpy dim holds one packed row).
        """
        buf = self._reader._mm
        typed = {GGMLType.F32: np.float32, GGMLType.F16: np.float16, GGMLType.BF16: np.uint16,
                 GGMLType.F64: np.float64, GGMLType.I8: np.int8, GGMLType.I16: np.int16,
                 GGMLType.I32: np.int32, GGMLType.I64: np.int64}
        if self.type in typed:
            dt = typed[self.type]
            arr = np.frombuffer(buf, dtype=dt, count=self.n_elements, offset=self.offset)
            return arr.reshape(self.shape)
        blck, size = GGML_BLOCK[self.type]
        row_bytes = self.ne[0] // blck * size
        arr = np.frombuffer(buf, dtype=np.uint8, count=self.nbytes, offset=self.offset)
        return arr.reshape(self.shape[:-1] + (row_bytes,))


class _Cursor:
    """Bounds-checked little-endian reads from the mapping."""

    def __init__(self, buf, size: int):
        self.buf, self.size, self.pos = buf, size, 0
        self.what = "header"

    def fail(self, msg: str, at: int | None = None) -> GgufError:
        return GgufError(f"{msg} (at byte offset {self.pos if at is None else at}, {self.what})")

    def need(self, n: int) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(f"file truncated: need {n} bytes, {self.size - self.pos} left")

    def unpack(self, st: struct.Struct):
        self.need(st.size)
        v = st.unpack_from(self.buf, self.pos)[0]
        self.pos += st.size
        return v

    def u32(self) -> int:
        return self.unpack(_U32)

    def u64(self) -> int:
        return self.unpack(_U64)

    def string(self) -> str:
        start = self.pos
        n = self.u64()
        self.need(n)
        raw = self.buf[self.pos:self.pos + n]
        self.pos += n
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("string is not valid UTF-8", start) from None


class GGUFReader:
    """Parse a GGUF file. `metadata` maps keys to values, `tensors` names to TensorInfo."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise GgufError(f"model file not found: {self.path}") from None
        except OSError as e:
            raise GgufError(f"cannot open model file {self.path}: {e.strerror}") from None
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                raise GgufError(f"{self.path}: empty file, not a GGUF model")
            self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise GgufError(f"cannot map model file {self.path}: {e}") from None
        finally:
            os.close(fd)
        self.size = size
        self.metadata: dict[str, Any] = {}
        self.tensors: dict[str, TensorInfo] = {}
        try:
            self._parse()
        except GgufError as e:
            raise GgufError(f"{self.path}: {e}") from None
        except (struct.error, ValueError, OverflowError, MemoryError) as e:  # defensive
            raise GgufError(f"{self.path}: corrupt GGUF: {e}") from None

    # -- public helpers -------------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.metadata

    @property
    def architecture(self) -> str:
        return self.metadata.get("general.architecture", "")

    def close(self) -> None:
        # views into the mapping may still exist; let the GC close the map with them
        self.tensors = {}

    # -- parsing --------------------------------------------------------------------------
    def _parse(self) -> None:
        c = _Cursor(self._mm, self.size)
        c.need(4)
        magic = bytes(self._mm[0:4])
        if magic != GGUF_MAGIC:
            raise c.fail(f"bad magic {magic!r}, not a GGUF file", 0)
        c.pos = 4
        self.version = c.u32()
        if self.version not in SUPPORTED_VERSIONS:
            raise c.fail(f"unsupported GGUF version {self.version} (supported: 2, 3)", 4)
        n_tensors, n_kv = c.u64(), c.u64()
        # every kv needs >= 8 (key len) + 4 (type) + 1 bytes; every tensor info >= 8+4+8+4+8
        if n_kv * 13 > self.size - c.pos:
            raise c.fail(f"bad metadata count {n_kv} for a {self.size}-byte file")
        if n_tensors * 32 > self.size - c.pos:
            raise c.fail(f"bad tensor count {n_tensors} for a {self.size}-byte file")
        for i in range(n_kv):
            c.what = f"metadata entry {i}"
            key = c.string()
            c.what = f"metadata key '{key}'"
            vtype = c.u32()
            if key in self.metadata:
                raise c.fail("duplicate metadata key")
            self.metadata[key] = self._value(c, vtype, depth=0)
        self.alignment = self._alignment(c)
        infos = []
        for i in range(n_tensors):
            c.what = f"tensor info {i}"
            name = c.string()
            c.what = f"tensor '{name}'"
            n_dims = c.u32()
            if not 1 <= n_dims <= MAX_DIMS:
                raise c.fail(f"bad number of dimensions {n_dims}")
            ne = tuple(c.u64() for _ in range(n_dims))
            raw_type = c.u32()
            try:
                qtype = GGMLType(raw_type)
            except ValueError:
                known = _UNREAD_TYPES.get(raw_type)
                what = f" ({known}), which pyllama does not support" if known else ""
                raise c.fail(f"unknown tensor type {raw_type}{what}") from None
            rel = c.u64()
            infos.append((name, ne, qtype, rel))
        c.what = "tensor data"
        data_start = -(-c.pos // self.alignment) * self.alignment
        self.data_offset = data_start
        for name, ne, qtype, rel in infos:
            c.what = f"tensor '{name}'"
            if name in self.tensors:
                raise c.fail("duplicate tensor name")
            blck, bsize = GGML_BLOCK[qtype]
            if any(d <= 0 or d > (1 << 40) for d in ne):
                raise c.fail(f"bad dimensions {list(ne)}")
            if ne[0] % blck:
                raise c.fail(f"row length {ne[0]} is not a multiple of the {qtype.name} "
                             f"block size {blck}")
            n = 1
            for d in ne:
                n *= d
            nbytes = n // blck * bsize
            if rel % self.alignment:
                raise c.fail(f"data offset {rel} is not aligned to {self.alignment}")
            off = data_start + rel
            if off + nbytes > self.size:
                raise c.fail(f"data [{off}, {off + nbytes}) extends past the end of the "
                             f"{self.size}-byte file (truncated?)")
            self.tensors[name] = TensorInfo(name, ne, qtype, off, nbytes, self)

    def _alignment(self, c: _Cursor) -> int:
        a = self.metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
        if not isinstance(a, int) or isinstance(a, bool) or a <= 0 or a & (a - 1):
            raise c.fail(f"general.alignment must be a power of two, got {a!r}")
        return a

    def _value(self, c: _Cursor, vtype: int, depth: int) -> Any:
        if vtype in _SCALAR:
            fmt, _ = _SCALAR[ValueType(vtype)]
            v = c.unpack(struct.Struct(fmt))
            return bool(v) if vtype == ValueType.BOOL else v
        if vtype == ValueType.STRING:
            return c.string()
        if vtype == ValueType.ARRAY:
            if depth > 8:
                raise c.fail("arrays nested too deeply")
            etype = c.u32()
            count = c.u64()
            return self._array(c, etype, count, depth)
        raise c.fail(f"unknown value type {vtype}")

    def _array(self, c: _Cursor, etype: int, count: int, depth: int) -> Any:
        if etype in _SCALAR:
            _, dt = _SCALAR[ValueType(etype)]
            nbytes = count * np.dtype(dt).itemsize
            c.need(nbytes)
            arr = np.frombuffer(self._mm, dtype=dt, count=count, offset=c.pos)
            c.pos += nbytes
            return arr
        if etype == ValueType.STRING:
            if count * 8 > c.size - c.pos:
                raise c.fail(f"string array of {count} entries cannot fit in the file")
            return self._string_array(c, count)
        if etype == ValueType.ARRAY:
            if count * 12 > c.size - c.pos:
                raise c.fail(f"nested array of {count} entries cannot fit in the file")
            return [self._value(c, ValueType.ARRAY, depth + 1) for _ in range(count)]
        raise c.fail(f"unknown array element type {etype}")

    def _string_array(self, c: _Cursor, count: int) -> StringArray:
        buf, pos, size = self._mm, c.pos, c.size
        unpack = _U64.unpack_from
        offs, lens = [0] * count, [0] * count
        for i in range(count):
            if pos + 8 > size:
                c.pos = pos
                raise c.fail(f"file truncated inside string array (entry {i} of {count})")
            n = unpack(buf, pos)[0]
            pos += 8
            if n > size - pos:
                c.pos = pos
                raise c.fail(f"string length {n} of array entry {i} runs past the end of file")
            offs[i] = pos
            lens[i] = n
            pos += n
        c.pos = pos
        return StringArray(buf, offs, lens)


def open_gguf(path: str | os.PathLike) -> GGUFReader:
    return GGUFReader(path)
