"""llama-lookup (llama.cpp examples/lookup/lookup.cpp): generation with ngram-cache drafts.

The context cache counts the prompt's 1..4-grams and every token generated; each round drafts up to
--spec-draft-n-max tokens (default 3) from it, the dynamic cache (-lcd, earlier generations) and
the static cache (-lcs, llama-lookup-create's 2-grams), verified by the target in one batch
(pyllama.speculative.speculative_generate with llama.cpp's fixed draft lengths). n_predict is
checked after each round, as lookup.cpp does, so up to n_draft tokens more than -n may come. At
the end the context cache is merged into the dynamic cache and saved to -lcd (when given).
Output: stdout "\\n\\n" + prompt + generated text (special tokens as text), stderr llama.cpp's
statistics lines. Default numerics: invariant (the text is llama-completion --numerics
invariant's); --numerics llama.cpp gives llama.cpp's llama-lookup's text (its batch arithmetic).
"""
from __future__ import annotations

import os
import sys
import time

from ._args import LK
from ._common import Output, guard, load_model, log, parse_or_exit, print_perf


def fmt_ratio(a: float, b: float, spec: str) -> str:
    """printf of a / b in C float arithmetic: x/0 is inf, 0/0 glibc's "-nan"."""
    if b == 0:
        return "-nan" if a == 0 else ("inf" if a > 0 else "-inf")
    return format(a / b, spec)


def load_caches(sp, lg):
    """(static, dynamic, load seconds) as lookup.cpp loads them: a static cache that cannot be
    read is an error (None returned), a missing dynamic cache is an empty one."""
    from pyllama.errors import PyllamaError
    from pyllama.speculative.ngram_cache import cache_load
    t0 = time.perf_counter()
    static, dynamic = {}, {}
    if sp.lookup_cache_static:
        try:
            static = cache_load(sp.lookup_cache_static)
        except PyllamaError:
            lg.error(f"failed to open static lookup cache: {sp.lookup_cache_static}")
            return None
    if sp.lookup_cache_dynamic and os.path.exists(sp.lookup_cache_dynamic):
        try:
            dynamic = cache_load(sp.lookup_cache_dynamic)
        except PyllamaError as e:
            lg.error(f"failed to load dynamic lookup cache: {e}")
            return None
    return static, dynamic, time.perf_counter() - t0


def print_stats(lg, n_draft, n_predict, n_drafted, n_accept, t_flat, t_draft) -> None:
    """The statistics block of lookup.cpp and lookup-stats.cpp."""
    us = t_draft * 1e6
    lg.info("")
    lg.info(f"n_draft      = {n_draft}")
    lg.info(f"n_predict    = {n_predict}")
    lg.info(f"n_drafted    = {n_drafted}")
    lg.info(f"t_draft_flat = {t_flat * 1e3:.2f} ms")
    lg.info(f"t_draft      = {t_draft * 1e3:.2f} ms, {fmt_ratio(us, n_drafted, '.2f')} us per "
            f"token, {fmt_ratio(n_drafted, 1e-6 * us, '.2f')} tokens per second")
    lg.info(f"n_accept     = {n_accept}")
    lg.info(f"accept       = {fmt_ratio(100.0 * n_accept, n_drafted, '.3f')}%")


def run(argv) -> int:
    params = parse_or_exit(LK, argv)
    lg = log()
    from pyllama.errors import PyllamaError
    from pyllama.speculative import SpecParams, SpecStats, speculative_generate
    from pyllama.speculative.ngram_cache import LookupDrafter, cache_save
    from ._session import make_context, make_sampler
    sp = params.speculative
    n_draft = sp.n_max
    t0 = time.perf_counter()
    try:
        model = load_model(params)
    except PyllamaError as e:
        lg.error(f"main: error: unable to load model ({e})")
        return 1
    ctx = make_context(model, params)
    ids = model.tokenize(params.prompt, add_special=True, parse_special=True)
    caches = load_caches(sp, lg)
    if caches is None:
        return 1
    static, dynamic, t_flat = caches
    if len(ids) > ctx.n_ctx - 4:
        lg.error(f"main: prompt too long ({len(ids)} tokens, max {ctx.n_ctx - 4})")
        return 1
    if not ids:
        lg.error("main: empty prompt")
        return 1
    sampler = make_sampler(model, params, ctx)
    t_load = time.perf_counter() - t0
    out = Output(params)
    out.raw(b"\n\n" + b"".join(model.token_to_piece(t, True) for t in ids))
    drafter = LookupDrafter(n_draft, static, dynamic)
    st = SpecStats()
    history = list(ids)
    # lookup.cpp stops once n_predict > -n (-n <= 0: at end of generation only)
    n = params.n_predict + 1 if params.n_predict > 0 else -1
    # one_row=False: llama.cpp's llama-lookup verifies with its batch arithmetic (--numerics llama.cpp)
    spec = SpecParams(n_max=n_draft, n_min=0, mode="chain", round_stop=True, one_row=False)
    # lookup.cpp decodes the prompt but its last token, then that token alone (its logits and
    # K/V then have the one-token arithmetic in the llama.cpp numerics)
    from pyllama.generate import decode_tokens
    t1 = time.perf_counter()
    if len(ids) > 1:
        decode_tokens(ctx, ids[:-1], 0, logits_last=False)
    st.t_prompt += time.perf_counter() - t1
    for tok in speculative_generate(ctx, sampler, ids, drafter, spec, n_predict=n, stats=st):
        out.raw(model.token_to_piece(tok, True))
        history.append(tok)
    dyn = drafter.finish(history)
    if sp.lookup_cache_dynamic:
        cache_save(dyn, sp.lookup_cache_dynamic)
    out("\n\n")
    n_input = len(ids)
    lg.info(f"encoded {n_input:4d} tokens in {st.t_prompt:8.3f} seconds, speed: "
            f"{fmt_ratio(len(history), st.t_prompt, '8.3f')} t/s")
    lg.info(f"decoded {st.n_predict:4d} tokens in {st.t_gen:8.3f} seconds, speed: "
            f"{fmt_ratio(st.n_predict, st.t_gen, '8.3f')} t/s")
    print_stats(lg, n_draft, st.n_predict, st.n_drafted, st.n_accept, t_flat, st.t_draft)
    lg.info("\ntarget:\n")
    print_perf(lg, t_load, st.n_prompt, st.t_prompt, st.n_rounds + 1, st.t_gen)
    out("\n\n")
    return 0


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)
