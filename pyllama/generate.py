"""Prompt -> token stream over a Context: prefix reuse, stop tokens, limits, streaming text.

`generate()` remembers, per (context, sequence), which tokens the cache holds, reuses the longest
common prefix with the new prompt (rolling the rest back with seq_rm) when the SWA window of the
first re-evaluated token is still in the cache, and otherwise re-processes the prompt from scratch.
"""
from __future__ import annotations

import codecs
import weakref
from typing import Callable, Iterable, Iterator

import numpy as np

from .batch import Batch
from .errors import ContextError

_HISTORY: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def cached_tokens(ctx, seq_id: int) -> list[int]:
    """Tokens the cache holds for seq_id (as decoded through this module), kept consistent with the
    memory: a sequence rolled back with seq_rm keeps its prefix; an unknown one is empty."""
    hist = _HISTORY.setdefault(ctx, {})
    toks = hist.get(seq_id, [])
    n = ctx.memory.seq_pos_max(seq_id) + 1
    if n < len(toks):
        del toks[n:]
    elif n > len(toks):          # decoded by someone else: we do not know these tokens
        ctx.memory.seq_rm(seq_id, -1, -1)
        toks = []
    hist[seq_id] = toks
    return toks


def set_cached_tokens(ctx, seq_id: int, tokens: list[int]) -> None:
    """Tell this module which tokens seq_id's cache holds (positions 0..len-1), e.g. after a
    state or session file was restored into it."""
    _HISTORY.setdefault(ctx, {})[seq_id] = list(tokens)


def window_ok(ctx, seq_id: int, n_keep: int) -> bool:
    """Can decoding continue at position n_keep after seq_rm(seq_id, n_keep, -1) with every
    position of its window present?"""
    hp = ctx.hp
    if n_keep == 0:
        return True
    pos_min = ctx.memory.seq_pos_min(seq_id)
    if not hp.is_swa_any():
        return pos_min <= 0
    return pos_min <= max(0, n_keep - hp.n_swa + 1)


def prepare_prompt(ctx, prompt: list[int], seq_id: int = 0) -> int:
    """Make seq_id hold a prefix of prompt; returns how many prompt tokens are already cached
    (always < len(prompt), so the last prompt token is decoded and produces logits)."""
    toks = cached_tokens(ctx, seq_id)
    n = 0
    lim = min(len(toks), len(prompt) - 1)
    while n < lim and toks[n] == prompt[n]:
        n += 1
    if not window_ok(ctx, seq_id, n):
        n = 0
    ctx.memory.seq_rm(seq_id, n, -1)
    del toks[n:]
    return n


def decode_tokens(ctx, tokens: list[int], seq_id: int = 0, logits_last: bool = True,
                  logits_all: bool = False, one_row: bool = False) -> None:
    """Decode tokens after what seq_id holds, in n_batch chunks; logits for the last one (or for
    all of them: then the batch must fit in n_batch). one_row: Context.decode's (speculative
    verification in the llama.cpp numerics)."""
    if logits_all and len(tokens) > ctx.n_batch:
        raise ContextError(f"{len(tokens)} tokens with logits do not fit in n_batch {ctx.n_batch}")
    toks = cached_tokens(ctx, seq_id)
    start = len(toks)
    for b0 in range(0, len(tokens), ctx.n_batch):
        chunk = np.asarray(tokens[b0:b0 + ctx.n_batch], dtype=np.int32)
        flags = np.full(len(chunk), logits_all, bool)
        if logits_last and b0 + len(chunk) == len(tokens):
            flags[-1] = True
        pos = np.arange(start + b0, start + b0 + len(chunk), dtype=np.int32)
        b = Batch(chunk, pos=pos, seq_ids=[seq_id] * len(chunk), logits=flags)
        rc = ctx.decode(b, one_row=True) if one_row else ctx.decode(b)
        if rc != 0:
            raise ContextError("failed to find a memory slot (context full)" if rc == 1 else
                               f"decode failed with code {rc}")
        toks.extend(int(t) for t in chunk)


def context_shift(ctx, seq_id: int, n_keep: int, n_discard: int | None = None) -> int:
    """llama.cpp's context shift (tools/completion: "infinite text generation via context
    shifting"): drop n_discard cached tokens after the first n_keep (half of the rest by
    default) and move the later ones back by n_discard positions (their K rows are re-roped at
    the next decode). Returns n_discard."""
    toks = cached_tokens(ctx, seq_id)
    n_past = len(toks)
    if n_discard is None:
        n_discard = (n_past - n_keep) // 2
    ctx.memory.seq_rm(seq_id, n_keep, n_keep + n_discard)
    ctx.memory.seq_add(seq_id, n_keep + n_discard, n_past, -n_discard)
    del toks[n_keep:n_keep + n_discard]
    return n_discard


def generate(ctx, prompt_tokens: list[int], sampler, n_predict: int = -1, seq_id: int = 0,
             stop_tokens: Iterable[int] | None = None,
             on_token: Callable[[int], None] | None = None, ctx_shift: bool = False,
             n_keep: int = 0, on_shift: Callable[[int], None] | None = None,
             prompt_decoded: bool = False) -> Iterator[int]:
    """Yield sampled tokens continuing prompt_tokens until a stop token (the model's EOG set
    by default; it is yielded), n_predict tokens (-1: until the context is full).

    As llama.cpp's completion loop, a sampled token is decoded only while the cache then stays
    below n_ctx_seq: once it would reach it, generation stops (the last token is still yielded)
    or, with ctx_shift, context_shift(n_keep) makes room first (on_shift(n_discard) is called;
    the memory must be able to shift: `ctx.memory.can_shift()`). prompt_decoded: the cache
    already holds exactly prompt_tokens and the context's last logits are its last token's
    (a prompt cache restored and replayed): sampling starts at once."""
    if not prompt_tokens:
        raise ContextError("empty prompt")
    if ctx_shift and not ctx.memory.can_shift():
        raise ContextError("context shift is not supported by this context")
    stops = set(ctx.model.vocab.eog_ids if stop_tokens is None else stop_tokens)
    if prompt_decoded:
        if cached_tokens(ctx, seq_id) != list(prompt_tokens):
            raise ContextError("prompt_decoded: the cache does not hold the prompt")
    else:
        n_cached = prepare_prompt(ctx, prompt_tokens, seq_id)
        decode_tokens(ctx, prompt_tokens[n_cached:], seq_id)
    n_ctx_seq = ctx.n_ctx_seq
    n_gen = 0
    while n_predict < 0 or n_gen < n_predict:
        tok = int(sampler.sample(ctx.get_logits_ith(-1)))
        sampler.accept(tok)
        n_gen += 1
        if on_token is not None:
            on_token(tok)
        yield tok
        if tok in stops or (n_predict >= 0 and n_gen >= n_predict):
            return
        if len(cached_tokens(ctx, seq_id)) + 1 >= n_ctx_seq:
            if not ctx_shift:
                return
            n_discard = context_shift(ctx, seq_id, n_keep)
            if on_shift is not None:
                on_shift(n_discard)
        decode_tokens(ctx, [tok], seq_id)


class TokenStreamDecoder:
    """Turns a stream of token pieces (bytes) into text, emitting only whole UTF-8 characters."""

    def __init__(self, vocab, special: bool = True):
        self.vocab, self.special = vocab, special
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._dec.decode(self.vocab.token_to_piece(token, self.special))

    def flush(self) -> str:
        return self._dec.decode(b"", final=True)
