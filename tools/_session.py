"""Shared by the generating tools: Context and sampler from Params, a streamed generation with
UTF-8-safe text, reverse prompts and timings, and a chat session over the model's template.
Only library calls: pyllama.Context, pyllama.sampling, pyllama.generate, pyllama.vocab.chat.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ._params import Params


def make_context(model, params: Params, n_seq: int = 1, n_ctx: int | None = None):
    import pyllama
    kw = params.context_kwargs(model.hparams.n_ctx_train)
    if n_ctx is not None:
        kw["n_ctx"] = n_ctx
    kw["n_ctx"] = max(8, kw["n_ctx"])
    kw["n_seq_max"] = max(1, n_seq)
    kw["numerics"] = params.numerics_for(model.backend.name)
    return pyllama.Context(model, **kw)


def make_sampler(model, params: Params, ctx=None, **overrides):
    """SamplerChain: the user's flags over the model's general.sampling.* over llama.cpp's."""
    from pyllama.sampling import SamplerChain, SamplerParams
    sp = SamplerParams.from_gguf_metadata(model.metadata, base=params.sampler_params(**overrides))
    vocab = model.vocab
    pieces = None
    if sp.dry_multiplier > 0:
        pieces = [vocab.token_to_piece(i, True).decode("utf-8", "replace")
                  for i in range(model.n_vocab)]
    from pyllama.errors import GrammarError, PyllamaError
    try:
        return SamplerChain(sp, model.n_vocab, eog_ids=tuple(vocab.eog_ids), token_pieces=pieces,
                            tokenize=lambda s: model.tokenize(s, False, False),
                            n_ctx=ctx.n_ctx if ctx is not None else 0,
                            n_ctx_train=model.hparams.n_ctx_train, vocab=vocab)
    except GrammarError as e:  # llama.cpp: "failed to parse grammar" (common_sampler_init)
        raise PyllamaError(f"failed to parse grammar: {e.describe()}") from None


class TimedSampler:
    """A sampler that keeps llama.cpp's perf counters (common_sampler's t_total_us, the chain's
    t_sample_us / n_sample): time spent in sample() and accept(), and the accepted tokens
    (prompt tokens included, as llama.cpp's completion accepts them). pyllama has no layer
    between the two, so "sampling" and "samplers" time are the same measurement."""

    def __init__(self, sampler):
        self.inner, self.t_total, self.n_sample = sampler, 0.0, 0

    def sample(self, *args, **kw):
        t = time.perf_counter()
        try:
            return self.inner.sample(*args, **kw)
        finally:
            self.t_total += time.perf_counter() - t

    def accept(self, token, is_generated: bool = True) -> None:
        t = time.perf_counter()
        try:
            self.inner.accept(token, is_generated)
        finally:
            self.t_total += time.perf_counter() - t
            self.n_sample += 1

    def __getattr__(self, name):
        return getattr(self.inner, name)


@dataclass
class GenStats:
    n_prompt: int = 0
    t_prompt: float = 0.0
    n_eval: int = 0
    t_eval: float = 0.0
    stop: str = ""          # eog | limit | antiprompt | context
    text: str = ""
    tokens: list = field(default_factory=list)

    def speeds(self) -> tuple[float, float]:
        return (self.n_prompt / self.t_prompt if self.t_prompt > 0 else 0.0,
                self.n_eval / self.t_eval if self.t_eval > 0 else 0.0)


