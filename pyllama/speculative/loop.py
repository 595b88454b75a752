"""The draft -> verify -> accept -> rollback loop (llama.cpp examples/speculative/speculative.cpp, common/speculative.cpp `common_speculative_accept`).

Two acceptance modes:
- "chain" (llama-speculative-simple and the server): the target's full sampler chain is sampled at
  each verification row; a draft is accepted while the target's own sample equals it. Greedy is the
  longest matching prefix plus one target token. Output equals plain decoding for the same seed.
- "rejection" (llama-speculative with temperature > 0): drafts are sampled from the draft's
  full-vocabulary distribution q and accepted with probability min(1, p/q) against the target's
  full-vocabulary p; on rejection a token is drawn from normalise(max(0, p - q)). The output is
  distributed exactly as the target's.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from ..errors import ContextError
from ..generate import cached_tokens, decode_tokens, prepare_prompt
from .drafters import DraftModelDrafter, Drafter


@dataclass
class SpecParams:
    n_max: int = 3          # --spec-draft-n-max
    n_min: int = 0          # --spec-draft-n-min
    p_min: float = 0.0      # --spec-draft-p-min
    mode: str = "chain"     # "chain" or "rejection"
    # n_predict is checked at the end of a round only (llama.cpp's examples/lookup): the round's
    # accepted drafts are all emitted, so up to n_max tokens past n_predict
    round_stop: bool = False
    # llama.cpp numerics: verify each row with a one-token decode's arithmetic (speculative ==
    # plain decoding bit for bit); False: the batch arithmetic llama.cpp's own tools verify with
    # (llama-lookup reproduces llama.cpp's llama-lookup that way). No effect in the invariant one.
    one_row: bool = True


@dataclass
class SpecStats:
    n_prompt: int = 0
    n_predict: int = 0      # emitted tokens
    n_drafted: int = 0      # drafted tokens that were verified
    n_accept: int = 0       # accepted draft tokens
    n_rounds: int = 0
    t_prompt: float = 0.0
    t_gen: float = 0.0
    t_draft: float = 0.0
    accepted_per_pos: list = field(default_factory=list)

    @property
    def accept_rate(self) -> float:
        return self.n_accept / self.n_drafted if self.n_drafted else 0.0


def _budget(ctx, seq_id: int, n_max: int, n_left: int) -> int:
    n_past = len(cached_tokens(ctx, seq_id))
    room = ctx.n_ctx_seq - n_past - 2
    lim = min(n_max, room, ctx.n_batch - 1, ctx.n_ubatch - 1)
    if n_left >= 0:
        lim = min(lim, n_left - 1)
    return max(0, lim)


def speculative_generate(ctx, sampler, prompt: list[int], drafter: Drafter,
                         params: SpecParams | None = None, n_predict: int = -1,
                         seq_id: int = 0, stop_tokens=None, stats: SpecStats | None = None,
                         draft_sampler=None) -> Iterator[int]:
    """Yield tokens continuing prompt, verified in batches of [id_last, d1..dN]."""
    p = params or SpecParams()
    st = stats if stats is not None else SpecStats()
    stops = set(ctx.model.vocab.eog_ids if stop_tokens is None else stop_tokens)
    if not prompt:
        raise ContextError("empty prompt")
    if p.mode == "rejection":
        if not isinstance(drafter, DraftModelDrafter):
            raise ValueError("rejection sampling needs a draft model")
        if draft_sampler is None:
            draft_sampler = make_draft_sampler(sampler, drafter.ctx.model)
    t0 = time.perf_counter()
    n = prepare_prompt(ctx, prompt, seq_id)
    decode_tokens(ctx, prompt[n:], seq_id)
    st.n_prompt += len(prompt)
    st.t_prompt += time.perf_counter() - t0
    t0 = time.perf_counter()
    history = list(prompt)
    drafter.begin(history)
    tok = int(sampler.sample(ctx.get_logits_ith(-1)))
    sampler.accept(tok)
    n_gen = 1
    try:
        while True:
            history.append(tok)
            st.n_predict += 1
            yield tok
            if tok in stops or (n_predict >= 0 and n_gen >= n_predict):
                return
            n_left = -1 if n_predict < 0 or p.round_stop else n_predict - n_gen
            if len(cached_tokens(ctx, seq_id)) + 1 >= ctx.n_ctx_seq:
                return
            emitted = _round(ctx, sampler, history, drafter, p, st, seq_id, stops, n_left,
                             draft_sampler)
            for t in emitted[:-1]:
                history.append(t)
                st.n_predict += 1
                n_gen += 1
                yield t
                if t in stops or (n_predict >= 0 and n_gen >= n_predict and not p.round_stop):
                    return
            tok = emitted[-1]
            n_gen += 1
    finally:
        st.t_gen += time.perf_counter() - t0


def _round(ctx, sampler, history, drafter, p: SpecParams, st: SpecStats, seq_id, stops, n_left,
           draft_sampler) -> list[int]:
    """One round: draft, verify [id_last, drafts] in one batch, accept, roll back. Returns the
    emitted tokens (accepted drafts + one target token, the next id_last)."""
    id_last = history[-1]
    n_past = len(cached_tokens(ctx, seq_id))          # = position of id_last
    budget = _budget(ctx, seq_id, p.n_max, n_left)
    t0 = time.perf_counter()
    q_rows = None
    if budget <= 0:
        drafts = []
    elif p.mode == "rejection":
        drafts, q_rows = _draft_sampled(drafter, history, budget, draft_sampler,
                                        ctx.model.n_vocab)
    else:
        drafts = drafter.draft(history, budget)
    if len(drafts) < p.n_min:
        drafts = []
    st.t_draft += time.perf_counter() - t0
    # one_row: in the llama.cpp numerics each row gets a one-token decode's arithmetic
    decode_tokens(ctx, [id_last] + drafts, seq_id, logits_all=True, one_row=p.one_row)
    if p.mode == "rejection" and drafts:
        out = _accept_rejection(ctx, sampler, drafts, q_rows)
    else:
        out = _accept_chain(ctx, sampler, drafts, stops)
    n_acc = len(out) - 1
    st.n_rounds += 1
    st.n_drafted += len(drafts)
    st.n_accept += n_acc
    if drafts:
        while len(st.accepted_per_pos) < len(drafts):
            st.accepted_per_pos.append(0)
        for i in range(n_acc):
            st.accepted_per_pos[i] += 1
    ctx.memory.seq_rm(seq_id, n_past + 1 + n_acc, -1)
    cached_tokens(ctx, seq_id)
    drafter.rollback(n_past + 1 + n_acc)
    drafter.accept(n_acc, len(drafts))
    return out


def _accept_chain(ctx, sampler, drafts, stops) -> list[int]:
    """common_sampler_sample_and_accept_n: sample the target chain at each row."""
    out = []
    for i in range(len(drafts) + 1):
        t = int(sampler.sample(ctx.get_logits_ith(i)))
        sampler.accept(t)
        out.append(t)
        if i == len(drafts) or t != drafts[i] or (t in stops and i + 1 < len(drafts)):
            break
    return out


def _draft_sampled(drafter: DraftModelDrafter, history, n_max, draft_sampler, n_vocab):
    """Sample up to n_max drafts from the draft model's full distribution q (its own chain with
    the target's parameters and a seed of its own; any q keeps the output exact)."""
    drafter.sync(history)
    ds = draft_sampler
    toks, qs = [], []
    for i in range(n_max):
        q = np.zeros(n_vocab, dtype=np.float64)
        qd = ds.probs_full(drafter.ctx.get_logits_ith(-1))
        m = min(n_vocab, len(qd))
        q[:m] = qd[:m]
        t = _choice(q, ds.draw_uniform())
        toks.append(t)
        qs.append(q)
        if i + 1 < n_max:
            decode_tokens(drafter.ctx, [t], drafter.seq_id)
    return toks, qs


