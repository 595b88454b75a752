"""Embedding helpers shared by llama-embedding and llama-server (common/common.cpp).

normalize(v, embd_norm) is common_embd_normalize: -1 none, 0 max absolute (int16 range),
2 euclidean (the default), any other p: the p-norm (1 = taxicab). The sums run in double over
float32 terms and the scale is rounded to float32 once, as in llama.cpp.
similarity_cos is common_embd_similarity_cos.
"""
from __future__ import annotations

import numpy as np


def normalize(v, embd_norm: int = 2) -> np.ndarray:
    """float32[n] -> float32[n] scaled by llama.cpp's common_embd_normalize rule."""
    x = np.asarray(v, dtype=np.float32)
    if embd_norm == -1:
        total = 1.0
    elif embd_norm == 0:
        total = float(np.max(np.abs(x))) / 32760.0 if x.size else 0.0
    elif embd_norm == 2:
        total = float(np.sqrt(np.sum((x * x).astype(np.float64))))
    else:
        total = float(np.sum(np.abs(x).astype(np.float64) ** embd_norm)) ** (1.0 / embd_norm)
    scale = np.float32(1.0 / total) if total > 0.0 else np.float32(0.0)
    return x * scale


def similarity_cos(a, b) -> float:
    """Cosine similarity in double of float32 products; two zero vectors are similar (1.0)."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    s = float(np.sum((a * b).astype(np.float64)))
    s1 = float(np.sum((a * a).astype(np.float64)))
    s2 = float(np.sum((b * b).astype(np.float64)))
    if s1 == 0.0 or s2 == 0.0:
        return 1.0 if s1 == 0.0 and s2 == 0.0 else 0.0
    return float(np.float32(s / (np.sqrt(s1) * np.sqrt(s2))))
