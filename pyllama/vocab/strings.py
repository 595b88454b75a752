"""Fast bulk access to a GGUF string array (tokens, merges) and a cheap complete digest of it.

`StringArray.tolist()` decodes 262k tokens one by one (~0.25 s); here the stored entries
(u64 length + bytes each, back to back in the mapping) are decoded with one UTF-8 decode and
cut at character offsets computed with numpy (~30 ms). Falls back to `tolist()` when the
array's layout is unknown or an entry is not valid UTF-8.
"""
from __future__ import annotations

import hashlib

import numpy as np


def _layout(sa):
    """(buffer, entry offsets, entry lengths) of a reader StringArray, or None."""
    try:
        return sa._buf, sa._offs, sa._lens
    except AttributeError:
        return None


def _span(sa) -> tuple[np.ndarray, np.ndarray, np.ndarray, int] | None:
    """The contiguous stored bytes of the array (uint8), entry offsets/lengths into it."""
    lay = _layout(sa)
    if lay is None or len(sa) == 0:
        return None
    buf, offs, lens = lay
    start = offs[0] - 8
    end = offs[-1] + lens[-1]
    raw = np.frombuffer(buf, dtype=np.uint8, count=end - start, offset=start)
    return raw, np.asarray(offs, dtype=np.int64) - start, np.asarray(lens, dtype=np.int64), start


def strings(sa) -> list[str]:
    """All entries as str (invalid UTF-8 decoded with U+FFFD, as `StringArray` does)."""
    sp = _span(sa)
    if sp is None:
        return list(sa.tolist() if hasattr(sa, "tolist") else sa)
    raw, offs, lens, _ = sp
    keep = np.ones(raw.shape[0], dtype=bool)
    keep[(offs[:, None] - 8 + np.arange(8)).ravel()] = False
    payload = raw[keep]
    try:
        text = payload.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return list(sa.tolist())
    is_start = (payload & 0xC0) != 0x80
    char_pos = np.concatenate(([0], np.cumsum(is_start)))
    byte_end = np.cumsum(lens)
    ends = char_pos[byte_end].tolist()
    begins = [0] + ends[:-1]
    return [text[a:b] for a, b in zip(begins, ends)]


def digest(h: "hashlib._Hash", sa) -> None:
    """Feed a complete representation of the array to hash `h` (its stored bytes)."""
    sp = _span(sa)
    if sp is None:
        for s in sa:
            h.update(s.encode("utf-8", "surrogatepass") + b"\0")
        return
    h.update(len(sa).to_bytes(8, "little"))
    h.update(sp[0].data)
