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

    def accept(self, n_accepted: int, n_drafted: int | None = None) -> None:
        """Told after verification how many of the n_drafted tokens verified (None: all this
        drafter proposed) the target accepted."""

    def rollback(self, n_keep: int) -> None:
        """Drop whatever this drafter cached past the first n_keep tokens of the sequence."""

    def begin(self, tokens: list[int]) -> None:
        """A generation starts on a sequence holding `tokens` (common_speculative_begin)."""


class DrafterChain(Drafter):
    """Several drafters at once, as common_speculative_draft combines them: the first (in the
    given priority order) that proposes a non-empty draft wins the round; each has its own
    length limit. The verification result goes to the drafter that produced the last non-empty
    draft (common_speculative_accept's impl_last, kept across rounds that drafted nothing)."""

    def __init__(self, drafters: list, limits: list | None = None):
        self.drafters = list(drafters)
        self.limits = list(limits) if limits is not None else [None] * len(self.drafters)
        self.name = ",".join(d.name for d in self.drafters)
        self.last = None

    def begin(self, tokens: list[int]) -> None:
        for d in self.drafters:
            d.begin(tokens)

    def draft(self, history: list[int], n_max: int) -> list[int]:
        for d, lim in zip(self.drafters, self.limits):
            out = d.draft(history, n_max if lim is None else min(n_max, lim))
            if out:
                self.last = d
                return out
        return []

    def accept(self, n_accepted: int, n_drafted: int | None = None) -> None:
        if self.last is not None:
            self.last.accept(n_accepted, n_drafted)

    def rollback(self, n_keep: int) -> None:
        for d in self.drafters:
            d.rollback(n_keep)


class DraftModelDrafter(Drafter):
    """draft-simple: a draft model's context mirrors the target's sequence.

    Instead of re-decoding the verification batch (llama.cpp's TAG_SPEC_AVOID_DRAFT_REEVAL), the
    draft cache keeps what drafting already decoded: after a rollback it holds a prefix of the
    history, and only the missing tail (id_last, or the last accepted draft + id_last) is decoded
    at the start of the next round. Drafting: top-10 softmax at temperature 1, the top candidate
    with its renormalised probability p; stop when p < p_min (that token is dropped)."""
    name = "draft"
    TOP_K = 10

    def __init__(self, ctx, seq_id: int = 0, p_min: float = 0.0, policy=None):
        self.ctx, self.seq_id, self.p_min = ctx, seq_id, p_min
        self.policy = policy        # DraftPolicy (with its draft_cost): how many to draft
        self._k = 0

    def sync(self, history: list[int]) -> None:
        """Make the draft cache hold history and leave logits for its last token."""
        n = prepare_prompt(self.ctx, history, self.seq_id)
        decode_tokens(self.ctx, history[n:], self.seq_id)

    def draft(self, history: list[int], n_max: int) -> list[int]:
        if self.policy is not None:
            # a skipped round decodes nothing here: the next sync catches up in one batch
            n_max = self._k = self.policy.length(self.name, n_max)
            if n_max == 0:
                return []
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

    def accept(self, n_accepted: int, n_drafted: int | None = None) -> None:
        if self.policy is not None:
            k = self._k if n_drafted is None else min(self._k, n_drafted)
            self.policy.update(self.name, k, n_accepted)
            self._k = 0


