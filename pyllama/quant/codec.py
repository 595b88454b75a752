"""The two entry points: `quantize(x, type)` and `dequantize(raw, type, shape)`."""
from __future__ import annotations

import numpy as np

from ..gguf import GGMLType
from . import kquants
from . import legacy as q
from .iq4nl import quantize_iq4_nl
from .layout import BLOCK_LAYOUT
from .reference import dequantize

__all__ = ["quantize", "dequantize", "QUANTIZE_TYPES", "DEQUANTIZE_TYPES"]

_BLOCKED = {
    GGMLType.Q4_0: q._quant_q4_0, GGMLType.Q4_1: q._quant_q4_1, GGMLType.Q5_0: q._quant_q5_0,
    GGMLType.Q5_1: q._quant_q5_1, GGMLType.Q8_0: q._quant_q8_0, GGMLType.Q8_1: q._quant_q8_1,
    GGMLType.Q8_K: q._quant_q8_k, GGMLType.Q2_K: kquants.quantize_q2_k,
    GGMLType.Q3_K: kquants.quantize_q3_k, GGMLType.Q4_K: kquants.quantize_q4_k,
    GGMLType.Q5_K: kquants.quantize_q5_k, GGMLType.Q6_K: kquants.quantize_q6_k,
    GGMLType.IQ4_NL: quantize_iq4_nl,
}
QUANTIZE_TYPES = frozenset(_BLOCKED) | {GGMLType.F32, GGMLType.F16, GGMLType.BF16}
DEQUANTIZE_TYPES = frozenset(BLOCK_LAYOUT)


def _elementwise(x: np.ndarray, qtype: GGMLType) -> np.ndarray:
    if qtype == GGMLType.F32:
        return x.astype(np.float32)
    if qtype == GGMLType.F16:
        with np.errstate(over="ignore"):    # beyond 65504 -> inf, as GGML_FP32_TO_FP16
            return x.astype(np.float16)
    return q.f32_to_bf16(x)


def quantize(x: np.ndarray, qtype) -> np.ndarray:
    """float32 x [..., n] -> uint8 [..., row_bytes]: ggml's reference quantizer for `qtype`."""
    qtype = GGMLType(qtype)
    if qtype not in QUANTIZE_TYPES:
        raise NotImplementedError(f"quantize: unsupported type {qtype.name}")
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 0:
        raise ValueError("quantize needs at least one dimension")
    row_bytes = BLOCK_LAYOUT[qtype].row_bytes(x.shape[-1])
    if qtype in _BLOCKED:
        # float32 overflow to inf / inf-inf in the scale searches happen in ggml's C too
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            blocks = _BLOCKED[qtype](x)
    else:
        blocks = _elementwise(x, qtype)
    return np.ascontiguousarray(blocks).view(np.uint8).reshape(x.shape[:-1] + (row_bytes,))
