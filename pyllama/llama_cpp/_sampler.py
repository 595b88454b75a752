"""The sampler chain llama-cpp-python's `Llama` builds (Llama._init_sampler), on pyllama's samplers.

llama-cpp-python does not use llama.cpp's common_sampler: it builds its own llama_sampler chain,

  [logits_processor (a custom sampler)] -> penalties(last_n_tokens_size) -> [grammar] ->
      temp < 0:   dist(seed)
      temp == 0:  greedy
      mirostat 1: mirostat(n_vocab, seed, tau, eta, m=100)     (no temperature in front)
      mirostat 2: mirostat_v2(seed, tau, eta)
      otherwise:  top_k -> typical(min_keep 1) -> top_p(1) -> min_p(1) -> temp -> dist(seed)

and samples with llama_sampler_sample (apply the chain to the logits of one output, take the
selected id, accept it into every sampler). A new chain is built for every `generate()`, so the
penalties only ever see generated tokens, never the prompt. Each random sampler (dist, mirostat)
has its own std::mt19937 seeded with the seed it was built with; LLAMA_DEFAULT_SEED draws one.
"""
from __future__ import annotations

import numpy as np

from pyllama.sampling.candidates import Candidates, dist_select
from pyllama.sampling.chain import resolve_seed
from pyllama.sampling.rng import Mt19937
from pyllama.sampling.samplers import (
    MinP, Mirostat, MirostatV2, Penalties, Temp, TopK, TopP, Typical)


class _Custom:
    """logits_processor as llama-cpp-python's custom sampler: each processor gets the evaluated
    tokens and the candidates' logits (the full vocabulary in id order: it runs first)."""

    def __init__(self, processors, input_ids):
        self.processors, self.input_ids = processors, input_ids

    def apply(self, cur: Candidates) -> None:
        logits = np.array(cur.logits, dtype=np.float32)          # [n] writable
        ids = self.input_ids()
        for proc in self.processors:
            out = proc(ids, logits)
            logits[:] = out
        cur.logits = logits
        cur.sorted = False

    def accept(self, token: int) -> None:
        pass


class _Grammar:
    """The grammar as a chain member: masks what the grammar rejects, advances on accept."""

    def __init__(self, matcher):
        self.matcher = matcher

    def apply(self, cur: Candidates) -> None:
        """llama_grammar_apply_impl: -inf on every candidate the grammar rejects."""
        if cur.identity and cur.size == self.matcher.index.n_vocab:
            cur.logits = self.matcher.apply(cur.logits)
        else:
            ok = self.matcher.mask()[cur.ids] != 0
            cur.logits = np.where(ok, cur.logits, np.float32(-np.inf)).astype(np.float32)
        cur.sorted = False

    def accept(self, token: int) -> None:
        self.matcher.accept(token)


class LlamaSampler:
    """One chain (see the module doc); `sample(logits)` selects and accepts a token."""

    def __init__(self, n_vocab: int, seed: int, *, top_k=40, top_p=0.95, min_p=0.05,
                 typical_p=1.0, temp=0.80, repeat_penalty=1.0, frequency_penalty=0.0,
                 presence_penalty=0.0, mirostat_mode=0, mirostat_eta=0.1, mirostat_tau=5.0,
                 penalty_last_n=64, logits_processor=None, input_ids=None, grammar=None):
        self.n_vocab = int(n_vocab)
        self.stages = []
        if logits_processor is not None:
            self.stages.append(_Custom(logits_processor, input_ids))
        self.stages.append(Penalties(penalty_last_n, repeat_penalty, frequency_penalty,
                                     presence_penalty))
        if grammar is not None:
            self.stages.append(_Grammar(grammar))
        self.seed = resolve_seed(int(seed) & 0xFFFFFFFF)
        self.rng = Mt19937(self.seed)
        self.select = "dist"
        self.selector = None
        if temp < 0.0:
            pass
        elif temp == 0.0:
            self.select = "greedy"
        elif mirostat_mode == 1:
            self.select, self.selector = "mirostat", Mirostat(self.n_vocab, mirostat_tau,
                                                              mirostat_eta, 100)
        elif mirostat_mode == 2:
            self.select, self.selector = "mirostat", MirostatV2(mirostat_tau, mirostat_eta)
        else:
            self.stages += [TopK(top_k), Typical(typical_p, 1), TopP(top_p, 1), MinP(min_p, 1),
                            Temp(temp)]

    def sample(self, logits: np.ndarray) -> int:
        """llama_sampler_sample over `logits` [n_vocab]: apply, select, accept."""
        cur = Candidates.from_logits(logits)
        for s in self.stages:
            s.apply(cur)
        if self.select == "greedy":
            # llama_sampler_greedy: the first maximum in the current order
            if cur.size == 0:
                raise RuntimeError("no candidates left to sample from")
            cur.selected = int(np.argmax(cur.logits))
        elif self.select == "mirostat":
            self.selector.apply(cur, self.rng.random)
        else:
            dist_select(cur, self.rng.random())
        token = int(cur.ids[cur.selected])
        self.accept(token)
        return token

    def accept(self, token: int) -> None:
        for s in self.stages:
            s.accept(token)
