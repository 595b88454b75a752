"""A GGUF string array (tokens, merges) as one packed byte array in the file's own layout (u64
length + bytes per entry), for the C tables of _merge.

From a reader `StringArray` the stored span is copied out of the mapping in one piece (the
tables must not pin the mapping) and the entries are found by walking the length prefixes in C;
any other sequence of str/bytes is packed the same way. Empty entries become "[EMPTY_<i>]" on
request, as llama.cpp's vocab loader does.
"""
from __future__ import annotations

import struct

import numpy as np

from . import _merge

_U64 = struct.Struct("<Q")


def packed(sa, fill_empty: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes uint8, entry offsets int64, entry lengths int64) of string array `sa`."""
    span = _span(sa)
    if span is None:
        span = pack(list(sa))
    raw, offs, lens = span
    if fill_empty and len(lens) and not lens.all():
        entries = [_entry(raw, o, n) for o, n in zip(offs.tolist(), lens.tolist())]
        raw, offs, lens = pack([e or f"[EMPTY_{i}]".encode() for i, e in enumerate(entries)])
    return raw, offs, lens


def pack(entries: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    data = [e if isinstance(e, bytes) else str(e).encode("utf-8", "surrogatepass")
            for e in entries]
    raw = np.frombuffer(b"".join(_U64.pack(len(d)) + d for d in data), dtype=np.uint8)
    return (raw, *_merge.scan(raw, len(data)))


def _entry(raw: np.ndarray, off: int, n: int) -> bytes:
    return raw[off:off + n].tobytes()


def _span(sa):
    """The stored bytes of a reader StringArray (copied), or None for other sequences."""
    try:
        buf, first, last, n_last = sa._buf, sa._offs[0], sa._offs[-1], sa._lens[-1]
    except (AttributeError, IndexError, TypeError):
        return None
    start = first - 8
    view = np.frombuffer(buf, dtype=np.uint8, count=last + n_last - start, offset=start)
    raw = view.copy()
    del view
    offs, lens = _merge.scan(raw, len(sa))
    if int(offs[-1]) + start != last:
        return None
    return raw, offs, lens
