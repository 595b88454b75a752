"""Which tokens a grammar allows next: llama_grammar_apply_impl over a whole vocabulary, fast.

A DFA over bytes is built lazily: a DFA state is (stacks, partial UTF-8 value, bytes still
expected, phase), where the stacks are a canonical (sorted) tuple of llama.cpp's stacks and the
phase says whether the expected bytes continue a sequence started by an earlier token (llama.cpp
checks those are continuation bytes) or one started inside this piece (it does not). A byte
moves the DFA with llama.cpp's decode_utf8 and, on each completed code point, accept_chr over
every stack (matcher.py). The vocabulary's pieces are sorted, so one pass over them (_filter.pyx)
walks their byte trie once, reusing the states of shared prefixes and skipping every piece
under a rejected prefix. Transitions are cached in a [states, 256] table and the allowed-token
mask of each start state in a small LRU, so the pass is paid once per grammar state.

Token references (`<[id]>`, `!<[id]>`) are matched on the token id at the start of a token, as
llama.cpp does; a token reference reached in the middle of a token's text rejects that token
(llama.cpp keeps such a token in apply and then fails to accept it).
"""
from collections import OrderedDict

import numpy as np

from pyllama.errors import GrammarError
from pyllama.grammar import _filter
from pyllama.grammar.matcher import _LEAD_LEN, decode_utf8
from pyllama.grammar.parser import CHAR_ALT, CHAR_ANY, CHAR_RNG_UPPER, TOKEN, TOKEN_NOT

_MAX_STATES = 60_000   # the caches start over (between tokens) beyond this many stack states
_N_MASKS = 48          # cached masks per grammar (n_vocab bytes each)


class VocabIndex:
    """A vocabulary's pieces as llama.cpp's grammar sees them (token_to_piece with special
    tokens rendered), sorted for the trie walk; built once per vocabulary."""

    def __init__(self, pieces: list[bytes], eog_ids=()):
        self.n_vocab = len(pieces)
        self.pieces = []
        for p in pieces:
            nul = p.find(b"\0")  # llama.cpp reads a piece as a C string
            self.pieces.append(p if nul < 0 else p[:nul])
        self.eog = np.zeros(self.n_vocab, dtype=bool)
        for t in eog_ids:
            if 0 <= int(t) < self.n_vocab:
                self.eog[int(t)] = True
        walk_pieces = [b"" if self.eog[i] else p for i, p in enumerate(self.pieces)]
        (self.order, self.buf, self.offs, self.lens, self.lcp,
         self.max_len) = _filter.sorted_pieces(walk_pieces)
        self.eog_ids = np.flatnonzero(self.eog)
        self._has_cp = None

    def has_code_point(self) -> np.ndarray:
        """bool [n_vocab]: the (non-EOG) piece decodes to at least one whole code point, which
        is when llama.cpp matches a token reference on the token's id."""
        if self._has_cp is None:
            self._has_cp = np.fromiter((len(decode_utf8(p)[0]) > 0 for p in self.pieces), bool,
                                       self.n_vocab) & ~self.eog
        return self._has_cp

    @classmethod
    def of(cls, vocab) -> "VocabIndex":
        """The index of a pyllama Vocab (cached on it)."""
        idx = getattr(vocab, "_grammar_index", None)
        if idx is None:
            pieces = [vocab.token_to_piece(i, True) for i in range(vocab.n_vocab)]
            idx = cls(pieces, tuple(vocab.eog_ids))
            try:
                vocab._grammar_index = idx
            except AttributeError:
                pass
        return idx


