"""SamplerChain: llama.cpp's common_sampler (common/sampling.cpp) over its llama_sampler chain.

Chain built from SamplerParams like common_sampler_init:
  logit-bias (user biases, plus -inf on every EOG token with ignore_eos)
  mirostat == 0: the `samplers` list in order, then `dist` (or `adaptive-p` if listed)
  mirostat == 1: temp -> mirostat v1;  mirostat == 2: temp -> mirostat v2.
`sample()` runs the chain and draws exactly one uniform from the chain's RNG in the selecting
step, or uses the `u` it is given instead. It does not accept: call `accept(token)` to update the
history. With a grammar (params.grammar) it is common_sampler_sample: the chain is sampled
first; only when the grammar rejects that token are the logits masked by the grammar and the
chain sampled again (a second draw); `accept` advances the grammar on generated tokens.
The RNG is numpy's MT19937 seeded and read like llama.cpp's std::mt19937 (rng.py), so
a seed gives llama.cpp's uniforms; 0xFFFFFFFF or -1 picks a random seed. XTC has its own
generator with the same seed, as in llama.cpp, so `dist` still makes one draw per sample. Like
llama.cpp, mirostat and adaptive-p (std::discrete_distribution) draw nothing when a single
candidate is left; the number of draws is always a function of the chain state and the logits,
so replaying the same logits in the same order replays the same tokens.
"""
import random
from collections import deque

import numpy as np

from pyllama.sampling.candidates import Candidates, descending_order, dist_select, top_k_indices
from pyllama.sampling.dry import DRY, process_breakers
from pyllama.sampling.params import DEFAULT_SEED, SamplerParams
from pyllama.sampling.samplers import (
    XTC, AdaptiveP, Infill, LogitBias, MinP, Mirostat, MirostatV2, Penalties, Temp, TempExt, TopK,
    TopNSigma, TopP, Typical)
from pyllama.sampling.rng import Mt19937



DISABLED_NAMES = {
    "penalties": "?penalties", "dry": "?dry", "top_n_sigma": "?top-n-sigma", "top_k": "?top-k",
    "typ_p": "?typical", "top_p": "?top-p", "min_p": "?min-p", "xtc": "?xtc",
    "temperature": "?temp-ext",
}


def greedy(logits) -> int:
    """argmax; the lowest id wins a tie (llama.cpp's greedy keeps the first maximum)."""
    return int(np.argmax(np.asarray(logits)))


def resolve_seed(seed: int) -> int:
    """The seed actually used: LLAMA_DEFAULT_SEED (or -1) draws one from the OS."""
    seed = int(seed)
    if seed in (-1, DEFAULT_SEED):
        return random.SystemRandom().getrandbits(32)
    return seed & 0xFFFFFFFF


