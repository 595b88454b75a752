"""Batches: validation and splitting into ubatches (llama.cpp src/llama-batch.cpp `llama_batch_allocr::init`, `split_*`).

A `Batch` is what the user hands to `Context.decode` (like `llama_batch`). `validate` checks it
against the vocabulary and the memory and fills missing positions; `split_simple` / `split_equal`
cut it into `UBatch`es of at most `n_ubatch` tokens. Nothing here touches the KV cache.
"""
from __future__ import annotations

import numpy as np

from .errors import ContextError

LLAMA_MAX_SEQ = 256


class Batch:
    """tokens int32[n]; pos int32[n] or None (filled by `validate` from the memory each time);
    seq_ids list[list[int]] | list[int] | None (-> all 0); logits bool[n] or None (-> last only)."""

    def __init__(self, tokens, pos=None, seq_ids=None, logits=None):
        self.tokens = np.asarray(tokens, dtype=np.int32).reshape(-1)
        n = len(self.tokens)
        self.auto_pos = pos is None
        self.pos = None if pos is None else np.asarray(pos, dtype=np.int32).reshape(-1)
        self.seq_ids = _norm_seq_ids(seq_ids, n)
        if logits is None:
            self.logits = np.zeros(n, dtype=bool)
            if n:
                self.logits[-1] = True
        else:
            self.logits = np.asarray(logits, dtype=bool).reshape(-1)

    @classmethod
    def one(cls, token, pos, seq_id=0, logits=True) -> "Batch":
        return cls([token], [pos], [[seq_id]], [logits])

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    def __len__(self):
        return len(self.tokens)


def _norm_seq_ids(seq_ids, n):
    if seq_ids is None:
        return [(0,)] * n
    out = []
    for s in seq_ids:
        if isinstance(s, (int, np.integer)):
            out.append((int(s),))
        else:
            out.append(tuple(int(x) for x in s))
    return out


class UBatch:
    """One ubatch: idx int32[n] (indices into the batch), tokens int32[n], pos int32[n],
    seq_ids list of tuples, output bool[n]. `n_seqs` seq sets of `n_seq_tokens` tokens each when
    `equal_seqs` (split_equal: tokens grouped by seq set), else n_seqs = 1."""

    def __init__(self, batch: Batch, idx, equal_seqs=False, n_seqs=1):
        self.idx = np.asarray(idx, dtype=np.int32)
        self.tokens = batch.tokens[self.idx]
        self.pos = batch.pos[self.idx]
        self.seq_ids = [batch.seq_ids[i] for i in self.idx]
        self.output = batch.logits[self.idx]
        self.equal_seqs = equal_seqs
        self.n_seqs = n_seqs
        self.seq_id_unq = sorted({s for ids in self.seq_ids for s in ids})

    @property
    def n_tokens(self) -> int:
        return len(self.idx)

    @property
    def n_seq_tokens(self) -> int:
        return self.n_tokens // self.n_seqs

    @property
    def n_outputs(self) -> int:
        return int(self.output.sum())

    def __repr__(self):
        return f"UBatch(n_tokens={self.n_tokens}, seqs={self.seq_id_unq}, pos={self.pos.min()}..{self.pos.max()})"


# -- validation ---------------------------------------------------------------------------------

def validate(batch: Batch, n_vocab: int, n_seq_max: int, memory=None) -> tuple[int, str]:
    """(0, "") if the batch may be decoded, else (-1, reason). Fills `batch.pos` when it was None.
    `memory` answers seq_pos_min/seq_pos_max (or is None). Never mutates the memory."""
    for check in (_check_shape, _check_ids):
        err = check(batch, n_vocab, n_seq_max)
        if err:
            return -1, err
    if batch.auto_pos:
        batch.pos = _auto_pos(batch, memory)
    for check in (_check_memory_pos, _check_contiguous, _check_order, _check_coupled):
        err = check(batch, memory)
        if err:
            return -1, err
    return 0, ""


def _check_shape(batch, n_vocab, n_seq_max):
    n = batch.n_tokens
    if n == 0:
        return "n_tokens == 0"
    if len(batch.seq_ids) != n or len(batch.logits) != n:
        return "seq_ids/logits length differs from tokens"
    if batch.pos is not None and len(batch.pos) != n:
        return "pos length differs from tokens"
    return ""


def _check_ids(batch, n_vocab, n_seq_max):
    bad = np.flatnonzero((batch.tokens < 0) | (batch.tokens >= n_vocab))
    if len(bad):
        return f"invalid token[{bad[0]}] = {batch.tokens[bad[0]]}"
    for i, ids in enumerate(batch.seq_ids):
        if not ids:
            return f"token {i} has no seq_id"
        for s in ids:
            if s < 0 or s >= n_seq_max:
                return f"invalid seq_id[{i}] = {s} >= n_seq_max = {n_seq_max}"
    return ""


