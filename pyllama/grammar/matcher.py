"""llama.cpp's pushdown matching (src/llama-grammar.cpp), in plain Python: the reference the
Cython token filter (_filter.pyx) is tested against, and what `Grammar.matches` runs.

Positions are indices into the grammar's flattened element list (`Compiled.types/values`, every
rule ending in END). A stack is a tuple of positions, bottom first, top last; the top of a stack
after `advance` is always a terminal (char class, `.`, token) or the stack is empty (the grammar
may end there). A list of distinct stacks is the grammar's state, plus the partial UTF-8
sequence (value, n_remain) left by the last token (n_remain -1: invalid).
"""
from pyllama.grammar.parser import (
    ALT, CHAR, CHAR_ALT, CHAR_ANY, CHAR_NOT, CHAR_RNG_UPPER, END, RULE_REF, TOKEN, TOKEN_NOT)

_LEAD_LEN = (1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, 2, 3, 4)  # bytes of a sequence by high nibble


def decode_utf8(data: bytes, partial=(0, 0)):
    """llama.cpp's decode_utf8(std::string, partial): (code points, (value, n_remain)).
    Continuation bytes of a sequence started in this piece are not checked (as in llama.cpp);
    an invalid byte gives ([], (0, -1)) after the completed code points are dropped. The piece
    is read as a C string (up to its first NUL byte)."""
    nul = data.find(b"\0")
    if nul >= 0:
        data = data[:nul]
    cps = []
    value, n_remain = partial
    i, n = 0, len(data)
    while i < n and n_remain > 0:
        b = data[i]
        if (b >> 6) != 2:
            return [], (0, -1)
        value = (value << 6) + (b & 0x3F)
        i += 1
        n_remain -= 1
    if partial[1] > 0 and n_remain == 0:
        cps.append(value)
    while i < n:
        b = data[i]
        n_remain = _LEAD_LEN[b >> 4] - 1
        if n_remain < 0:
            return [], (0, n_remain)
        value = b & ((1 << (7 - n_remain)) - 1)
        i += 1
        while i < n and n_remain > 0:
            value = (value << 6) + (data[i] & 0x3F)
            i += 1
            n_remain -= 1
        if n_remain == 0:
            cps.append(value)
    return cps, (value, n_remain) if n_remain else (0, 0)


