"""The grammar token filter and the common sampler's grammar order (common/sampling.cpp).

The fast filter (a DFA over the sorted vocabulary, _filter.pyx) must keep exactly the tokens
llama.cpp's llama_grammar_apply_impl keeps; the reference is matcher.Compiled.token_allowed, a
direct port of llama_grammar_reject_candidates, run on every token of a vocabulary built to hit
the hard cases (pieces split inside UTF-8 sequences, stray continuation bytes, NUL bytes, empty
pieces, EOG tokens)."""
import json
import os
import random

import numpy as np
import pytest

from pyllama.errors import GrammarError
from pyllama.grammar import Grammar
from pyllama.grammar.filter import VocabIndex
from pyllama.grammar.matcher import decode_utf8
from pyllama.grammar.sampler import GrammarSampler
from pyllama.sampling import SamplerChain, SamplerParams

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "grammar", "llamacpp-cases.json")
GRAMMARS = json.load(open(DATA, encoding="utf-8"))["grammars"]


def make_pieces(seed=0, n=3000):
    rng = random.Random(seed)
    words = ['{', '}', '[', ']', '"', ':', ',', ' ', '\n', '"a', 'a"', '":', '": ', '{"', '"}',
             'true', 'false', 'null', 'nu', 'll', '1', '12', '-', '.', 'e', 'E+', '0', '-0',
             '\\', '\\n', '\\u', '00e9', '=', '+', '*', '/', '(', ')', 'x', 'y', 'ab', 'int ',
             'main', 'return', ';', '1. ', 'e4', ' e5', 'Nf3', 'O-O', '#', '- ', 'é', 'ü',
             'こ', 'んに', 'ちは', '、', '世界', '日本', 'カタ', '\u2028']
    out = [w.encode() for w in words]
    multi = "éü日本こんにちはカタカナ、世界ぁゟ一鿿😀"
    for _ in range(n - len(out)):
        k = rng.random()
        if k < 0.3:
            s = "".join(rng.choice('abcxyz019 {}[]":,.-+eE\\nu\n') for _ in range(rng.randint(1, 5)))
            out.append(s.encode())
        elif k < 0.7:
            b = "".join(rng.choice(multi + "ab ") for _ in range(rng.randint(1, 3))).encode()
            i, j = sorted(rng.sample(range(len(b) + 1), 2))
            out.append(b[i:j] if j > i else b[:1])  # cut anywhere, inside sequences too
        elif k < 0.85:
            out.append(bytes(rng.randint(0x80, 0xFF) for _ in range(rng.randint(1, 3))))
        else:
            out.append(bytes(rng.randint(0, 0xFF) for _ in range(rng.randint(1, 4))))
    out += [b"", b"\0a", b"a\0b", b"</s>"]
    return out


PIECES = make_pieces()
EOG = [len(PIECES) - 1]
INDEX = VocabIndex(PIECES, EOG)


def reference_mask(compiled, stacks, partial):
    m = np.zeros(len(PIECES), dtype=np.uint8)
    for t, p in enumerate(INDEX.pieces):
        if INDEX.eog[t]:
            m[t] = any(len(s) == 0 for s in stacks)
        elif p:
            m[t] = compiled.token_allowed(stacks, partial, t, p)
    return m


