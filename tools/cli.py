"""llama-cli: the chat front end (llama.cpp's current llama-cli, tools/cli/cli.cpp). Banner and model info, then
chat turns: -p is the first user message, further turns come from stdin; /exit, /regen, /clear,
/read FILE; EOF or /exit ends with `Exiting...`. Timings after each answer unless
--no-show-timings. Runs the library in-process (llama.cpp starts an in-process server instead).
"""
from __future__ import annotations

import os
import sys

from ._args import C
from ._common import Output, build_info, guard, load_model, log, parse_or_exit

BANNER = r"""
                  _ _
 _ __  _   _| | | __ _ _ __ ___   __ _
| '_ \| | | | | |/ _` | '_ ` _ \ / _` |
| |_) | |_| | | | (_| | | | | | | (_| |
| .__/ \__, |_|_|\__,_|_| |_| |_|\__,_|
|_|    |___/
"""
COMMANDS = """available commands:
  /exit or Ctrl+C     stop or exit
  /regen              regenerate the last response
  /clear              clear the chat history
  /read FILE          add a text file as a user message
"""


OLD_NO_CNV = ("-no-cnv", "--no-conversation")


def run(argv) -> int:
    if any(a in OLD_NO_CNV for a in argv):
        # scripts from before llama-cli became chat-only: llama.cpp 0c1e570 rejects the flag
        # (its completion mode moved to llama-completion); run that tool, saying so
        from . import completion
        print("llama-cli: -no-cnv/--no-conversation is an old spelling: running as "
              "llama-completion (use llama-completion for raw completions)", file=sys.stderr)
        return completion.run(argv)
    params = parse_or_exit(C, argv)
    from pyllama.errors import PyllamaError
    out = Output(params)
    try:
        model = load_model(params)
    except PyllamaError as e:
        log().error(f"srv  llama_server: exiting due to model loading error ({e})")
        out("Error: the server exited before becoming ready\n")
        return 1
    from ._session import ChatSession, make_context, make_sampler
    ctx = make_context(model, params)
    from .completion import check_ctx_shift
    if not check_ctx_shift(params, ctx):
        return 1
    chat = ChatSession(model, ctx, params, make_sampler(model, params, ctx))
    out(header(model))
    first = params.prompt if "prompt" in params.set_fields and params.prompt else None
    if first is not None:
        out(f"\n> {first}\n\n")
        _answer(chat, params, out, first)
    while not (params.single_turn and first is not None):
        line = _read(out)
        if line is None or line.strip() == "/exit":
            break
        _command_or_turn(chat, params, out, line)
    out("\n\nExiting...\n")
    return 0


def header(model) -> str:
    _, number, commit = build_info()
    ftype = model.desc.split(" ", 2)[2] if model.desc.count(" ") >= 2 else model.desc
    return (BANNER + f"\nbuild      : b{number}-{commit}\nmodel      : "
            f"{os.path.basename(model.path)}\nftype      : {ftype}\nmodalities : text\n\n"
            + COMMANDS + "\n")


def _read(out: Output) -> str | None:
    out("\n> ")
    line = sys.stdin.readline()
    return None if not line else line.rstrip("\n")


def _command_or_turn(chat, params, out: Output, line: str) -> None:
    cmd = line.strip()
    if cmd == "/clear":
        chat.clear()
        out("Chat history cleared.\n")
    elif cmd == "/regen":
        st = chat.regen(out, params.n_predict)
        if st is None:
            out("Nothing to regenerate.\n")
        else:
            _timings(params, out, st)
    elif cmd.startswith("/read "):
        path = cmd[6:].strip()
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                chat.messages.append({"role": "user", "content": f.read()})
            out(f"Loaded text from '{path}'\n")
        except OSError as e:
            out(f"Error: cannot read '{path}': {e.strerror}\n")
    elif cmd:
        out("\n")
        _answer(chat, params, out, line)


def _answer(chat, params, out: Output, text: str) -> None:
    st = chat.turn(text, out, params.n_predict)
    out("\n")
    _timings(params, out, st)


def _timings(params, out: Output, st) -> None:
    if params.show_timings:
        pp, tg = st.speeds()
        out(f"\n[ Prompt: {pp:.1f} t/s | Generation: {tg:.1f} t/s ]\n")


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)
