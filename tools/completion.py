"""llama-completion (llama.cpp's classic `main`): one-shot completion of -p/-f, interactive mode
(-i/-if, --in-prefix/--in-suffix, -r), or conversation mode (-cnv; automatic when the model has a
chat template, -no-cnv turns it off). Generated text on stdout, logs and timings on stderr (llama.cpp tools/completion/completion.cpp).
"""
from __future__ import annotations

import sys
import time

from ._args import CO
from ._common import Output, guard, load_model, log, parse_or_exit, print_perf

EXTRA_USAGE = """
example usage:

  text generation:     llama-completion -m your_model.gguf -p "I believe the meaning of life is" -n 128 -no-cnv

  chat (conversation): llama-completion -m your_model.gguf -sys "You are a helpful assistant"

"""


def run(argv) -> int:
    params = parse_or_exit(CO, argv, EXTRA_USAGE)
    if params.n_predict < -2:
        log().error("--n-predict must be >= -2")
        return 1
    if params.n_ctx != 0 and params.n_ctx < 8:     # completion.cpp: -c -5 runs with 8
        log().warning("llama_completion: warning: minimum context size is 8, using minimum size.")
        params.n_ctx = 8
    from pyllama.errors import PyllamaError
    t0 = time.perf_counter()
    try:
        model = load_model(params)
    except PyllamaError as e:
        log().error(f"common_init_: failed to load model '{params.model or 'default'}': {e}")
        log().error("llama_completion: error: unable to create context")
        return 1
    t_load = time.perf_counter() - t0
    from ._session import TimedSampler, make_context, make_sampler
    ctx = make_context(model, params)
    if not check_ctx_shift(params, ctx):
        return 1
    sampler = TimedSampler(make_sampler(model, params, ctx))
    t_ctx = time.perf_counter()     # llama.cpp's t_start_ms: reset once the context is ready
    out = Output(params)
    if _conversation(params, model):
        stats = chat_loop(params, model, ctx, sampler, out)
    else:
        stats = completion(params, model, ctx, sampler, out)
    if stats is None:
        return 1
    out("\n\n")
    if params.perf:
        print_perf(log(), t_load, stats.n_prompt, stats.t_prompt, stats.n_eval, stats.t_eval,
                   t_sample=sampler.t_total, n_sample=sampler.n_sample,
                   t_total=time.perf_counter() - t_ctx)
    return 0


def _conversation(params, model) -> bool:
    if params.conversation is not None:
        return params.conversation
    if getattr(model.vocab, "chat_template", None) or params.chat_template:
        log().info("llama_completion: chat template is available, enabling conversation mode (disable it "
                   "with -no-cnv)")
        return True
    return False


def _n_predict(params) -> int:
    return -1 if params.n_predict == -2 else params.n_predict


def completion(params, model, ctx, sampler, out: Output):
    """Raw completion of the prompt; with -i/-if, then alternate with user input."""
    from ._session import stream
    session = load_session(params, ctx)
    if session is None:
        return None
    ids = model.tokenize(params.prompt, add_special=True, parse_special=True)
    if not params.prompt and session and not params.interactive_first:
        ids = list(session)           # completion.cpp: "use session tokens"
    if not ids:
        log().error("input is empty")
        return None
    if len(ids) > ctx.n_ctx - 4:
        log().error(f"prompt is too long ({len(ids)} tokens, max {ctx.n_ctx - 4})")
        return None
    if params.verbose_prompt:
        verbose_prompt(model, params.prompt, ids)
    if params.display_prompt:
        out.raw(b"".join(model.token_to_piece(t, params.special) for t in ids))
    interactive = params.interactive or params.interactive_first
    decoded = use_session(params, ctx, session, ids)
    if decoded is None:
        return None
    shift = _shift_kw(params, model, ids)
    st, n_seen = None, 0    # n_seen: tokens the sampler has accepted
    if not params.interactive_first:
        shifted = []
        st = stream(ctx, model, ids, sampler, _n_predict(params), out, params.special,
                    params.antiprompt, params.sampling.ignore_eos, params.special,
                    prompt_decoded=decoded, on_shift=shifted.append, **shift)
        ids = ids + st.tokens
        n_seen = len(ids)
        _report_stop(st, out, interactive, params)
        if params.path_prompt_cache and params.prompt_cache_all and not params.prompt_cache_ro \
                and not shifted and not interactive:
            # completion.cpp: the decoded tokens plus the last sampled one (not decoded); a
            # context shift cleared the session path
            path = params.path_prompt_cache
            out(f"\nllama_completion: saving final output to session file '{path}'\n")
            ctx.state_save_file(path, ids)
            log().info(f"saved final session to {path}, n_tokens = {len(ids)}")
    while interactive:
        line = _read_user(out, params)
        if line is None:
            break
        text = params.input_prefix + line + params.input_suffix
        ids = ids + model.tokenize(text, add_special=params.input_prefix_bos, parse_special=False)
        st = stream(ctx, model, ids, sampler, _n_predict(params), out, params.special,
                    params.antiprompt, params.sampling.ignore_eos, params.special, n_seen=n_seen,
                    **shift)
        ids = ids + st.tokens
        n_seen = len(ids)
    return st or _empty_stats()