def _auto_pos(batch, memory):
    """llama_batch_compat: seq_pos_max(first seq) + 1, +2, ... advancing every seq of the token."""
    p0 = {}
    pos = np.empty(batch.n_tokens, dtype=np.int32)
    for i, ids in enumerate(batch.seq_ids):
        s = ids[0]
        if s not in p0:
            p0[s] = memory.seq_pos_max(s) + 1 if memory is not None else 0
        pos[i] = p0[s]
        for t in ids:
            p0[t] = pos[i] + 1
    return pos


def _seq_positions(batch):
    out: dict[int, list[int]] = {}
    for p, ids in zip(batch.pos.tolist(), batch.seq_ids):
        for s in ids:
            out.setdefault(s, []).append(p)
    return out


def _check_memory_pos(batch, memory):
    if memory is None:
        return ""
    for s, ps in _seq_positions(batch).items():
        x = memory.seq_pos_max(s)
        if x >= 0 and min(ps) != x + 1:
            return (f"sequence {s}: last position in memory X = {x}, batch starts at Y = {min(ps)}; "
                    f"it is required that Y = X + 1")
    return ""


def _check_contiguous(batch, memory):
    for s, ps in _seq_positions(batch).items():
        if max(ps) - min(ps) + 1 > len(set(ps)):
            return f"sequence {s} positions are not continuous"
    return ""


def _check_order(batch, memory):
    last: dict[int, int] = {}
    for p, ids in zip(batch.pos.tolist(), batch.seq_ids):
        for s in ids:
            if p < last.get(s, -1):
                return f"sequence {s} positions are decreasing (not allowed)"
            last[s] = p
    return ""


def _check_coupled(batch, memory):
    if memory is None:
        return ""
    for ids in batch.seq_ids:
        s0 = ids[0]
        for s1 in ids[1:]:
            if (memory.seq_pos_min(s0) != memory.seq_pos_min(s1)
                    or memory.seq_pos_max(s0) != memory.seq_pos_max(s1)):
                return f"sequence {s1} is coupled to {s0} in the input batch, but have diverged"
    return ""


def has_coupled(batch: Batch) -> bool:
    return any(len(ids) > 1 for ids in batch.seq_ids)


# -- splitting ----------------------------------------------------------------------------------

def split_simple(batch: Batch, n_ubatch: int) -> list[UBatch]:
    """Consecutive runs of at most n_ubatch tokens in batch order, any mix of sequences."""
    n = batch.n_tokens
    return [UBatch(batch, np.arange(i, min(i + n_ubatch, n))) for i in range(0, n, n_ubatch)]


def split_equal(batch: Batch, n_ubatch: int, sequential: bool) -> list[UBatch]:
    """Ubatches of non-overlapping sequence sets taking the same number of tokens from each set
    (round-robin), tokens grouped by set. sequential: only consecutive seq ids s, s+1, ... per
    ubatch, and coupled sequences are an error (ContextError)."""
    if sequential and has_coupled(batch):
        raise ContextError("sequential split is not supported when there are coupled sequences "
                           "in the input batch (you may need to use the -kvu flag)")
    if len(set(batch.seq_ids)) == 1:        # one sequence set: consecutive runs of n_ubatch
        n = batch.n_tokens
        return [UBatch(batch, np.arange(i, min(i + n_ubatch, n)), equal_seqs=True)
                for i in range(0, n, n_ubatch)]
    used = np.zeros(batch.n_tokens, dtype=bool)
    sets = [frozenset(ids) for ids in batch.seq_ids]
    out = []
    while not used.all():
        out.append(_equal_one(batch, sets, used, n_ubatch, sequential))
    return out


def _pick_sets(batch, sets, used, n_ubatch, sequential):
    cur: list[frozenset] = []
    last = -1
    for i in np.flatnonzero(~used):
        if any(c & sets[i] for c in cur):
            continue
        if sequential and cur and batch.seq_ids[i][0] != last + 1:
            continue
        cur.append(sets[i])
        last = batch.seq_ids[i][0]
        if len(cur) >= n_ubatch:
            break
    return cur


def _equal_one(batch, sets, used, n_ubatch, sequential):
    cur = _pick_sets(batch, sets, used, n_ubatch, sequential)
    members = [[i for i in np.flatnonzero(~used) if sets[i] == c] for c in cur]
    n_s = len(cur)
    take = 0
    while all(take < len(m) for m in members):
        take += 1
        if (take + 1) * n_s > n_ubatch:
            break
    idx = [i for m in members for i in m[:take]]
    used[idx] = True
    return UBatch(batch, idx, equal_seqs=True, n_seqs=n_s)
