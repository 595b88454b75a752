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
        log().info("main: chat template is available, enabling conversation mode (disable it "
                   "with -no-cnv)")
        return True
    return False


def _n_predict(params) -> int:
    return -1 if params.n_predict == -2 else params.n_predict


def completion(params, model, ctx, sampler, out: Output):
    """Raw completion of the prompt; with -i/-if, then alternate with user input."""
    from ._session import stream
    ids = model.tokenize(params.prompt, add_special=True, parse_special=True)
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
    st, n_seen = None, 0    # n_seen: tokens the sampler has accepted
    if not params.interactive_first:
        st = stream(ctx, model, ids, sampler, _n_predict(params), out, params.special,
                    params.antiprompt, params.sampling.ignore_eos, params.special)
        ids = ids + st.tokens
        n_seen = len(ids)
        _report_stop(st, out, interactive)
    while interactive:
        line = _read_user(out, params)
        if line is None:
            break
        text = params.input_prefix + line + params.input_suffix
        ids = ids + model.tokenize(text, add_special=params.input_prefix_bos, parse_special=False)
        st = stream(ctx, model, ids, sampler, _n_predict(params), out, params.special,
                    params.antiprompt, params.sampling.ignore_eos, params.special, n_seen=n_seen)
        ids = ids + st.tokens
        n_seen = len(ids)
    return st or _empty_stats()


def verbose_prompt(model, prompt: str, ids) -> None:
    """--verbose-prompt: the prompt and its tokens on stderr, as llama.cpp's main prints them."""
    lg = log()
    lg.info(f"main: prompt: '{prompt}'")
    lg.info(f"main: number of tokens in prompt = {len(ids)}")
    for t in ids:
        piece = model.token_to_piece(t, True).decode("utf-8", "replace")
        lg.info(f"{t:6d} -> '{piece}'")
    lg.info("")


def _report_stop(st, out: Output, interactive: bool) -> None:
    if st.stop == "eog" and not interactive:
        out(" [end of text]\n")
    elif st.stop == "context":
        log().warning("context full and context shift is disabled => stopping")


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
            log().warning("context full and context shift is disabled => stopping")
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
