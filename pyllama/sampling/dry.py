"""DRY ("Don't Repeat Yourself"), as in llama.cpp's llama_sampler_dry (ported from KoboldCpp).

A token that would extend a sequence already seen in the last N tokens gets
`logit -= multiplier * base ** (repeat_len - allowed_length)`. Sequence breakers (default
"\\n", ":", "\\"", "*") cut the scan: a repeat never reaches back across one.

Breakers are strings; each becomes (head token, tail tokens) pairs: every token whose text
contains the breaker is a head with an empty tail; a token whose text ends with a proper prefix of
the breaker is a head whose tail is the tokenization of the rest (at most 20 tokens).
"""
from collections import deque

import numpy as np

from pyllama.sampling.candidates import Candidates
from pyllama.sampling.samplers import Sampler

MAX_CHAR_LEN = 40
MAX_SEQ_LEN = 20
FLOAT_MAX_LOG = 88.7228391


def process_breakers(breakers, n_vocab: int, token_pieces, tokenize=None) -> dict:
    """head token -> list of tail tuples (llama.cpp get_overlapping_token_sequences)."""
    out: dict[int, list[tuple]] = {}
    words = [token_pieces(i) for i in range(n_vocab)]
    for brk in breakers:
        if not brk:
            continue
        brk = brk[:MAX_CHAR_LEN]
        if len(brk) == 1:  # a one-character breaker has no partial overlaps: heads only
            for tid in [t for t, w in enumerate(words) if brk in w]:
                _add(out, tid, ())
            continue
        tok = tokenize or _greedy_tokenizer(words)
        for tid, word in enumerate(words):
            if brk in word:
                _add(out, tid, ())
                continue
            pos = word.find(brk[0])
            while pos != -1:
                rest = word[pos:]
                if brk.startswith(rest):
                    _add(out, tid, tuple(tok(brk[len(rest):]))[:MAX_SEQ_LEN])
                pos = word.find(brk[0], pos + 1)
    return out


def _add(out: dict, head: int, tail: tuple) -> None:
    tails = out.setdefault(head, [])
    if tail not in tails:
        tails.append(tail)


def _greedy_tokenizer(words: list):
    """Longest-piece-first tokenizer over the vocab pieces, used when no real `tokenize` is given
    (tails of multi-character breakers only)."""
    index: dict[str, int] = {}
    for tid, w in enumerate(words):
        if w and w not in index:
            index[w] = tid
    longest = max((len(w) for w in index), default=0)

    def tokenize(text: str) -> list[int]:
        ids, i = [], 0
        while i < len(text):
            for n in range(min(longest, len(text) - i), 0, -1):
                if text[i:i + n] in index:
                    ids.append(index[text[i:i + n]])
                    i += n
                    break
            else:
                i += 1  # no piece covers this character
        return ids
    return tokenize


class DRY(Sampler):
    name = "dry"

    def __init__(self, multiplier: float, base: float, allowed_length: int, penalty_last_n: int,
                 breakers: dict):
        self.multiplier, self.base = np.float32(multiplier), np.float32(base)
        self.allowed, self.last_n = int(allowed_length), max(int(penalty_last_n), 0)
        self.breakers = breakers  # shared, never mutated
        self.tokens: deque = deque(maxlen=self.last_n)

    @property
    def enabled(self) -> bool:
        return self.multiplier != 0.0 and self.base >= 1.0 and self.last_n != 0

    def accept(self, token: int) -> None:
        if self.enabled:
            self.tokens.append(int(token))

    def reset(self) -> None:
        self.tokens.clear()

    def clone(self) -> "DRY":
        c = DRY(self.multiplier, self.base, self.allowed, self.last_n, self.breakers)
        c.tokens.extend(self.tokens)
        return c

    def apply(self, cur: Candidates) -> None:
        if not self.enabled:
            return
        n = min(len(self.tokens), self.last_n)
        if n <= self.allowed:
            return
        rat = list(self.tokens)[::-1][:n]  # rat[i]: i tokens back from the newest
        rep_limit = self._rep_limit(rat, n)
        if rep_limit < self.allowed:
            return
        max_repeat = self._max_repeat(rat, n, rep_limit)
        self._penalize(cur, max_repeat)

    def _rep_limit(self, rat: list, n: int) -> int:
        """Distance back to the nearest complete restart sequence (breaker), or n."""
        for i in range(n):
            best = -1
            for tail in self.breakers.get(rat[i], ()):
                k = len(tail)
                if best < k <= i and all(tail[o] == rat[i - o - 1] for o in range(k)):
                    best = k
            if best >= 0:
                return i - best
        return n

    def _max_repeat(self, rat: list, n: int, rep_limit: int) -> dict:
        """token -> longest repeat it would extend (reverse Z-algorithm, as in llama.cpp)."""
        count = [0] * n
        last, lt, rt = n - 1, 0, 0
        for k in range(1, n):
            if k > rt:
                m = 0
                while m + k < n and rat[m] == rat[m + k]:
                    m += 1
                count[last - k] = min(m, rep_limit)
                if m > 0:
                    lt, rt = k, k + m - 1
            else:
                p = k - lt
                right = rt - k + 1
                if count[last - p] < right:
                    count[last - k] = min(count[last - p], rep_limit)
                else:
                    i = rt + 1
                    while i < n and rat[i] == rat[i - k]:
                        i += 1
                    count[last - k] = min(i - k, rep_limit)
                    lt, rt = k, i - 1
        out: dict[int, int] = {}
        for i in range(n - 1):
            r = count[i]
            if r >= self.allowed:
                tok = rat[n - 2 - i]
                if out.get(tok, -1) < r:
                    out[tok] = r
        return out

    def _penalize(self, cur: Candidates, max_repeat: dict) -> None:
        max_exp = int(FLOAT_MAX_LOG / np.log(self.base)) if self.base > 1.000001 else 0
        toks = [t for t in max_repeat if () not in self.breakers.get(t, ())]
        if not toks:
            cur.sorted = False
            return
        exps = np.array([max_repeat[t] - self.allowed for t in toks], dtype=np.int64)
        if max_exp > 0:
            exps = np.minimum(exps, max_exp)
        pen = (self.multiplier * np.power(np.float64(self.base), exps)).astype(np.float32)
        pos, found = cur.positions_of(np.array(toks, dtype=np.int64))
        logits = cur.logits.copy()
        logits[pos] -= pen[found]
        cur.logits = logits
        cur.sorted = False
