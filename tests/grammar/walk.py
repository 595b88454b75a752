"""Random complete strings of a grammar (a random walk over llama.cpp's stacks), for checking
that what a grammar accepts is valid for its JSON schema."""
import random

from pyllama.grammar.parser import CHAR, CHAR_ALT, CHAR_ANY, CHAR_NOT, CHAR_RNG_UPPER

POOL = [chr(c) for c in range(0x20, 0x7F)] + ["\n", "\t", "é", "日"]


def _choices(compiled, pos, rng):
    """A few chars matching the char class at pos (one per range, plus pool chars)."""
    t, v = compiled.types, compiled.values
    out = set()
    if t[pos] == CHAR:
        p = pos
        while True:
            if t[p + 1] == CHAR_RNG_UPPER:
                lo, hi = v[p], min(v[p + 1], 0x10FFFF)
                out.add(chr(rng.randint(lo, min(hi, lo + 200))))
                p += 2
            else:
                out.add(chr(v[p]))
                p += 1
            if t[p] != CHAR_ALT:
                break
    else:
        assert t[pos] in (CHAR_NOT, CHAR_ANY)
        out = {c for c in rng.sample(POOL, 12) if compiled.match_char(pos, ord(c))[0]}
    return sorted(out)


def random_strings(grammar, n, seed=0, max_len=400, p_end=0.5):
    rng = random.Random(seed)
    c = grammar.compiled
    got, tries = [], 0
    while len(got) < n and tries < n * 50:
        tries += 1
        stacks, _ = grammar.initial_state()
        text = []
        while True:
            can_end = any(len(s) == 0 for s in stacks)
            if can_end and (rng.random() < p_end or len(text) > max_len // 2):
                got.append("".join(text))
                break
            live = [s for s in stacks if s]
            if not live or len(text) > max_len:
                break
            s = rng.choice(live)
            opts = _choices(c, s[-1], rng)
            if not opts:
                break
            ch = rng.choice(opts)
            nxt = c.accept_code_points(stacks, [ord(ch)])
            if not nxt:
                break
            stacks = nxt
            text.append(ch)
    return got