class NgramDrafter(Drafter):
    """ngram-simple / prompt lookup: find the most recent earlier occurrence of the last `size_n`
    tokens of the history (backing off to `min_n`) and propose the (up to `size_m`) tokens that
    followed it (when the match runs into the end of the history, the copy continues through its
    own tokens: a repeating pattern is drafted for size_m tokens).

    With a `policy` (DraftPolicy) the draft is cut to the length that pays for its verification,
    given the acceptance seen so far for the same situation: key (matched length, capped at
    `KEY_N_CAP`; whether the previous draft was accepted whole).

    `min_hits` (--spec-ngram-simple-min-hits, "minimum hits at ngram/mgram lookup for mgram to be
    proposed" in llama.cpp's common/common.h): an n-gram length is used only when it occurred at
    least min_hits times earlier in the history. llama.cpp 0c1e570's common_ngram_simple_draft
    never reads it (the default 1 is what it does).

    Copy pointer: a verified draft copied from history position s, n_acc of it accepted and then
    the target's own token, leaves the copy at s + n_acc + 1. When the longest matched n-gram
    occurs right before that position (the target's token went on with the copy: a draft taken
    whole, or a round the policy left undrafted), that occurrence wins over the most recent one,
    so the drafter keeps following the text being re-emitted instead of jumping to another place
    the same n-gram appeared (replaying the bench outputs of both bundled models: never fewer
    tokens per verification cost, 8-9 % more on Gemma's code and prose)."""
    name = "ngram-simple"
    KEY_N_CAP = 8

    @staticmethod
    def prior_p(key) -> float:
        """The policy's prior acceptance of a situation (with_policy's default): a 1- or 2-gram
        match predicts little (0.4), a 3-gram more (0.6), longer ones 0.7 (DraftPolicy's
        default). Replaying the bench outputs of both bundled models: on prose without
        repetition the probes that find nothing cost half as much (0.984 -> 0.992 of plain
        speed at c(k) = 1 + 0.3 k), Qwen's code 2-3 % faster, the rest within 1-3 %."""
        n = key[0]
        return 0.4 if n <= 2 else 0.6 if n == 3 else 0.7

    def __init__(self, size_n: int = 12, size_m: int = 48, min_n: int = 2, policy=None,
                 min_hits: int = 1):
        self.size_n, self.size_m, self.min_n = size_n, size_m, min_n
        self.min_hits = max(1, min_hits)
        self.policy = policy
        self._last = None           # (key, k) of the last draft, for accept()
        self._whole = False         # the previous draft was accepted whole
        self._src = None            # history position the last draft was copied from
        self._ptr = None            # where that copy goes on after the last verification

    def begin(self, tokens: list[int]) -> None:
        self._src = self._ptr = None

    def rollback(self, n_keep: int) -> None:
        if self._ptr is not None and self._ptr >= n_keep:
            self._ptr = None

    def lookup(self, history: list[int], n_max: int) -> tuple[int, list[int]]:
        """(matched n-gram length, the up to n_max tokens that followed the match); (0, []).
        The longest n in min_n..size_n whose last-n-token key occurred at least min_hits times
        earlier (the most recent occurrence, or the copy in progress); found from the earlier
        positions of the last token, extended backwards, instead of one window search per n."""
        h = np.asarray(history, dtype=np.int64)
        L = len(h)
        n_lim = min(self.size_m, n_max)
        self._src = None
        n_top, n_min = min(self.size_n, L - 1), max(1, self.min_n)
        if n_top < n_min:
            return 0, []
        j = np.flatnonzero(h[:L - 1] == h[L - 1])      # earlier positions of the last token
        if len(j) < self.min_hits:
            return 0, []
        ln = np.ones(len(j), dtype=np.int64)            # matched length ending at each j
        alive = np.ones(len(j), dtype=bool)
        for t in range(1, n_top):
            jt = j - t
            ok = alive & (jt >= 0)
            ok[ok] = h[jt[ok]] == h[L - 1 - t]
            alive = ok
            if not alive.any():
                break
            ln += alive
        n = int(np.sort(ln)[::-1][self.min_hits - 1])  # longest n with min_hits occurrences
        if n < n_min:
            return 0, []
        hits = j[ln >= n]                               # the key's last token, ascending
        src = int(hits[-1]) + 1
        if self._ptr is not None and src != self._ptr and np.any(hits == self._ptr - 1):
            src = self._ptr                             # the copy in progress goes on
        self._src = src
        return n, _copy_from(h, src, n_lim)

    def draft(self, history: list[int], n_max: int) -> list[int]:
        n, out = self.lookup(history, n_max)
        if self.policy is None or not out:
            self._last = None
            return out
        key = (min(n, self.KEY_N_CAP), self._whole)
        k = self.policy.length(key, len(out))
        self._last = (key, k)
        return out[:k]

    def accept(self, n_accepted: int, n_drafted: int | None = None) -> None:
        # the source's copy goes on past the accepted drafts and the target's token
        self._ptr = None if self._src is None else self._src + n_accepted + 1
        self._src = None
        if self.policy is None:
            return
        key, k = self._last if self._last else (None, 0)
        k = k if n_drafted is None else min(k, n_drafted)
        self.policy.update(key, k, n_accepted)
        if k > 0:
            self._whole = n_accepted == k
        self._last = None


def _copy_from(h: np.ndarray, s: int, n: int) -> list[int]:
    """n tokens copied from h[s:], continuing into the copy itself when the match overlaps the
    end (a periodic history drafts whole periods, not just the tokens left before the end)."""
    out = [int(t) for t in h[s:s + n]]       # min(n, period) tokens
    period = len(h) - s
    while len(out) < n:
        out.append(out[len(out) - period])
    return out


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