def load_session(params, ctx):
    """--prompt-cache FNAME: the session file's tokens ([] when there is none yet); None after
    a load error (logged; the tool exits 1)."""
    import os
    from pyllama.errors import ContextError
    path = params.path_prompt_cache
    if not path:
        return []
    lg = log()
    lg.info(f"llama_completion: attempting to load saved session from '{path}'")
    if not os.path.exists(path):
        lg.info("llama_completion: session file does not exist, will create.")
        return []
    if os.path.getsize(path) == 0:
        lg.info("llama_completion: The session file is empty. A new session will be initialized.")
        return []
    try:
        tokens = ctx.state_load_file(path, ctx.n_ctx)
    except (ContextError, OSError) as e:
        lg.error(f"llama_completion: failed to load session file '{path}': {e}")
        return None
    lg.info(f"llama_completion: loaded a session with prompt size of {len(tokens)} tokens")
    return tokens


def use_session(params, ctx, session: list, ids: list):
    """completion.cpp's session matching: keep the common prefix of the session and the
    prompt, replay its last token for logits (logits are not in session files), decode the
    rest of the prompt, saving the session before its last token when the prompt grew (not
    with --prompt-cache-ro). True when the prompt is then fully decoded with its logits; False
    when nothing came from a session; None on a decode error."""
    from pyllama.generate import decode_tokens, set_cached_tokens
    path = params.path_prompt_cache
    if not path:
        return False
    lg = log()
    n_match = 0
    if session:
        while n_match < min(len(session), len(ids)) and session[n_match] == ids[n_match]:
            n_match += 1
        if not params.prompt and n_match == len(ids):
            lg.info("llama_completion: using full prompt from session file")
        elif n_match >= len(ids):
            lg.info("llama_completion: session file has exact match for prompt!")
        elif n_match < len(ids) // 2:
            lg.warning(f"llama_completion: session file has low similarity to prompt ({n_match} / "
                       f"{len(ids)} tokens); will mostly be reevaluated")
        else:
            lg.info(f"llama_completion: session file matches {n_match} / {len(ids)} tokens of prompt")
        if len(session) > n_match:
            ctx.memory.seq_rm(-1, max(n_match - 1, 0), -1)
            session = session[:n_match]
    do_save = n_match < len(ids) and not params.prompt_cache_ro
    set_cached_tokens(ctx, 0, session[:max(n_match - 1, 0)])
    if session and n_match > 0:
        # common_replay_last_token: the last matching token alone at n_match - 1
        ctx.memory.seq_rm(0, n_match - 1, -1)
        decode_tokens(ctx, [session[n_match - 1]], 0)
        do_save = False
        lg.info("llama_completion: replayed last token from session")
    else:
        ctx.memory.clear()
        set_cached_tokens(ctx, 0, [])
    rest = ids[n_match:]
    if not rest:
        return bool(session)
    if do_save and len(rest) > 1:
        # common_prompt_batch_decode: all but the last token, save, then the last one alone
        decode_tokens(ctx, rest[:-1], 0, logits_last=False)
        ctx.state_save_file(path, ids)
        lg.info(f"cmn  common_promp: saved session before last token to {path}, n_new = "
                f"{len(ids)}")
        decode_tokens(ctx, rest[-1:], 0)
    else:
        decode_tokens(ctx, rest, 0)       # one new token: common_prompt_batch_decode saves none
    return True