class TokenFilter:
    """The lazily built automaton of one grammar over one vocabulary, shared by its samplers.

    A grammar state is (sid, value, n_remain): the id of a canonical (sorted) tuple of
    llama.cpp's stacks, and the partial UTF-8 sequence the last token left."""

    def __init__(self, compiled, index: VocabIndex):
        self.c, self.index = compiled, index
        self._reset_tables()

    def _reset_tables(self):
        self.states: list = []
        self.ids: dict = {}
        self.walker = _filter.Walker(self, self.index.max_len)
        self.masks: OrderedDict = OrderedDict()

    def intern(self, stacks) -> int:
        canon = tuple(sorted(set(stacks)))
        sid = self.ids.get(canon)
        if sid is None:
            sid = len(self.states)
            self.states.append(canon)
            self.ids[canon] = sid
        return sid

    def start_state(self, stacks, partial=(0, 0)) -> tuple:
        value, n_remain = partial
        return (self.intern(stacks), value if n_remain > 0 else 0, n_remain)

    def maybe_restart(self, state: tuple) -> tuple:
        """Between tokens: drop the tables when they grew too large (the state is kept)."""
        if len(self.states) <= _MAX_STATES and self.walker.size <= 8 * _MAX_STATES:
            return state
        stacks = self.states[state[0]]
        self._reset_tables()
        return (self.intern(stacks), state[1], state[2])

    # -- called from _filter.pyx on a cache miss ---------------------------------------------
    def step(self, sid: int, cp: int) -> int:
        out = set()
        for s in self.states[sid]:
            out.update(self.c.accept_chr(s, cp))
        return self.intern(out) if out else -1

    def bounds(self, sid: int) -> list:
        """Sorted code points where some stack top's char class may change its answer."""
        t, v = self.c.types, self.c.values
        cuts = {0}
        for s in self.states[sid]:
            if not s or t[s[-1]] in (TOKEN, TOKEN_NOT):
                continue
            p = s[-1]
            while True:
                if t[p + 1] == CHAR_RNG_UPPER:
                    cuts.add(v[p])
                    cuts.add(v[p + 1] + 1)
                    p += 2
                elif t[p] == CHAR_ANY:
                    p += 1
                else:
                    cuts.add(v[p])
                    cuts.add(v[p] + 1)
                    p += 1
                if t[p] != CHAR_ALT:
                    break
        return sorted(c for c in cuts if c <= 0xFFFFFFFF)

    def end(self, sid: int, value: int, n_remain: int) -> bool:
        if n_remain < 0:
            return False
        for s in self.states[sid]:
            if s and self.c.types[s[-1]] not in (TOKEN, TOKEN_NOT) and \
                    self.c.match_partial_char(s[-1], (value, n_remain)):
                return True
        return False

    # -- masks -------------------------------------------------------------------------------
    def allow_eog(self, state: tuple) -> bool:
        return any(len(s) == 0 for s in self.states[state[0]])

    def mask(self, state: tuple) -> np.ndarray:
        """uint8 [n_vocab]: 1 where llama_grammar_apply_impl keeps the token."""
        m = self.masks.get(state)
        if m is not None:
            self.masks.move_to_end(state)
            return m
        ix = self.index
        m = np.zeros(ix.n_vocab, dtype=np.uint8)
        self.walker.walk(state[0], state[1], state[2], ix.buf, ix.offs, ix.lens, ix.lcp,
                         ix.order, m)
        if self.c.has_tokens:
            self._token_refs(state, m)
        if self.allow_eog(state):
            m[ix.eog_ids] = 1
        self.masks[state] = m
        if len(self.masks) > _N_MASKS:
            self.masks.popitem(last=False)
        return m

    def _token_refs(self, state: tuple, m: np.ndarray) -> None:
        ix = self.index
        if state[2] > 0:
            return  # a partial character pending: no token reference can match
        has_cp = ix.has_code_point()
        for s in self.states[state[0]]:
            if not s or self.c.types[s[-1]] not in (TOKEN, TOKEN_NOT):
                continue
            v = self.c.values[s[-1]]
            if self.c.types[s[-1]] == TOKEN:
                if 0 <= v < ix.n_vocab and has_cp[v]:
                    m[v] = 1
            else:
                keep = has_cp.copy()
                if 0 <= v < ix.n_vocab:
                    keep[v] = False
                m[keep] = 1

    def allowed(self, state: tuple, token: int) -> bool:
        """The sample-first check for one token (llama.cpp applies the grammar to it alone)."""
        ix = self.index
        if ix.eog[token]:
            return self.allow_eog(state)
        m = self.masks.get(state)
        if m is not None:
            return bool(m[token])
        piece = ix.pieces[token]
        if not piece:
            return False
        if self.c.has_tokens:
            return bool(self.mask(state)[token])
        return self.walker.walk_one(state[0], state[1], state[2],
                                    np.frombuffer(piece, np.uint8))[0] >= 0

    def advance(self, state: tuple, token: int) -> tuple:
        """llama_grammar_accept_impl for an active grammar: the next state."""
        ix = self.index
        if ix.eog[token]:
            if self.allow_eog(state):
                return state
            raise GrammarError("end of generation where the grammar cannot end")
        piece = ix.pieces[token]
        if self.c.has_tokens or not piece:
            return self.advance_piece(state, token, piece)
        sid, value, n_remain = self.walker.walk_one(state[0], state[1], state[2],
                                                    np.frombuffer(piece, np.uint8))
        if sid == -1:
            raise GrammarError(_empty_stack_message(piece, token))
        if sid == -2:  # ends in a sequence that cannot match: llama.cpp keeps the stacks
            return self.advance_piece(state, token, piece)
        if sid == state[0] and not decode_utf8(piece, (state[1], state[2]))[0]:
            # no whole code point: llama.cpp keeps the stacks but drops the empty ones
            sid = self.intern([s for s in self.states[sid] if s])
        return self.maybe_restart((sid, value if n_remain > 0 else 0, n_remain))

    def advance_piece(self, state: tuple, token: int, piece: bytes) -> tuple:
        """llama_grammar_accept_token with an explicit piece (the reference stack code)."""
        stacks = list(self.states[state[0]])
        new, partial = self.c.accept_token(stacks, (state[1], state[2]), token, piece)
        if not new:
            raise GrammarError(_empty_stack_message(piece, token))
        return self.maybe_restart(self.start_state(new, partial))


def _empty_stack_message(piece: bytes, token: int) -> str:
    return ("Unexpected empty grammar stack after accepting piece: "
            f"{piece.decode('utf-8', 'replace')} ({token})")
