"""Cost-aware draft length: draft only as many tokens as pay for their verification.

Verifying k drafts decodes a batch of k + 1 tokens, which costs c(k) one-token decodes (c(0) = 1;
on the CPU c(k) grows by ~0.3 per extra row, dominated by the output matrix). If each drafted token
is accepted with probability p once its predecessors were, a round emits on average
E(k) = 1 + p + ... + p^k = (1 - p^(k+1)) / (1 - p) tokens, so drafting k tokens runs at E(k) / c(k)
times the plain speed (E(k) / (c(k) + k d) when each drafted token costs d decodes: a draft model). DraftPolicy estimates p online per drafting situation (a key chosen by the
drafter: for the n-gram drafter the matched n-gram length and whether the previous draft was taken
whole) and picks the k <= the available draft that maximises E(k) / c(k), or 0 when no k beats
plain decoding. Verified tokens never depend on the draft, so the output is unchanged.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VerifyCost:
    """c(k): the cost of a (k + 1)-token verification batch relative to a 1-token decode.
    `table[k]` for the measured k, then `slope` per further token."""
    table: tuple = (1.0,)
    slope: float = 0.3
    t_decode: float = 0.0       # seconds of the 1-token decode it was measured against (0: model)
    measured: tuple = ()        # the raw measured c(k), k = 0..k_max (for reports)

    @classmethod
    def linear(cls, slope: float = 0.3) -> "VerifyCost":
        return cls((1.0,), slope)

    def __call__(self, k: int) -> float:
        if k < len(self.table):
            return self.table[k]
        return self.table[-1] + self.slope * (k - len(self.table) + 1)


def measure_verify_cost(model, k_max: int = 8, n_rep: int = 3, n_threads: int | None = None,
                        clock=time.process_time) -> VerifyCost:
    """Time decodes of 1..k_max + 1 tokens (best of n_rep, after a 32-token prefix, in a small
    throwaway context); return the least-squares line c(k) = 1 + slope k through them (single
    timings jump with the kernels' token groups and the machine's load; a line does not chase
    those steps), the raw ratios kept in .measured."""
    from ..context import Context
    from ..generate import decode_tokens
    kw = {"n_threads": n_threads} if n_threads else {}
    ctx = Context(model, n_ctx=128, n_batch=64, n_ubatch=64, **kw)
    toks = [int(t) for t in np.random.default_rng(0).integers(0, min(model.n_vocab, 1000),
                                                             32 + k_max + 1)]
    decode_tokens(ctx, toks[:32])
    best = []
    for n in range(1, k_max + 2):
        ts = []
        for _ in range(n_rep):
            t0 = clock()
            decode_tokens(ctx, toks[32:32 + n], logits_all=True)
            ts.append(clock() - t0)
            ctx.memory.seq_rm(0, 32, -1)
        best.append(min(ts))
    c = np.asarray(best) / best[0]
    k = np.arange(len(c))
    slope = float((k * (c - 1)).sum() / max(1, (k * k).sum()))   # c(k) = 1 + slope k, lsq
    return VerifyCost((1.0,), max(slope, 0.05), float(best[0]), tuple(float(x) for x in c))


def expected_tokens(p: float, k: int) -> float:
    """E(k): tokens emitted by a round drafting k tokens, each accepted with probability p."""
    return float(k + 1) if p >= 1.0 else (1.0 - p ** (k + 1)) / (1.0 - p)


class DraftPolicy:
    """Per-key acceptance estimates (decayed counts with a prior) -> the paying draft length.

    p(key) = (acc + prior_p * prior_n) / (trials + prior_n), where a draft of k tokens of which
    n_acc were accepted adds n_acc to acc and min(n_acc + 1, k) to trials (the positions the target
    actually tested). Every round all counts decay by `decay`, so a key whose drafts stopped paying
    drifts back to the prior and is probed again (a short draft costs little). The defaults
    (optimistic prior, fast decay) were chosen by replaying the greedy outputs of both bundled
    models on the three bench prompts against their measured cost curves."""

    def __init__(self, cost: VerifyCost | None = None, prior_p: float = 0.7,
                 prior_n: float = 1.0, decay: float = 0.9, margin: float = 0.02,
                 k_min: int = 0, draft_cost: float = 0.0, prior_fn=None):
        self.cost = cost or VerifyCost.linear()
        self.draft_cost = draft_cost    # per drafted token, in target decodes (a draft model)
        self.k_min = k_min          # --draft-min: shorter drafts are dropped, never pick them
        self.prior_p, self.prior_n, self.decay, self.margin = prior_p, prior_n, decay, margin
        self.prior_fn = prior_fn    # key -> prior_p of that key (a drafter's own priors)
        self.acc: dict = {}
        self.trials: dict = {}

    def p(self, key) -> float:
        a, t = self.acc.get(key, 0.0), self.trials.get(key, 0.0)
        prior = self.prior_p if self.prior_fn is None else self.prior_fn(key)
        return (a + prior * self.prior_n) / (t + self.prior_n)

    def length(self, key, k_max: int) -> int:
        """The k in k_min..k_max maximising E(k) / c(k); 0 unless it beats plain by `margin`."""
        p = self.p(key)
        best_k, best = 0, 1.0 + self.margin
        for k in range(max(1, self.k_min), k_max + 1):
            r = expected_tokens(p, k) / (self.cost(k) + k * self.draft_cost)
            if r > best:
                best_k, best = k, r
        return best_k

    def update(self, key, k: int, n_acc: int) -> None:
        """One round: decay every key, then count the draft of k tokens (n_acc accepted)."""
        for d in (self.acc, self.trials):
            for kk in d:
                d[kk] *= self.decay
        if k > 0:
            self.acc[key] = self.acc.get(key, 0.0) + n_acc
            self.trials[key] = self.trials.get(key, 0.0) + min(n_acc + 1, k)


# -- the policy as the tools' and the server's default -------------------------------------------
POLICIES = ("cost", "fixed")        # --spec-policy: cost-aware (default) or llama.cpp's fixed


def draft_cost_ratio(target_model, draft_model) -> float:
    """Cost of one draft-model decode in target decodes, estimated from the weight bytes each
    decode reads (one-token decoding is memory bound). A draft as large as the target costs 1, so
    drafting with it never pays: E(k) <= k + 1 < c(k) + k for every k >= 1."""
    t, d = target_model.size_bytes, draft_model.size_bytes
    return float(d) / float(t) if t > 0 else 1.0


class CostAware:
    """A drafter behind the cost-aware policy: its draft is cut to the length that pays for its
    verification (DraftPolicy.length, key = (drafter name, previous draft taken whole)); the cut
    draft is what the inner drafter is told about in accept(). Drafters with their own policy
    hook (NgramDrafter, DraftModelDrafter: the n-gram match length as key, a draft model decides
    before it decodes) get the policy directly instead (with_policy)."""

    def __init__(self, inner, policy: DraftPolicy):
        self.inner, self.policy, self.name = inner, policy, inner.name
        self._k, self._n_out, self._whole = 0, 0, False

    def begin(self, tokens) -> None:
        self.inner.begin(tokens)

    def rollback(self, n_keep: int) -> None:
        self.inner.rollback(n_keep)

    def draft(self, history, n_max: int):
        out = self.inner.draft(history, n_max)
        self._n_out = len(out)
        if not out:
            self._k = 0
            return out
        k = self._k = self.policy.length((self.name, self._whole), len(out))
        if k == 0:                          # nothing of it is verified: the inner is not told
            if hasattr(self.inner, "cut"):
                self.inner.cut(0)
            self.policy.update(None, 0, 0)
        return out[:k]

    def accept(self, n_accepted: int, n_drafted: int | None = None) -> None:
        k = self._k if n_drafted is None else min(self._k, n_drafted)
        self.policy.update((self.name, self._whole), k, n_accepted)
        if k > 0:
            self._whole = n_accepted == k
        # a cut draft accepted whole says nothing against its rest: ngram-map's per-value limit
        # (the last accepted length) is then left as it was instead of shrinking to the cut
        whole_cut = k < self._n_out and n_accepted == k
        if hasattr(self.inner, "cut"):
            self.inner.cut(k)
            self.inner.accept(n_accepted, k)
        elif not whole_cut:
            self.inner.accept(n_accepted, k)
        self._k = 0


def with_policy(drafter, cost: VerifyCost | None = None, k_min: int = 0,
                draft_cost: float = 0.0):
    """`drafter` (a drafter or a DrafterChain of them) with the cost-aware policy on each part:
    one DraftPolicy per drafter (a draft model's with its per-token cost `draft_cost`, in target
    decodes), k_min = --spec-draft-n-min. Returns the drafter to use (None stays None)."""
    from .drafters import DraftModelDrafter, DrafterChain, NgramDrafter
    if drafter is None:
        return None

    def one(d):
        if isinstance(d, DraftModelDrafter):
            d.policy = DraftPolicy(cost, k_min=k_min, draft_cost=draft_cost)
            return d
        if isinstance(d, NgramDrafter):
            d.policy = DraftPolicy(cost, k_min=k_min, prior_fn=NgramDrafter.prior_p)
            return d
        pol = DraftPolicy(cost, k_min=k_min)
        return CostAware(d, pol)
    if isinstance(drafter, DrafterChain):
        drafter.drafters = [one(d) for d in drafter.drafters]
        return drafter
    return one(drafter)
