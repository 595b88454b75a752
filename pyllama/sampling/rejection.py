"""Rejection sampling for speculative decoding over full-vocabulary distributions.

Terms: p = the target's final distribution (`SamplerChain.probs_full`), q = the draft's.
A drafted token t is *accepted* when u < min(1, p(t) / q(t)); on rejection the *recovered*
token is drawn from the residual max(0, p - q) renormalised. Together they emit exactly p.
Each function takes its uniform `u` explicitly, so callers decide which RNG draws are used.
"""
import numpy as np


def accept_draft(p_target: np.ndarray, p_draft: np.ndarray, token: int, u: float) -> bool:
    """u < min(1, p(t) / q(t)), written u * q(t) < p(t) so q(t) == 0 never divides."""
    p, q = float(p_target[token]), float(p_draft[token])
    return u * q < p if q > 0 else p > 0


def residual(p_target: np.ndarray, p_draft: np.ndarray) -> np.ndarray:
    """max(0, p - q) renormalised; p itself when the two distributions are equal."""
    r = np.maximum(np.asarray(p_target, np.float64) - np.asarray(p_draft, np.float64), 0.0)
    total = r.sum()
    if total <= 0.0:
        return np.asarray(p_target, np.float64) / np.sum(p_target, dtype=np.float64)
    return r / total


def sample_probs(probs: np.ndarray, u: float) -> int:
    """Inverse CDF in id order: the first token whose running sum exceeds u * total (a token
    with zero probability is never returned)."""
    run = np.cumsum(np.asarray(probs, np.float64))
    i = int(np.searchsorted(run, u * run[-1], side="right"))
    return min(i, len(run) - 1)