CASES = {
    "json": GRAMMARS["json.gbnf"],
    "japanese": GRAMMARS["japanese.gbnf"],
    "chess": GRAMMARS["chess.gbnf"],
    "list": GRAMMARS["list.gbnf"],
    "arithmetic": GRAMMARS["arithmetic.gbnf"],
    "c": GRAMMARS["c.gbnf"],
    "partial": 'root ::= ("é" | [ぁ-ゟ]+ | [^a-z\\x80-\\uFFFF] | "😀")+ "."?',
    "tokens": 'root ::= <[5]> "a" !<[7]> [x-z]* <[3000]>?',
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_filter_equals_llamacpp_reject_candidates(name):
    gs = GrammarSampler(CASES[name], index=INDEX)
    c = gs.filter.c
    rng = random.Random(1)
    for step in range(8):
        st = gs.state
        stacks, partial = gs.stacks, (st[1], st[2])
        m = gs.mask()
        ref = reference_mask(c, stacks, partial)
        if c.has_tokens:
            # documented difference: a token reference met inside a token's text rejects it;
            # llama.cpp keeps such a token and then fails to accept it (empty stacks)
            extra = np.flatnonzero(ref & ~m)
            assert not np.any(m & ~ref)
            assert all(not c.accept_token(stacks, partial, int(t), INDEX.pieces[t])[0]
                       for t in extra)
            ref = m.copy()
        assert np.array_equal(m, ref), (name, step, np.flatnonzero(m != ref)[:10])
        for t in rng.sample(range(len(PIECES)), 200):  # the sample-first single-token check
            gs.filter.masks.clear()
            assert gs.allows(t) == bool(ref[t]), (name, step, t, PIECES[t])
        allowed = [t for t in np.flatnonzero(ref) if not INDEX.eog[t]]
        if not allowed:
            break
        t = int(rng.choice(allowed))
        before = (list(gs.stacks), gs.state)
        gs.accept(t)
        # accept equals llama_grammar_accept_token on the stacks
        ref_stacks, ref_partial = c.accept_token(before[0], (before[1][1], before[1][2]), t,
                                                 INDEX.pieces[t])
        assert sorted(set(ref_stacks)) == sorted(gs.stacks)
        assert (gs.state[1], gs.state[2]) == (ref_partial if ref_partial[1] > 0 else (0, 0))


def test_eog_only_where_the_grammar_may_end():
    gs = GrammarSampler('root ::= "ab" "c"?', index=INDEX)
    eog = EOG[0]
    assert not gs.allows(eog) and not gs.can_end
    gs.accept(PIECES.index(b"ab"))
    assert gs.allows(eog) and gs.mask()[eog] == 1
    with pytest.raises(GrammarError, match="Unexpected empty grammar stack"):
        gs.clone().accept(PIECES.index(b"x"))
    gs.accept(eog)  # accepting EOG where the grammar may end changes nothing
    assert gs.can_end


def test_pieces_are_c_strings():
    gs = GrammarSampler('root ::= "a" "b"?', index=INDEX)
    m = gs.mask()
    assert m[PIECES.index(b"a\0b")] == 1 and m[PIECES.index(b"\0a")] == 0
    assert m[PIECES.index(b"")] == 0


# -- the common sampler: sample first, the grammar only on rejection ---------------------------
class TinyVocab:
    """A vocabulary for SamplerChain: pieces by id, EOG ids, and `<token>` lookup."""

    def __init__(self, pieces, eog):
        self.pieces, self.eog_ids, self.n_vocab = pieces, frozenset(eog), len(pieces)

    def token_to_piece(self, i, special=True):
        return self.pieces[i]

    def tokenize(self, text, add_special=False, parse_special=True):
        b = text.encode()
        return [self.pieces.index(b)] if b in self.pieces else list(b)


VOCAB = TinyVocab(PIECES, EOG)


def _chain(grammar, **kw):
    params = SamplerParams(seed=1234, grammar=grammar, **kw)
    return SamplerChain(params, len(PIECES), eog_ids=EOG, vocab=VOCAB)


def test_sample_first_then_resample_with_the_grammar():
    rng = np.random.default_rng(0)
    g = 'root ::= ("true" | "false" | "1" | "12") " "?'
    chain = _chain(g)
    plain = SamplerChain(SamplerParams(seed=1234), len(PIECES), eog_ids=EOG)
    gs = GrammarSampler(g, index=INDEX)
    for step in range(30):
        logits = rng.normal(size=len(PIECES)).astype(np.float32) * 3
        if gs.can_end:
            break
        # llama.cpp: one chain sample; if the grammar rejects it, mask and sample again
        t = plain.sample(logits)
        if not gs.allows(t):
            t = plain.sample(gs.apply(logits))
        got = chain.sample(logits)
        assert got == t and gs.allows(got)
        chain.accept(got)
        plain.accept(got)
        gs.accept(got)
    assert chain.rng.random() == plain.rng.random()  # same number of draws


def test_greedy_with_grammar_is_argmax_over_allowed():
    rng = np.random.default_rng(1)
    chain = _chain(GRAMMARS["json.gbnf"], temp=0.0, samplers=["temperature"])
    gs = GrammarSampler(GRAMMARS["json.gbnf"], index=INDEX)
    for _ in range(20):
        logits = rng.normal(size=len(PIECES)).astype(np.float32)
        t = chain.sample(logits)
        masked = gs.apply(logits)
        assert t == int(np.argmax(masked))
        chain.accept(t)
        gs.accept(t)


def test_prompt_tokens_do_not_advance_the_grammar():
    chain = _chain('root ::= "x"')
    chain.accept(PIECES.index(b"ab"), is_generated=False)
    assert chain.grammar.allows(PIECES.index(b"x"))


def test_clone_and_reset_keep_the_grammar_state():
    chain = _chain('root ::= "ab" "x"')
    chain.accept(PIECES.index(b"ab"))
    c = chain.clone()
    assert c.grammar.allows(PIECES.index(b"x")) and not c.grammar.allows(PIECES.index(b"ab"))
    chain.reset()
    assert chain.grammar.allows(PIECES.index(b"ab"))


def test_probs_are_post_grammar():
    chain = _chain('root ::= "true" | "false"', temp=1.0)
    logits = np.zeros(len(PIECES), np.float32)
    probs = chain.probs_full(logits)
    assert set(np.flatnonzero(probs)) <= {PIECES.index(b"true"), PIECES.index(b"false")}


def test_grammar_needs_the_vocab():
    with pytest.raises(ValueError, match="vocabulary"):
        SamplerChain(SamplerParams(grammar='root ::= "a"'), 10)


# -- lazy grammars ---------------------------------------------------------------------------
def test_lazy_word_trigger_replays_from_the_match():
    g = 'root ::= "ab" [0-9]+'
    gs = GrammarSampler(g, index=INDEX, lazy=True, triggers=[("word", "ab")])
    assert not gs.active and gs.mask().all()
    gs.accept(PIECES.index(b"x"))
    assert not gs.active
    gs.accept(PIECES.index(b"ab"))   # "xab": the trigger, replayed from "ab" on
    assert gs.active
    m = gs.mask()
    assert m[PIECES.index(b"1")] and not m[PIECES.index(b"x")]


def test_lazy_pattern_group_and_partial_token():
    g = 'root ::= "a\\"" [0-9]'
    gs = GrammarSampler(g, index=INDEX, lazy=True, triggers=[("pattern", 'x(a")')])
    gs.accept(PIECES.index(b"x"))
    gs.accept(PIECES.index(b'a"'))
    assert gs.active  # the group starts inside the buffered text; its part is replayed
    assert gs.allows(PIECES.index(b"1")) and not gs.allows(PIECES.index(b"x"))


def test_lazy_full_pattern_and_token_trigger():
    gs = GrammarSampler('root ::= "xx" "y"', index=INDEX, lazy=True,
                        triggers=[("pattern_full", "xx")])
    gs.accept(PIECES.index(b"x"))
    assert not gs.active
    gs.accept(PIECES.index(b"x"))
    assert gs.active and gs.allows(PIECES.index(b"y"))
    tok = PIECES.index(b"ab")
    gs = GrammarSampler('root ::= <[%d]> "x"' % tok, index=INDEX, lazy=True,
                        triggers=[("token", tok)])
    gs.accept(PIECES.index(b"y"))
    assert not gs.active
    gs.accept(tok)
    assert gs.active and gs.allows(PIECES.index(b"x")) and not gs.allows(tok)


def test_lazy_chain_is_unconstrained_until_triggered():
    chain = _chain('root ::= "true"', grammar_lazy=True, grammar_triggers=(("word", "{"),))
    logits = np.full(len(PIECES), -5, np.float32)
    logits[PIECES.index(b"x")] = 10
    assert chain.sample(logits) == PIECES.index(b"x")


# -- pathological grammars -----------------------------------------------------------------------
def test_deep_recursion_stays_bounded():
    g = 'root ::= "(" root ")" | "x"'
    gs = GrammarSampler(g, index=INDEX)
    op = PIECES.index(b"(")
    for _ in range(300):
        gs.accept(op)
    m = gs.mask()
    assert m[op] and m[PIECES.index(b"x")] and not m[PIECES.index(b")")]


def test_decode_reference_matches_partial_states():
    # the filter's start state after a token ending inside a sequence carries llama.cpp's
    # partial_utf8
    gs = GrammarSampler(CASES["partial"], index=INDEX)
    first = "ぁ".encode()[:1]
    gs.accept(PIECES.index(first) if first in PIECES else INDEX.pieces.index(first))
    assert (gs.state[1], gs.state[2]) == decode_utf8(first)[1]