class Compiled:
    """The flattened rules of one grammar and llama.cpp's stack operations over them."""

    def __init__(self, rules: list[list], root: int):
        self.types: list[int] = []
        self.values: list[int] = []
        self.rule_start: list[int] = []
        for rule in rules:
            self.rule_start.append(len(self.types))
            for kind, value in rule:
                self.types.append(kind)
                self.values.append(value)
        self.root = root
        self.has_tokens = any(t in (TOKEN, TOKEN_NOT) for t in self.types)
        self._advance_cache: dict = {}
        self._chr_cache: dict = {}

    def _alternatives(self, pos: int):
        """Start positions of the alternatives that begin at pos (a rule's first element)."""
        t = self.types
        while True:
            yield pos
            while t[pos] not in (END, ALT):
                pos += 1
            if t[pos] == ALT:
                pos += 1
            else:
                return

    def _is_end(self, pos: int) -> bool:
        return self.types[pos] in (END, ALT)

    def advance(self, stack: tuple) -> tuple:
        """llama_grammar_advance_stack: the stacks reachable from `stack` whose top is a terminal
        (or that are empty), in llama.cpp's order, without duplicates."""
        got = self._advance_cache.get(stack)
        if got is not None:
            return got
        out, out_set, seen, todo = [], set(), set(), [stack]
        t, v = self.types, self.values
        while todo:
            cur = todo.pop()
            if cur in seen:
                continue
            seen.add(cur)
            if not cur:
                if cur not in out_set:
                    out_set.add(cur)
                    out.append(cur)
                continue
            pos = cur[-1]
            kind = t[pos]
            if kind == RULE_REF:
                base = cur[:-1]
                if not self._is_end(pos + 1):
                    base = base + (pos + 1,)
                for sub in self._alternatives(self.rule_start[v[pos]]):
                    todo.append(base if self._is_end(sub) else base + (sub,))
            elif kind in (CHAR, CHAR_NOT, CHAR_ANY, TOKEN, TOKEN_NOT):
                if cur not in out_set:
                    out_set.add(cur)
                    out.append(cur)
            else:
                raise AssertionError(f"stack left on element type {kind}")
        got = tuple(out)
        if len(self._advance_cache) > 100_000:
            self._advance_cache.clear()
        self._advance_cache[stack] = got
        return got

    def initial_stacks(self) -> list:
        stacks, have = [], set()
        for alt in self._alternatives(self.rule_start[self.root]):
            for s in self.advance(() if self._is_end(alt) else (alt,)):
                if s not in have:
                    have.add(s)
                    stacks.append(s)
        return stacks

    def match_char(self, pos: int, chr_: int):
        """llama_grammar_match_char: (matched, position after the char class)."""
        t, v = self.types, self.values
        found = False
        positive = t[pos] in (CHAR, CHAR_ANY)
        while True:
            if t[pos + 1] == CHAR_RNG_UPPER:
                found = found or (v[pos] <= chr_ <= v[pos + 1])
                pos += 2
            elif t[pos] == CHAR_ANY:
                found = True
                pos += 1
            else:
                found = found or v[pos] == chr_
                pos += 1
            if t[pos] != CHAR_ALT:
                break
        return found == positive, pos

    def match_partial_char(self, pos: int, partial) -> bool:
        """llama_grammar_match_partial_char: can some completion of `partial` match here?"""
        t, v = self.types, self.values
        positive = t[pos] in (CHAR, CHAR_ANY)
        value, n_remain = partial
        if n_remain < 0 or (n_remain == 1 and value < 2):
            return False
        low = value << (n_remain * 6)
        high = low | ((1 << (n_remain * 6)) - 1)
        if low == 0:
            if n_remain == 2:
                low = 1 << 11
            elif n_remain == 3:
                low = 1 << 16
        while True:
            if t[pos + 1] == CHAR_RNG_UPPER:
                if v[pos] <= high and low <= v[pos + 1]:
                    return positive
                pos += 2
            elif t[pos] == CHAR_ANY:
                return True
            else:
                if low <= v[pos] <= high:
                    return positive
                pos += 1
            if t[pos] != CHAR_ALT:
                break
        return not positive

    def accept_chr(self, stack: tuple, chr_: int) -> tuple:
        """llama_grammar_accept_chr for one stack: the advanced stacks after `chr_`."""
        key = (stack, chr_)
        got = self._chr_cache.get(key)
        if got is not None:
            return got
        got = ()
        if stack and self.types[stack[-1]] not in (TOKEN, TOKEN_NOT):
            ok, after = self.match_char(stack[-1], chr_)
            if ok:
                new = stack[:-1] if self._is_end(after) else stack[:-1] + (after,)
                got = self.advance(new)
        if len(self._chr_cache) > 200_000:
            self._chr_cache.clear()
        self._chr_cache[key] = got
        return got

    def accept_code_points(self, stacks, cps) -> list:
        """llama_grammar_accept for each code point in turn (the stacks of every path)."""
        for c in cps:
            new, have = [], set()
            for s in stacks:
                for n in self.accept_chr(s, c):
                    if n not in have:
                        have.add(n)
                        new.append(n)
            stacks = new
            if not stacks:
                break
        return stacks

    def match_token(self, pos: int, token: int) -> bool:
        if self.types[pos] == TOKEN:
            return self.values[pos] == token
        return self.values[pos] != token

    def accept_token(self, stacks, partial, token: int, piece: bytes):
        """llama_grammar_accept_token: (stacks, partial) after the token; stacks may be empty
        (llama.cpp then throws 'Unexpected empty grammar stack')."""
        cps, new_partial = decode_utf8(piece, partial)
        out, have = [], set()
        for stack in stacks:
            if not stack:
                continue
            pos = stack[-1]
            if self.types[pos] in (TOKEN, TOKEN_NOT):
                if self.match_token(pos, token):
                    new = stack[:-1] if self._is_end(pos + 1) else stack[:-1] + (pos + 1,)
                    for s in self.advance(new):
                        if s not in have:
                            have.add(s)
                            out.append(s)
            else:
                for s in self.accept_code_points([stack], cps):
                    if s not in have:
                        have.add(s)
                        out.append(s)
        return out, new_partial

    # -- llama_grammar_reject_candidates ----------------------------------------------------
    def token_allowed(self, stacks, partial, token: int, piece: bytes) -> bool:
        """Whether llama_grammar_apply_impl keeps a (non-EOG, non-empty) token: not rejected by
        at least one stack."""
        cps, tail = decode_utf8(piece, partial)
        return any(self._allowed_for_stack(s, cps, 0, tail, token) for s in stacks)

    def _allowed_for_stack(self, stack, cps, i, tail, token) -> bool:
        while True:
            if not stack:
                return i == len(cps) and tail[1] == 0
            pos = stack[-1]
            kind = self.types[pos]
            if kind in (TOKEN, TOKEN_NOT):
                if i == len(cps):
                    return tail[1] == 0
                return self.match_token(pos, token)
            if i == len(cps):
                return tail[1] == 0 or self.match_partial_char(pos, tail)
            ok, after = self.match_char(pos, cps[i])
            if not ok:
                return False
            new = stack[:-1] if self._is_end(after) else stack[:-1] + (after,)
            nexts = self.advance(new)
            if len(nexts) == 1:
                stack, i = nexts[0], i + 1
                continue
            return any(self._allowed_for_stack(s, cps, i + 1, tail, token) for s in nexts)
