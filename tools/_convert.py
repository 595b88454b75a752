"""Value converters with llama.cpp's parsing rules (std::stoi / std::stof / std::stoul semantics).

Leading whitespace is skipped, trailing junk is ignored (`-c 512abc` == 512), and a value with no
number at its start fails with the C++ exception text (`stoi`, `stof`, `stoul`).
"""
from __future__ import annotations

import re

TRUTHY = ("on", "enabled", "true", "1")
FALSEY = ("off", "disabled", "false", "0")

_INT = re.compile(r"\s*([+-]?\d+)")
_FLOAT = re.compile(r"\s*([+-]?(?:inf(?:inity)?|nan|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?))",
                    re.IGNORECASE)
_HEX_FLOAT = re.compile(r"\s*([+-]?0[xX][0-9a-fA-F]+)")


class ConvertError(ValueError):
    """A value that llama.cpp's handler would reject; str() is llama.cpp's reason text."""


def stoi(s: str) -> int:
    m = _INT.match(s)
    if not m:
        raise ConvertError("stoi")
    v = int(m.group(1))
    if not -2**31 <= v < 2**31:
        raise ConvertError("stoi")
    return v


def stoul(s: str) -> int:
    """std::stoul then a uint32 cast: '-1' wraps to 4294967295 (llama.cpp's random seed)."""
    m = _INT.match(s)
    if not m:
        raise ConvertError("stoul")
    return int(m.group(1)) % 2**32


def stof(s: str) -> float:
    m = _HEX_FLOAT.match(s)
    if m:
        return float(int(m.group(1), 16))
    m = _FLOAT.match(s)
    if not m:
        raise ConvertError("stof")
    return float(m.group(1))


def is_truthy(s: str) -> bool:
    return s in TRUTHY


def is_falsey(s: str) -> bool:
    return s in FALSEY


def parse_bool(s: str) -> bool:
    if is_truthy(s):
        return True
    if is_falsey(s):
        return False
    raise ConvertError("invalid boolean value")


_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "'": "'", '"': '"', "\\": "\\", "?": "?",
            "a": "\a", "b": "\b", "f": "\f", "v": "\v"}


def process_escapes(s: str) -> str:
    """llama.cpp's string_process_escapes: \\n \\r \\t \\' \\" \\\\ and \\xHH; others stay as is."""
    out = []
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = s[i + 1]
        if e in _ESCAPES:
            out.append(_ESCAPES[e])
            i += 2
        elif e == "x" and i + 3 < n + 1 and re.fullmatch(r"[0-9a-fA-F]{2}", s[i + 2:i + 4] or ""):
            out.append(chr(int(s[i + 2:i + 4], 16)))
            i += 4
        else:
            out.append("\\" + e)
            i += 2
    return "".join(out)