class SamplerChain:
    def __init__(self, params: SamplerParams, n_vocab: int, *, eog_ids=(), token_pieces=None,
                 tokenize=None, n_ctx: int = 0, n_ctx_train: int = 0, eot_id=None,
                 suppress_ids=(), vocab=None):
        """eog_ids: end-of-generation tokens (ignore_eos, infill); token_pieces: id -> str (or a
        list of str), needed by DRY (sequence breakers) and infill; tokenize: str -> ids for multi-character DRY
        breakers (else a longest-piece match over the pieces); n_ctx (else n_ctx_train) is what
        a last_n of -1 means (older llama.cpp; the current one only takes >= 0); eot_id:
        infill's fallback token (default: the first EOG id); suppress_ids: the vocab's
        suppress tokens (tokenizer.ggml.suppress_tokens), always -inf; vocab: the model's
        Vocab, needed by a grammar (its pieces, EOG tokens and `<token>` references)."""
        self.params, self.n_vocab = params, int(n_vocab)
        if token_pieces is not None and not callable(token_pieces):
            token_pieces = list(token_pieces).__getitem__  # a list of pieces works too
        self.eog_ids = tuple(int(t) for t in eog_ids)
        self.eot_id = eot_id if eot_id is not None else (self.eog_ids[0] if self.eog_ids else None)
        self.seed = resolve_seed(params.seed)
        self.rng = Mt19937(self.seed)
        self.prev: deque = deque(maxlen=max(32, params.n_prev))
        self.names: list[str] = []  # the chain as llama.cpp prints it, disabled ones as "?name"
        self.suppress_ids = tuple(int(t) for t in suppress_ids)
        self.samplers = self._build(params, token_pieces, tokenize, n_ctx or n_ctx_train)
        self._last = None  # Candidates of the last sample(), ordered on demand
        self.last_selected = -1
        self.grammar = None
        if params.grammar:
            if vocab is None:
                raise ValueError("a grammar needs the model's vocabulary (vocab=)")
            from pyllama.grammar.sampler import GrammarSampler
            self.grammar = GrammarSampler(params.grammar, vocab, lazy=params.grammar_lazy,
                                          triggers=params.grammar_triggers)

    # -- construction -------------------------------------------------------------------------
    def _build(self, p: SamplerParams, token_pieces, tokenize, n_ctx) -> list:
        chain = []
        bias = list(p.logit_bias.items())
        if p.ignore_eos:  # (without EOG tokens llama.cpp warns and ignores it: the caller's part)
            bias += [(t, -np.inf) for t in self.eog_ids]
        bias += [(t, -np.inf) for t in self.suppress_ids]
        if bias:
            chain.append(LogitBias(bias))
        if p.mirostat in (1, 2):
            temp = Temp(p.temp) if p.temp != 1 else None
            miro = Mirostat(self.n_vocab, p.mirostat_tau, p.mirostat_eta) if p.mirostat == 1 else \
                MirostatV2(p.mirostat_tau, p.mirostat_eta)
            self.names = [s.name for s in chain] + [temp.name if temp else "?temp", miro.name]
            return chain + ([temp] if temp else []) + [miro]
        if p.mirostat != 0:
            raise ValueError(f"unknown mirostat version {p.mirostat}")
        self.names = [s.name for s in chain]
        for name in p.samplers:
            s = self._make(name, p, token_pieces, tokenize, n_ctx)
            if s is not None:
                chain.append(s)
            if name != "adaptive_p":
                self.names.append(s.name if s is not None else DISABLED_NAMES[name])
        if "adaptive_p" in p.samplers:
            chain.append(AdaptiveP(p.adaptive_target, p.adaptive_decay))
        self.names.append(chain[-1].name if "adaptive_p" in p.samplers else "dist")
        return chain

    def _make(self, name, p, token_pieces, tokenize, n_ctx):
        """One chain entry; None for a sampler that its parameters disable (llama.cpp's "?name")."""
        if name == "penalties":
            last_n = n_ctx if p.penalty_last_n == -1 else max(p.penalty_last_n, 0)
            off = last_n <= 0 or (p.penalty_repeat == 1 and p.penalty_freq == 0 and p.penalty_present == 0)
            return None if off else Penalties(last_n, p.penalty_repeat, p.penalty_freq, p.penalty_present)
        if name == "dry":
            last_n = n_ctx if p.dry_penalty_last_n == -1 else max(p.dry_penalty_last_n, 0)
            if p.dry_multiplier == 0 or p.dry_base < 1 or last_n == 0:
                return None
            breakers = [b for b in p.dry_sequence_breakers if b]
            if breakers and token_pieces is None:
                raise ValueError("DRY needs token_pieces (id -> str) for its sequence breakers")
            brk = process_breakers(breakers, self.n_vocab, token_pieces, tokenize) if breakers else {}
            return DRY(p.dry_multiplier, p.dry_base, p.dry_allowed_length, last_n, brk)
        simple = {
            "top_k": lambda: TopK(p.top_k) if p.top_k > 0 else None,
            "top_p": lambda: TopP(p.top_p, p.min_keep) if p.top_p < 1 else None,
            "min_p": lambda: MinP(p.min_p, p.min_keep) if p.min_p > 0 else None,
            "typ_p": lambda: Typical(p.typ_p, p.min_keep) if p.typ_p < 1 else None,
            "top_n_sigma": lambda: TopNSigma(p.top_n_sigma) if p.top_n_sigma > 0 else None,
            "temperature": lambda: None if p.temp == 1 and p.dynatemp_range <= 0 else TempExt(
                p.temp, p.dynatemp_range, p.dynatemp_exponent),
            "xtc": lambda: None if p.xtc_probability <= 0 or p.xtc_threshold > 0.5 else XTC(
                p.xtc_probability, p.xtc_threshold, p.min_keep,
                Mt19937(self.seed)),
        }
        if name in simple:
            return simple[name]()
        if name == "adaptive_p":
            return None  # placed at the end of the chain, in place of dist
        if name == "infill":
            if token_pieces is None or self.eot_id is None:
                raise ValueError("infill needs token_pieces and an end-of-text token (eog_ids)")
            return Infill(self.eog_ids, token_pieces, self.eot_id)
        raise ValueError(f"sampler '{name}' is not supported")

    # -- sampling -----------------------------------------------------------------------------
    def apply(self, logits, u: float | None = None) -> Candidates:
        """Run the whole chain on `logits` [n_vocab]; returns the candidates, `selected` set."""
        cur = Candidates.from_logits(logits)
        if cur.size != self.n_vocab:
            raise ValueError(f"logits have {cur.size} entries, the vocabulary {self.n_vocab}")
        draw = self.draw_uniform if u is None else (lambda: float(u))
        for s in self.samplers:
            if isinstance(s, (Mirostat, AdaptiveP)):
                s.apply(cur, draw)  # draws only when more than one candidate is left
                return cur
            s.apply(cur)
        dist_select(cur, draw())
        return cur

    def sample(self, logits, u: float | None = None) -> int:
        """One token from the chain (not accepted). `u` in [0, 1) replaces the RNG draw (both
        draws when a grammar makes it sample twice)."""
        cur = self.apply(logits, u)
        tok = int(cur.ids[cur.selected])
        g = self.grammar
        if g is not None and g.active and not g.allows(tok):
            cur = self.apply(g.apply(logits), u)  # resample over the grammar's tokens only
            tok = int(cur.ids[cur.selected])
        self._last = cur
        self.last_selected = tok
        return tok

    @property
    def last_candidates(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, p) after the chain of the last sample(), by p descending (ties: lowest id), as
        the server's post-sampling probabilities; includes zero-probability candidates."""
        cur = self._last
        if cur is None:
            return np.zeros(0, np.int32), np.zeros(0, np.float32)
        if not isinstance(cur, tuple):
            order = _by_p(cur)
            self._last = cur = (cur.ids[order], cur.p[order])
        return cur

    def draw_uniform(self) -> float:
        """One uniform double in [0, 1) from the chain's RNG (the draw `sample` makes)."""
        return self.rng.random()

    def accept(self, token: int, is_generated: bool = True) -> None:
        """Record a token; a generated one also advances the grammar (prompt tokens replayed
        into the history do not, as in common_sampler_accept)."""
        token = int(token)
        if self.grammar is not None and is_generated:
            self.grammar.accept(token)
        for s in self.samplers:
            s.accept(token)
        self.prev.append(token)

    def reset(self) -> None:
        """Clear the history, restart mirostat, reseed the RNGs (a random seed draws anew)."""
        self.prev.clear()
        if self.grammar is not None:
            self.grammar.reset()
        self.seed = resolve_seed(self.params.seed)
        self.rng = Mt19937(self.seed)
        for s in self.samplers:
            s.reset()
            if isinstance(s, XTC):
                s.rng = Mt19937(self.seed)

    def clone(self) -> "SamplerChain":
        """An independent copy with the full state: history, mirostat mu, RNG positions."""
        c = object.__new__(SamplerChain)
        c.params, c.n_vocab, c.eog_ids, c.seed = self.params, self.n_vocab, self.eog_ids, self.seed
        c.names = self.names
        c.eot_id, c.suppress_ids = self.eot_id, self.suppress_ids
        c.rng = self.rng.copy()
        c.prev = deque(self.prev, maxlen=self.prev.maxlen)
        c.samplers = [s.clone() for s in self.samplers]
        c._last, c.last_selected = self._last, self.last_selected
        c.grammar = self.grammar.clone() if self.grammar is not None else None
        return c

    # -- probabilities ------------------------------------------------------------------------
    def probs(self, logits, n: int, post_sampling: bool = True) -> list[tuple[int, float]]:
        """Top-n (id, p). post_sampling: the chain's final candidates (the server's
        post_sampling_probs), computed on a clone so this chain's state does not move;
        otherwise the softmax of the raw logits (the server's default n_probs)."""
        if not post_sampling:
            return softmax_top_n(logits, n)
        cur = self.clone().apply(self._constrained(logits), u=0.5)
        order = _by_p(cur, n)
        return [(int(cur.ids[i]), float(cur.p[i])) for i in order]

    def probs_full(self, logits) -> np.ndarray:
        """The chain's final distribution over the whole vocabulary [n_vocab] float32 (zeros for
        filtered tokens), without moving this chain's state. For rejection sampling min(1, p/q)."""
        cur = self.clone().apply(self._constrained(logits), u=0.5)
        out = np.zeros(self.n_vocab, dtype=np.float32)
        out[cur.ids] = cur.p
        return out

    def _constrained(self, logits):
        """The logits with the grammar's mask applied (when a grammar is active)."""
        g = self.grammar
        return g.apply(logits) if g is not None and g.active else logits

    def describe(self) -> str:
        """common_sampler_print: "logits -> name -> ... ", a disabled sampler as "?name"."""
        return "logits " + "".join(f"-> {n} " for n in self.names)


def _by_p(cur: Candidates, n: int | None = None) -> np.ndarray:
    """Positions by p descending, ties by id; only the best n when n is given."""
    if n is not None and n < cur.size:
        return top_k_indices(cur.p, cur.ids, n)
    return descending_order(cur.p, cur.ids)


def softmax_top_n(logits, n: int) -> list[tuple[int, float]]:
    """Top-n of softmax(logits) over the full vocabulary, by probability (ties: lowest id)."""
    x = np.asarray(logits, dtype=np.float32).reshape(-1)
    ids = np.arange(len(x), dtype=np.int32)
    top = top_k_indices(x, ids, min(n, len(x))) if n < len(x) else descending_order(x, ids)
    m = x.max()
    total = np.exp(x - m, dtype=np.float32).sum(dtype=np.float64)
    p = np.exp(x[top] - m, dtype=np.float32) / total
    return [(int(i), float(q)) for i, q in zip(top, p)]