def check_ctx_shift(params, ctx) -> bool:
    """common_init_from_params: --context-shift on a memory that cannot shift (an iSWA cache
    whose SWA part is smaller than its base part) is turned off with llama.cpp's warning.
    --keep at or past the context size can never be kept: one error (llama.cpp clamps it
    silently; docs/architecture.md, departures)."""
    if params.ctx_shift and not ctx.memory.can_shift():
        log().warning("cmn  common_init_: KV cache shifting is not supported for this "
                      "context, disabling KV cache shifting")
        params.ctx_shift = False
    if params.n_keep >= ctx.n_ctx:
        log().error(f"error: --keep {params.n_keep} is not smaller than the context size "
                    f"(n_ctx = {ctx.n_ctx})")
        return False
    return True


def _shift_kw(params, model, ids) -> dict:
    """completion.cpp's n_keep (the whole prompt for -1 or more than the prompt, else --keep
    plus the BOS it always keeps) and whether a full context shifts (not with -n -2)."""
    add_bos = bool(model.vocab.add_bos) and not params.use_jinja
    n_keep = len(ids) if params.n_keep < 0 or params.n_keep > len(ids) else params.n_keep + add_bos
    return {"ctx_shift": params.ctx_shift and params.n_predict != -2, "n_keep": n_keep}


def verbose_prompt(model, prompt: str, ids) -> None:
    """--verbose-prompt: the prompt and its tokens on stderr, as llama.cpp's main prints them."""
    lg = log()
    lg.info(f"llama_completion: prompt: '{prompt}'")
    lg.info(f"llama_completion: number of tokens in prompt = {len(ids)}")
    for t in ids:
        piece = model.token_to_piece(t, True).decode("utf-8", "replace")
        lg.info(f"{t:6d} -> '{piece}'")
    lg.info("")


def _report_stop(st, out: Output, interactive: bool, params=None) -> None:
    if st.stop == "eog" and not interactive:
        out(" [end of text]\n")
    elif st.stop == "context":
        _context_full(params)


def _context_full(params) -> None:
    if params is not None and params.ctx_shift and params.n_predict == -2:
        log().warning("\n\nllama_completion: context full and n_predict == -2 => stopping")
    else:
        log().warning("\n\nllama_completion: context full and context shift is disabled => stopping")


def chat_loop(params, model, ctx, sampler, out: Output):
    """Conversation mode: -p is the first user turn; then `> ` prompts on stdin until EOF."""
    from ._session import ChatSession
    chat = ChatSession(model, ctx, params, sampler)
    first = params.prompt if "prompt" in params.set_fields and params.prompt else None
    last = None
    while True:
        user = first if first is not None else _read_user(out, params)
        first = None
        if user is None:
            break
        last = chat.turn(user, out, _n_predict(params))
        if last.stop == "context":
            _context_full(params)
            break
        if params.single_turn:
            break
        out("\n")
    return last or _empty_stats()


def _read_user(out: Output, params) -> str | None:
    out("\n> ")
    lines = []
    while True:
        line = sys.stdin.readline()
        if not line:
            if not lines:
                log().info("EOF by user")
                return None
            break
        line = line.rstrip("\n")
        if params.multiline_input or not line.endswith("\\"):
            lines.append(line)
            if not params.multiline_input or not line:
                break
        else:
            lines.append(line[:-1])
    return "\n".join(lines)


def _empty_stats():
    from ._session import GenStats
    return GenStats()


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)