def stream(ctx, model, prompt_ids: list[int], sampler, n_predict: int, on_piece: Callable,
           special: bool = False, antiprompts=(), ignore_eos: bool = False,
           print_eog: bool = False, n_seen: int = 0, ctx_shift: bool = False,
           n_keep: int = 0, on_shift: Callable | None = None,
           prompt_decoded: bool = False) -> GenStats:
    """Generate after prompt_ids, calling on_piece with each token's piece as raw bytes (what
    llama.cpp writes; st.text is their UTF-8 decoding). The EOG token's piece is passed only with
    print_eog; stops on a reverse prompt. The prompt tokens after the first n_seen (those the
    sampler has not seen yet) are accepted into the sampler first, as llama.cpp's completion
    loop and server slots (init_sampler) do, so penalties and DRY count them. With ctx_shift a
    full context is shifted (keeping the first n_keep cached tokens) instead of stopping."""
    import codecs
    from pyllama.generate import generate
    st = GenStats(n_prompt=len(prompt_ids))
    dec = codecs.getincrementaldecoder("utf-8")(errors="replace")
    eog = set(model.vocab.eog_ids)
    for tok in prompt_ids[n_seen:]:
        sampler.accept(tok, False)   # prompt tokens: not into the grammar
    t = time.perf_counter()
    t_smpl = getattr(sampler, "t_total", 0.0)    # a TimedSampler's time is not decode time
    for i, tok in enumerate(generate(ctx, prompt_ids, sampler, n_predict=n_predict,
                                     stop_tokens=() if ignore_eos else eog,
                                     ctx_shift=ctx_shift, n_keep=n_keep, on_shift=on_shift,
                                     prompt_decoded=prompt_decoded)):
        now = time.perf_counter()
        t_smpl, spent = getattr(sampler, "t_total", 0.0), t_smpl
        spent = t_smpl - spent
        if i == 0:
            st.t_prompt = now - t - spent
        else:
            st.t_eval += now - t - spent
            st.n_eval += 1
        t = now
        st.tokens.append(tok)
        is_eog = tok in eog and not ignore_eos
        piece = model.token_to_piece(tok, special) if (print_eog or not is_eog) else b""
        st.text += dec.decode(piece)
        on_piece(piece)
        if is_eog:
            st.stop = "eog"
            break
        if any(a and st.text.endswith(a) for a in antiprompts):
            st.stop = "antiprompt"
            break
    st.text += dec.decode(b"", final=True)
    if not st.stop:
        st.stop = "limit" if n_predict >= 0 and len(st.tokens) >= n_predict else "context"
    return st


class ChatSession:
    """Messages rendered through the model's chat template (ChatML when it has none); each turn
    re-renders the whole conversation and generate() reuses the cached common prefix."""

    def __init__(self, model, ctx, params: Params, sampler):
        from pyllama.vocab.chat import ChatTemplate
        self.model, self.ctx, self.params, self.sampler = model, ctx, params, sampler
        self.template = ChatTemplate.for_model(model.vocab, override=params.chat_template or None)
        self.messages: list[dict] = []
        self.n_seen = 0     # conversation tokens the sampler has accepted (llama-completion)
        self.n_keep = None  # llama-completion's n_keep, from the first prompt
        if params.system_prompt:
            self.messages.append({"role": "system", "content": params.system_prompt})

    def prompt_ids(self) -> list[int]:
        text = self.template.apply(self.messages, add_generation_prompt=True,
                                   **self.params.template_kwargs())
        vocab = self.model.vocab
        bos_text = vocab.token_to_piece(vocab.bos, True).decode("utf-8", "replace") \
            if getattr(vocab, "bos", -1) >= 0 else None
        add_special = not (bos_text and text.startswith(bos_text))
        return self.model.tokenize(text, add_special=add_special, parse_special=True)

    def turn(self, user: str, on_text: Callable, n_predict: int) -> GenStats:
        self.messages.append({"role": "user", "content": user})
        ids = self.prompt_ids()
        if self.params.tool == "cli":
            # llama.cpp's llama-cli asks its in-process server: a fresh sampler per request
            self.sampler.reset()
            self.n_seen = 0
        st = stream(self.ctx, self.model, ids, self.sampler, n_predict, on_text,
                    special=self.params.special, antiprompts=self.params.antiprompt,
                    n_seen=min(self.n_seen, len(ids)), **self.shift_kw(ids))
        self.n_seen = len(ids) + len(st.tokens)
        self.messages.append({"role": "assistant", "content": st.text})
        return st

    def shift_kw(self, ids) -> dict:
        """Context shift settings for this turn. llama-cli (the server's pre_decode): --keep
        (-1: the whole prompt) plus the BOS, at most n_ctx - 4. llama-completion: n_keep is
        fixed from its first prompt as completion.cpp does (tools/completion.py)."""
        p = self.params
        if not p.ctx_shift:
            return {}
        if p.tool == "cli":
            n_keep = len(ids) if p.n_keep < 0 else p.n_keep
            n_keep = min(self.ctx.n_ctx_seq - 4, n_keep + bool(self.model.vocab.add_bos))
            return {"ctx_shift": True, "n_keep": n_keep}
        if self.n_keep is None:
            add_bos = bool(self.model.vocab.add_bos) and not p.use_jinja
            self.n_keep = len(ids) if p.n_keep < 0 or p.n_keep > len(ids) else p.n_keep + add_bos
        return {"ctx_shift": p.n_predict != -2, "n_keep": self.n_keep}

    def regen(self, on_text: Callable, n_predict: int) -> GenStats | None:
        if len(self.messages) < 2 or self.messages[-1]["role"] != "assistant":
            return None
        self.messages.pop()
        return self.turn(self.messages.pop()["content"], on_text, n_predict)

    def clear(self) -> None:
        self.messages = [m for m in self.messages if m["role"] == "system"]
