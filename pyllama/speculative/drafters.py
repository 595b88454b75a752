"""Draft sources. Each proposes up to n_max tokens continuing `history` (prompt + emitted tokens,
the last of which, id_last, is not yet in the target cache)."""
from __future__ import annotations

import copy

import numpy as np

from ..generate import cached_tokens, decode_tokens, prepare_prompt


class Drafter:
    name = "none"

    def draft(self, history: list[int], n_max: int) -> list[int]:
        raise NotImplementedError

    def accept(self, n_accepted: int) -> None:
        """Told after verification how many drafted tokens the target accepted."""

    def rollback(self, n_keep: int) -> None:
        """Drop whatever this drafter cached past the first n_keep tokens of the sequence."""


class DraftModelDrafter(Drafter):
    """draft-simple: a draft model's context mirrors the target's sequence.

    Instead of re-decoding the verification batch (llama.cpp's TAG_SPEC_AVOID_DRAFT_REEVAL), the
    draft cache keeps what drafting already decoded: after a rollback it holds a prefix of the
    history, and only the missing tail (id_last, or the last accepted draft + id_last) is decoded
    at the start of the next round. Drafting: top-10 softmax at temperature 1, the top candidate
    with its renormalised probability p; stop when p < p_min (that token is dropped)."""
    name = "draft"
    TOP_K = 10

    def __init__(self, ctx, seq_id: int = 0, p_min: float = 0.0):
        self.ctx, self.seq_id, self.p_min = ctx, seq_id, p_min

    def sync(self, history: list[int]) -> None:
        """Make the draft cache hold history and leave logits for its last token."""
        n = prepare_prompt(self.ctx, history, self.seq_id)
        decode_tokens(self.ctx, history[n:], self.seq_id)

    def draft(self, history: list[int], n_max: int) -> list[int]:
        self.sync(history)
        out: list[int] = []
        while len(out) < n_max:
            tok, p = self._top(self.ctx.get_logits_ith(-1))
            if p < self.p_min:
                break
            out.append(tok)
            if len(out) < n_max:
                decode_tokens(self.ctx, [tok], self.seq_id)
        return out

    def _top(self, logits: np.ndarray) -> tuple[int, float]:
        k = self.TOP_K
        idx = np.argpartition(-logits, k)[:k]
        top = logits[idx].astype(np.float64)
        order = np.lexsort((idx, -top))           # by logit desc, then id asc
        top, idx = top[order], idx[order]
        p = np.exp(top - top[0])
        return int(idx[0]), float(p[0] / p.sum())

    def rollback(self, n_keep: int) -> None:
        self.ctx.memory.seq_rm(self.seq_id, n_keep, -1)
        cached_tokens(self.ctx, self.seq_id)


class NgramDrafter(Drafter):
    """ngram-simple / prompt lookup: find the most recent earlier occurrence of the last `size_n`
    tokens of the history and propose the (up to `size_m`) tokens that followed it."""
    name = "ngram-simple"

    def __init__(self, size_n: int = 12, size_m: int = 48, min_n: int = 2):
        self.size_n, self.size_m, self.min_n = size_n, size_m, min_n

    def draft(self, history: list[int], n_max: int) -> list[int]:
        h = np.asarray(history, dtype=np.int64)
        n_lim = min(self.size_m, n_max)
        for n in range(min(self.size_n, len(h) - 1), self.min_n - 1, -1):
            key = h[-n:]
            # candidate starts: positions s < len-n with h[s:s+n] == key, most recent first
            win = np.lib.stride_tricks.sliding_window_view(h[:-1], n)
            hits = np.flatnonzero((win == key).all(axis=1))
            if len(hits):
                s = int(hits[-1]) + n
                return [int(t) for t in h[s:s + n_lim]]
        return []


def truncated_model(model, n_layers: int):
    """A self-draft: the target's first n_layers and its output head, sharing the target's weights
    (no copy); a Context on it has its own small KV cache for those layers."""
    if not 0 < n_layers <= model.hparams.n_layer:
        raise ValueError(f"self-draft needs 1..{model.hparams.n_layer} layers, got {n_layers}")
    m = copy.copy(model)
    m.hparams = copy.copy(model.hparams)
    m.hparams.n_layer = n_layers
    m.hparams.is_swa = list(model.hparams.is_swa[:n_layers])
    m.hparams.n_ff = list(model.hparams.n_ff[:n_layers])
    m.weights = copy.copy(model.weights)
    m.weights.layers = model.weights.layers[:n_layers]
    return m
