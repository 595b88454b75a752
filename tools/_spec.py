"""Shared body of llama-speculative and llama-speculative-simple (llama.cpp examples/speculative/speculative.cpp, examples/speculative-simple/speculative-simple.cpp): target + drafter
(draft model, or n-gram lookup for -simple), the library's speculative loop, llama.cpp's output."""
from __future__ import annotations

import sys
import time

from ._common import Output, load_model, log, print_perf


def make_drafter(params, model, ctx, tool: str, lookup=None):
    """(drafter, longest draft) for the flags, or (None, 0) (llama.cpp: failed to initialize).
    Several --spec-type values combine as common_speculative_init does (pyllama.speculative.
    drafter_chain); llama-speculative always drafts with its -md model."""
    from dataclasses import asdict

    from pyllama.speculative import DraftModelDrafter, check_vocab_compatible, drafter_chain
    sp = params.speculative
    types = [t for t in sp.types if t != "none"]
    draft = None
    if sp.model and (tool == "speculative" or "draft-simple" in types):
        import pyllama
        from pyllama import models
        dm = pyllama.load_model(models.resolve(sp.model))
        check_vocab_compatible(model.vocab, dm.vocab)
        dctx = pyllama.Context(dm, n_ctx=ctx.n_ctx, n_batch=ctx.n_batch, n_ubatch=ctx.n_ubatch,
                               type_k=sp.cache_type_k, type_v=sp.cache_type_v,
                               flash_attn=ctx.flash_attn,       # the draft shares -fa
                               n_threads=params.n_threads if params.n_threads > 0 else None)
        draft = DraftModelDrafter(dctx, p_min=sp.p_min)
        if tool == "speculative":
            return _policy(sp, draft, model, dm), sp.n_max
    d, n_max = drafter_chain(types, asdict(sp), draft=draft, draft_n_max=sp.n_max,
                             lookup=lookup)
    return _policy(sp, d, model, draft.ctx.model if draft is not None else None), n_max


def _policy(sp, drafter, model, draft_model):
    """--spec-policy cost (the default): every drafter behind the cost-aware policy, a draft
    model's tokens costed by its weight bytes against the target's (pyllama.speculative.
    with_policy); fixed: llama.cpp's draft lengths."""
    if sp.policy != "cost" or drafter is None:
        return drafter
    from pyllama.speculative import draft_cost_ratio, with_policy
    dc = draft_cost_ratio(model, draft_model) if draft_model is not None else 0.0
    return with_policy(drafter, k_min=sp.n_min, draft_cost=dc)


def run_spec(params, tool: str) -> int:
    lg = log()
    if params.n_predict < -1:
        lg.error("--n-predict must be >= -1")
        return 1
    if tool == "speculative" and not params.speculative.model:
        lg.error("--model-draft is required")
        return 1
    from pyllama.errors import PyllamaError
    t0 = time.perf_counter()
    try:
        model = load_model(params)
    except PyllamaError as e:
        lg.error(f"main: error: unable to load model ({e})")
        return 1
    from ._session import make_context, make_sampler
    ctx = make_context(model, params)
    try:
        from pyllama.speculative.ngram_cache import load_lookup
        lookup = load_lookup(vars(params.speculative)) \
            if "ngram-cache" in params.speculative.types else None
    except PyllamaError as e:
        lg.error(str(e))
        return 1
    try:
        drafter, n_max = make_drafter(params, model, ctx, tool, lookup)
    except PyllamaError as e:
        lg.error(f"draft model vocab must match target model to use speculation but {e}")
        return 1
    if drafter is None:
        lg.error("failed to initialize speculative decoding")
        return 1
    ids = model.tokenize(params.prompt, add_special=True, parse_special=True)
    if len(ids) > ctx.n_ctx - 4 or len(ids) > ctx.n_batch:
        lg.error(f"prompt too long ({len(ids)} tokens, max {min(ctx.n_ctx - 4, ctx.n_batch)})")
        return 1
    t_load = time.perf_counter() - t0
    return _generate(params, model, ctx, drafter, n_max, ids, make_sampler(model, params, ctx),
                     t_load, tool)


def _generate(params, model, ctx, drafter, n_max, ids, sampler, t_load, tool) -> int:
    from pyllama.speculative import SpecParams, SpecStats, speculative_generate
    sp = params.speculative
    out = Output(params)
    out.raw(b"\n\n" + b"".join(model.token_to_piece(t, True) for t in ids))
    # llama-speculative samples drafts and accepts them by rejection at temperature > 0;
    # llama-speculative-simple samples the target chain at each row (common_sampler_sample_and_
    # accept_n): the same seed then gives plain decoding's tokens
    mode = "rejection" if tool == "speculative" and sampler.params.temp > 0 else "chain"
    st = SpecStats()
    n = params.n_predict + 1 if params.n_predict >= 0 else -1   # llama.cpp stops at n_predict > n
    for tok in speculative_generate(ctx, sampler, ids, drafter,
                                    SpecParams(n_max=n_max, n_min=sp.n_min, p_min=sp.p_min,
                                               mode=mode), n_predict=n, stats=st):
        out.raw(model.token_to_piece(tok, params.special))
    out("\n\n")
    _report(params, st, t_load)
    return 0


def _report(params, st, t_load) -> None:
    lg = log()
    def speed(n, t):  # noqa: E306
        return n / t if t > 0 else 0.0
    lg.info(f"encoded {st.n_prompt:4d} tokens in {st.t_prompt:8.3f} seconds, speed: "
            f"{speed(st.n_prompt, st.t_prompt):8.3f} t/s")
    lg.info(f"decoded {st.n_predict:4d} tokens in {st.t_gen:8.3f} seconds, speed: "
            f"{speed(st.n_predict, st.t_gen):8.3f} t/s")
    lg.info("")
    lg.info(f"n_draft   = {params.speculative.n_max}")
    lg.info(f"n_predict = {st.n_predict}")
    lg.info(f"n_drafted = {st.n_drafted}")
    lg.info(f"n_accept  = {st.n_accept}")
    accept = 100.0 * st.n_accept / st.n_drafted if st.n_drafted else float("nan")
    lg.info(f"accept    = {accept:.3f}%")
    lg.info("")
    lg.info("draft:")
    lg.info("")
    lg.info("target:")
    lg.info("")
    if params.perf:
        print_perf(lg, t_load, st.n_prompt, st.t_prompt, st.n_predict, st.t_gen)
