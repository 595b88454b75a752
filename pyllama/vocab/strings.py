"""Fast bulk access to a GGUF string array (tokens, merges) and a cheap complete digest of it.

`StringArray.tolist()` decodes 262k tokens one by one (~0.25 s); here the stored entries
(u64 length + bytes each, back to back in the mapping) become one buffer with a separator byte
in place of each length, decoded and split once. Falls back to `tolist()` when the array's
layout is unknown, an entry contains the separator or is not valid UTF-8.
"""
from __future__ import annotations

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


def _joined(sa, sep: int, per_entry: int = 0) -> str | None:
    """All entries decoded as one str, each preceded by chr(sep); None unless each entry holds
    `per_entry` separator bytes itself, or when it is not valid UTF-8."""
    sp = _span(sa)
    if sp is None:
        return None
    raw, offs, lens, _ = sp
    keep = np.ones(raw.shape[0], dtype=bool)
    keep[(offs[:, None] - 8 + np.arange(1, 8)).ravel()] = False
    joined = raw[keep]
    marks = np.concatenate(([0], np.cumsum(lens + 1)[:-1]))
    joined[marks] = sep
    if np.count_nonzero(joined == sep) != len(lens) * (1 + per_entry):
        return None
    try:
        return joined.tobytes().decode("utf-8")
    except UnicodeDecodeError:
        return None


def strings(sa) -> list[str]:
    """All entries as str (invalid UTF-8 decoded with U+FFFD, as `StringArray` does)."""
    text = _joined(sa, 0)
    if text is None:
        return list(sa.tolist() if hasattr(sa, "tolist") else sa)
    return text.split("\0")[1:]


def pairs(sa) -> list[tuple[str, str]] | None:
    """BPE merges "left right" as (left, right) tuples; None when an entry is not exactly two
    space-separated parts (the caller then reports the bad entry)."""
    text = _joined(sa, 0x20, per_entry=1)
    if text is None:
        return None
    parts = text.split(" ")
    if len(parts) != 2 * len(sa) + 1:
        return None
    it = iter(parts[1:])
    return list(zip(it, it))


def digest(h, sa) -> None:
    """Feed a complete representation of the array to hash `h` (its stored bytes)."""
    sp = _span(sa)
    if sp is None:
        for s in sa:
            h.update(s.encode("utf-8", "surrogatepass") + b"\0")
        return
    h.update(len(sa).to_bytes(8, "little"))
    h.update(sp[0].data)
