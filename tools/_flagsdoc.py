"""Generate docs/flags.md from the flag table in _args (run: `python -m pyllama flags-doc`);
tests/tools/test_flags_doc.py checks the file is current."""
from __future__ import annotations

import os
import sys

STATUS_TEXT = {"impl": "implemented", "noop": "accepted, no effect (warns)",
               "unsupported": "not supported yet (exit 1)",
               "deprecated": "old spelling, works (warns)"}
TOOL_CODES = {"server": "S", "cli": "C", "completion": "Co", "speculative": "Sp",
              "perplexity": "P", "tokenize": "T", "embedding": "E", "lookup": "L"}
HEADER = """# Command-line flags

Generated from `tools/_args.py` by `python -m pyllama flags-doc`; do not edit by hand.

Every flag of llama.cpp's shared parser (llama-server, llama-cli, llama-completion,
llama-speculative[-simple], llama-perplexity, llama-tokenize, llama-embedding,
llama-lookup[-create,-stats]) has one
disposition here:
**implemented**; **accepted, no effect** (prints one warning line: only where the flag means
nothing in pyllama); **not supported yet** (one error line, exit 1; for a `--x`/`--no-x` pair
only the side that turns the feature on); **old spelling** (a spelling llama.cpp removed, still
accepted here with a one-line note). Rules as in llama.cpp: config files
(`/etc/llama.cpp/config.ini`, then `${XDG_CONFIG_HOME:-~/.config}/llama.cpp/config.ini`; keys
are long option names without dashes, global part and `[*]` section) < environment < command line, `_` and
`-` are the same in long names, no `--opt=value`, no-value flags set from the environment only
by a truthy value (`on`, `enabled`, `true`, `1`), `LLAMA_ARG_NO_<X>` turns a `--x/--no-x` pair
off. Differences: no `-m` means the bundled default model (gemma-3-270m); `-md` alone enables
draft-model speculation; the removed spellings listed last keep working.

Tools: S server, C cli, Co completion, Sp speculative and speculative-simple, P perplexity,
T tokenize, E embedding, L lookup, lookup-create and lookup-stats. llama-bench and llama-simple have their own parsers (see their `-h`).

"""


def _row(o) -> str:
    spell = ", ".join(f"`{a}`" for a in o.all_args)
    tools = " ".join(c for t, c in TOOL_CODES.items() if t in o.tools)
    if len(o.tools) == len(TOOL_CODES):
        tools = "all"
    env = ", ".join(f"`{e}`" for e in ([o.env] if o.env else []) + list(o.old_env))
    status = STATUS_TEXT[o.status] + (f": {o.note}" if o.note and o.status != "impl" else "")
    desc = o.help.replace("\n", " ").replace("|", "\\|")
    return f"| {spell} | {o.kind} | {env} | {tools} | {status} | {desc} |\n"


def render() -> str:
    from ._args import OPTIONS
    out = [HEADER]
    titles = {"common": "Common", "sampling": "Sampling", "speculative": "Speculative decoding",
              "example": "Tool-specific"}
    for group, title in titles.items():
        out.append(f"## {title}\n\n| Flag | Type | Env | Tools | Disposition | Meaning |\n"
                   "|---|---|---|---|---|---|\n")
        out += [_row(o) for o in OPTIONS if o.group == group]
        out.append("\n")
    return "".join(out)


def doc_path() -> str:
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                        "flags.md")




def write() -> str:
    path = doc_path()
    with open(path, "w") as f:
        f.write(render())
    return path
