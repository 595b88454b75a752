"""IQ4_NL: 32 values per block as 4-bit indices into a fixed non-linear table, one f16 scale.

A llama.cpp KV-cache type (`-ctk/-ctv iq4_nl`). Ports of ggml's dequantize_row_iq4_nl and
quantize_row_iq4_nl_impl without importance weights (ntry -1: quantize_row_iq4_nl_ref, ntry 7:
quantize_iq4_nl), vectorised over blocks; float32 sums run serially in ggml's order, so blocks
are bit-identical to ggml's (all-zero blocks: d = 0, indices 8, where ggml leaves stale bytes).
"""
from __future__ import annotations

import numpy as np

from ..gguf import GGMLType
from .legacy import F32, _blocks, first_absmax
from .legacy import serial_sum as _ssum

KVALUES = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113],
                   dtype=np.int8)
_KV = KVALUES.astype(F32)
GROUP_MAX_EPS = F32(1e-15)
NTRY = 7


def dequantize_iq4_nl(b) -> np.ndarray:
    """Block fields {"d": f16 [n], "qs": u8 [n, 16]} -> float32 [n, 32]."""
    idx = np.concatenate([b["qs"] & 0xF, b["qs"] >> 4], axis=1)
    return b["d"].astype(F32)[:, None] * _KV[idx]


def best_index(x: np.ndarray) -> np.ndarray:
    """ggml's best_index_int8(16, kvalues, x): the nearest table entry, ties to the upper one
    only when strictly closer, NaN -> 15."""
    mu = np.clip(np.searchsorted(_KV, x, side="right"), 1, 15)
    lower = (x - _KV[mu - 1]) < (_KV[mu] - x)
    i = np.where(lower, mu - 1, mu)
    i = np.where(x <= _KV[0], 0, np.where(x >= _KV[15], 15, i))
    return np.where(np.isnan(x), 15, i)


def _fit(xb, w, L):
    """(sumqx, sumq2) per block for table indices L [n, 32]."""
    q = _KV[L]
    return _ssum(w * q * xb), _ssum(w * q * q)


def quantize_iq4_nl_blocks(xb: np.ndarray, out: np.ndarray, ntry: int = -1) -> np.ndarray:
    """float32 blocks [n, 32] -> fills `out` (IQ4_NL structured blocks) and returns it.

    ntry = -1 is ggml's quantize_row_iq4_nl_ref (one least-squares fit at d = max/-127: what the
    CPU backend writes into an iq4_nl KV cache); ntry = 7 is quantize_iq4_nl (llama-quantize:
    a scale search over 15 candidates, then a re-quantization with the chosen scale)."""
    w = xb * xb
    mx = first_absmax(xb)
    zero = np.abs(mx) < GROUP_MAX_EPS
    mx = np.where(zero, F32(1), mx).astype(F32)
    d = -mx / _KV[0] if ntry > 0 else mx / _KV[0]
    L = best_index((F32(1) / d)[:, None] * xb)
    sumqx, sumq2 = _fit(xb, w, L)
    d = sumqx / sumq2
    best = d * sumqx
    for itry in range(-ntry, ntry + 1):
        sqx, sq2 = _fit(xb, w, best_index(((F32(itry) + _KV[0]) / mx)[:, None] * xb))
        better = (sq2 > 0) & (sqx * sqx > best * sq2)
        d = np.where(better, sqx / sq2, d)
        best = np.where(better, d * sqx, best)
    d = np.where(zero, F32(0), d).astype(F32)
    if ntry > 0:
        idv = np.where(d != 0, F32(1) / np.where(d != 0, d, F32(1)), F32(0))
        L = best_index(idv[:, None] * xb)
    L = np.where(zero[:, None], 8, L).astype(np.uint8)      # ggml leaves these unset
    out["d"] = d
    out["qs"] = L[:, :16] | (L[:, 16:] << 4)
    return out


def quantize_iq4_nl(x: np.ndarray, ntry: int = -1) -> np.ndarray:
    """float32 [..., n] -> IQ4_NL structured blocks [n_blocks] (see quantize_iq4_nl_blocks)."""
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):   # 0/0 as in ggml
        return quantize_iq4_nl_blocks(*_blocks(x, GGMLType.IQ4_NL), ntry=ntry)
