"""SWA predicates and cache geometry (llama.cpp src/llama-hparams.h `is_masked_swa`, src/llama-kv-cache-iswa.cpp constructor; --swa-extra: docs/architecture.md)."""
from __future__ import annotations

import numpy as np

from ..errors import ContextError

SWA_NONE, SWA_STANDARD, SWA_CHUNKED, SWA_SYMMETRIC = 0, 1, 2, 3
LLAMA_MAX_SEQ = 256


def is_masked_swa(n_swa: int, swa_type: int, p0, p1):
    """True where key position p0 is outside the window of query position p1 (scalars or arrays)."""
    p0 = np.asarray(p0)
    p1 = np.asarray(p1)
    if swa_type == SWA_NONE:
        return np.zeros(np.broadcast(p0, p1).shape, dtype=bool)
    if swa_type == SWA_STANDARD:
        return p1 - p0 >= n_swa
    if swa_type == SWA_CHUNKED:
        return p0 < (p1 // n_swa) * n_swa
    if swa_type == SWA_SYMMETRIC:
        half = n_swa // 2
        return (p1 - p0 < -half) | (p1 - p0 > half)
    raise ContextError(f"unknown swa_type {swa_type}")


def is_expired(n_swa: int, swa_extra: int, swa_type: int, p0, p1):
    """True where key position p0 may be dropped by a sequence whose next query is at p1 and that
    keeps swa_extra positions for rollback (--swa-extra): p0 is masked for every query position
    from p1 - swa_extra to p1. Sliding window: is_masked_swa with window n_swa + swa_extra (the
    same); chunked: masked for p1 - swa_extra in the grid of n_swa (a window n_swa + swa_extra
    would move the chunk boundaries); swa_extra 0: is_masked_swa itself, llama.cpp's test."""
    if swa_type == SWA_CHUNKED:
        return is_masked_swa(n_swa, swa_type, p0, np.asarray(p1) - swa_extra)
    return is_masked_swa(n_swa + swa_extra, swa_type, p0, p1)


def window_start(n_swa: int, swa_type: int, p1: np.ndarray) -> np.ndarray:
    """Smallest key position not masked for a causal query at p1 (all masks are intervals)."""
    p1 = np.asarray(p1, dtype=np.int64)
    if swa_type == SWA_NONE:
        return np.full(p1.shape, np.iinfo(np.int32).min, dtype=np.int64)
    if swa_type == SWA_STANDARD:
        return p1 - n_swa + 1
    if swa_type == SWA_CHUNKED:
        return (p1 // n_swa) * n_swa
    if swa_type == SWA_SYMMETRIC:
        return p1 - n_swa // 2
    raise ContextError(f"unknown swa_type {swa_type}")


def pad256(x: int) -> int:
    return (x + 255) // 256 * 256


def ctx_geometry(n_ctx: int, n_seq_max: int, kv_unified: bool) -> tuple[int, int, int]:
    """(n_ctx, n_ctx_seq, n_stream) as llama_context computes them: n_ctx padded to 256;
    non-unified: n_ctx_seq = pad256(n_ctx // n_seq_max), n_ctx = n_ctx_seq * n_seq_max."""
    if not 1 <= n_seq_max <= LLAMA_MAX_SEQ:
        raise ContextError(f"n_seq_max must be in [1, {LLAMA_MAX_SEQ}], got {n_seq_max}")
    n_ctx = pad256(n_ctx)
    if kv_unified:
        return n_ctx, n_ctx, 1
    n_ctx_seq = pad256(n_ctx // n_seq_max)
    if n_ctx_seq == 0:
        raise ContextError("n_ctx_seq == 0")
    return n_ctx_seq * n_seq_max, n_ctx_seq, n_seq_max


def swa_cells(n_ctx_seq, n_seq_max, n_ubatch, n_swa, swa_full, swa_extra, kv_unified) -> int:
    """SWA cache cells per stream: pad256(min(n_ctx_seq, (n_swa + extra) * k + n_ubatch))."""
    if swa_full:
        return n_ctx_seq
    k = n_seq_max if kv_unified else 1
    return pad256(min(n_ctx_seq, (n_swa + swa_extra) * k + n_ubatch))


def cache_sizes(n_ctx, n_seq_max, n_ubatch, n_swa, swa_full, swa_extra=0, kv_unified=False) -> dict:
    """Geometry of the memory: n_ctx (rounded), n_ctx_seq, n_stream, base cells, swa cells (per
    stream; 0 when n_swa == 0) and can_shift (iSWA: sizes equal)."""
    n_ctx, n_ctx_seq, n_stream = ctx_geometry(n_ctx, n_seq_max, kv_unified)
    swa = swa_cells(n_ctx_seq, n_seq_max, n_ubatch, n_swa, swa_full, swa_extra, kv_unified) if n_swa else 0
    return {"n_ctx": n_ctx, "n_ctx_seq": n_ctx_seq, "n_stream": n_stream, "base_cells": n_ctx_seq,
            "swa_cells": swa, "can_shift": swa in (0, n_ctx_seq)}