def make_draft_sampler(sampler, draft_model):
    """A chain for drafting in "rejection" mode: the target's parameters, a derived seed."""
    from ..sampling import SamplerChain
    seed = (int(getattr(sampler, "seed", 0)) * 2654435761 + 1) & 0xFFFFFFFF
    return SamplerChain(sampler.params.replace(seed=seed), draft_model.n_vocab)


def _accept_rejection(ctx, sampler, drafts, q_rows) -> list[int]:
    """Speculative sampling against the target chain's full distributions at each row."""
    p_rows = [sampler.probs_full(ctx.get_logits_ith(i)) for i in range(len(drafts) + 1)]
    out = accept_rejection(p_rows, q_rows, drafts, sampler.draw_uniform)
    for t in out:
        sampler.accept(t)
    return out


def accept_rejection(p_rows, q_rows, drafts, draw) -> list[int]:
    """Accept d_i with probability min(1, p_i(d)/q_i(d)); at the first rejection emit a draw
    from normalise(max(0, p_i - q_i)); if all are accepted, a bonus draw from p_N. `draw()`
    returns a uniform in [0, 1). The emitted tokens are distributed exactly as the target's."""
    out = []
    for i, d in enumerate(drafts):
        p, q = p_rows[i], q_rows[i]
        if draw() * q[d] <= p[d]:
            out.append(int(d))
            continue
        resid = np.maximum(p.astype(np.float64) - q, 0.0)
        out.append(_choice(resid if resid.sum() > 0 else p, draw()))
        return out
    out.append(_choice(p_rows[len(drafts)], draw()))
    return out


def _choice(p: np.ndarray, u: float) -> int:
    """Inverse-CDF draw from the (unnormalised) distribution p with the uniform u in [0, 1)."""
    c = np.cumsum(p, dtype=np.float64)
    return int(min(np.searchsorted(c, u * c[-1], side="right"), len(p) - 1))
