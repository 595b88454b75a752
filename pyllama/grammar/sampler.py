"""GrammarSampler: llama.cpp's grammar sampler (llama_sampler_init_grammar[_lazy_patterns]) over
one vocabulary -- which tokens are allowed, accepting tokens, lazy triggers.

The common sampler's use of it (sample the chain first; only when the grammar rejects that
token, mask the logits and sample again) is SamplerChain.sample's.

Lazy grammars wait for a trigger: a trigger token, or a regex over the text generated so far
(a word is a regex-escaped pattern; a "full" pattern is anchored at both ends). On a trigger the
tokens of the buffered text from the match on (the first non-empty capture group, else the whole
match) are replayed into the grammar, as llama_grammar_accept_impl does.
"""
import re
from collections import OrderedDict

import numpy as np

from pyllama.errors import GrammarError
from pyllama.grammar import Grammar
from pyllama.grammar.filter import TokenFilter, VocabIndex

_FILTERS: OrderedDict = OrderedDict()  # (grammar text, root, vocab index id) -> TokenFilter
_N_FILTERS = 8

TRIGGER_TYPES = ("token", "word", "pattern", "pattern_full")


def trigger_pattern(kind: str, value: str) -> str:
    """common_sampler_init: the regex a trigger of this kind stands for."""
    if kind == "word":
        return re.escape(value)
    if kind == "pattern":
        return value
    if kind == "pattern_full":
        if not value:
            return "^$"
        return ("" if value.startswith("^") else "^") + value + ("" if value.endswith("$") else "$")
    raise GrammarError(f"unknown grammar trigger type '{kind}'")


def _find_start(rx: re.Pattern, pattern: str, text: str) -> int:
    """llama_grammar_trigger_pattern::find: start of the first non-empty group, else of the
    match; -1 when there is none."""
    m = None
    if pattern.startswith("^") and pattern.endswith("$"):
        m = rx.fullmatch(text)
    if m is None:
        m = rx.search(text)
    if m is None:
        return -1
    for g in range(1, (m.re.groups or 0) + 1):
        if m.start(g) >= 0 and m.end(g) > m.start(g):
            return m.start(g)
    return m.start()


class GrammarSampler:
    """A grammar's state over a vocabulary. `grammar`: GBNF text or a Grammar (parsed again
    with the vocabulary when it has `<token>` references)."""

    def __init__(self, grammar, vocab=None, *, index: VocabIndex | None = None,
                 token_id=None, lazy: bool = False, triggers=()):
        text, root = (grammar.text, grammar.root) if isinstance(grammar, Grammar) else \
            (str(grammar), "root")
        if index is None:
            if vocab is None:
                raise ValueError("a grammar sampler needs the vocabulary")
            index = VocabIndex.of(vocab)
            if token_id is None:
                token_id = _vocab_token_id(vocab)
        key = (text, root, id(index))
        f = _FILTERS.get(key)
        if f is None or f.index is not index:
            g = Grammar.from_gbnf(text, root, token_id=token_id)
            f = TokenFilter(g.compiled, index)
            _FILTERS[key] = f
            if len(_FILTERS) > _N_FILTERS:
                _FILTERS.popitem(last=False)
        _FILTERS.move_to_end(key)
        self.filter, self.index = f, index
        self.lazy = bool(lazy)
        self.trigger_tokens: list[int] = []
        self.trigger_patterns: list[tuple[str, re.Pattern]] = []
        for kind, value in triggers:
            if kind == "token":
                self.trigger_tokens.append(int(value))
            else:
                pat = trigger_pattern(kind, value)
                try:
                    self.trigger_patterns.append((pat, re.compile(pat, re.S)))
                except re.error as e:
                    raise GrammarError(f"invalid grammar trigger pattern '{pat}': {e}") from None
        self.reset()

    def reset(self) -> None:
        stacks = self.filter.c.initial_stacks()
        self.state = self.filter.start_state(stacks, (0, 0))
        self.awaiting = self.lazy
        self.buffer = b""
        self.buffer_positions: list = []

    def clone(self) -> "GrammarSampler":
        c = object.__new__(GrammarSampler)
        c.__dict__.update(self.__dict__)
        c.buffer_positions = list(self.buffer_positions)
        return c

    # -- state -------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """False while a lazy grammar waits for its trigger (it then constrains nothing)."""
        return not self.awaiting

    @property
    def stacks(self) -> list:
        return list(self.filter.states[self.state[0]])

    @property
    def can_end(self) -> bool:
        """An end-of-generation token is allowed now (some stack is empty)."""
        return self.filter.allow_eog(self.state)

    # -- llama_grammar_apply_impl -------------------------------------------------------------
    def allows(self, token: int) -> bool:
        if self.awaiting:
            return True
        return self.filter.allowed(self.state, int(token))

    def mask(self) -> np.ndarray:
        """uint8 [n_vocab]: 1 for every token the grammar allows next."""
        if self.awaiting:
            return np.ones(self.index.n_vocab, dtype=np.uint8)
        return self.filter.mask(self.state)

    def apply(self, logits) -> np.ndarray:
        """A float32 copy of `logits` with -inf on every token the grammar rejects."""
        x = np.array(logits, dtype=np.float32, copy=True).reshape(-1)
        if self.awaiting:
            return x
        m = self.filter.mask(self.state)
        n = min(len(x), len(m))
        x[:n][m[:n] == 0] = -np.inf
        return x

    # -- llama_grammar_accept_impl -------------------------------------------------------------
    def accept(self, token: int) -> None:
        token = int(token)
        f = self.filter
        if not self.awaiting:
            self.state = f.advance(self.state, token)
            return
        piece = self.index.pieces[token] if 0 <= token < self.index.n_vocab else b""
        if token in self.trigger_tokens:
            self.awaiting = False
            self.buffer, self.buffer_positions = b"", []
            self.state = f.advance_piece(self.state, token, piece)
            return
        start = len(self.buffer)
        self.buffer_positions.append((token, start, start + len(piece)))
        self.buffer += piece
        text = self.buffer.decode("latin-1")  # byte offsets = string offsets
        for pat, rx in self.trigger_patterns:
            at = _find_start(rx, pat, text)
            if at < 0:
                continue
            self.awaiting = False
            for tok, t0, t1 in self.buffer_positions:
                if t1 <= at:
                    continue
                p0 = max(t0, at)
                self.state = f.advance_piece(self.state, tok, self.buffer[p0:t1])
            self.buffer, self.buffer_positions = b"", []
            return


def _vocab_token_id(vocab):
    """`<token>` in a grammar: the text must tokenize (special tokens parsed) to one token."""
    def token_id(text: str):
        ids = vocab.tokenize(text, False, True)
        return ids[0] if len(ids) == 1 else None
    return token_id
