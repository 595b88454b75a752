"""`python -m pyllama <tool> [args]`: run a llama.cpp-named tool (llama-server, llama-cli, ...).

The tools live in the top-level `tools/` folder, installed as `pyllama.tools`; in a source
checkout (PYTHONPATH=repo) that folder is mapped onto `pyllama.tools` here.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import sys

TOOLS = {
    "server": "server", "cli": "cli", "completion": "completion", "simple": "simple",
    "speculative": "speculative", "speculative-simple": "speculative_simple", "bench": "bench",
    "perplexity": "perplexity", "tokenize": "tokenize", "embedding": "embedding", "lookup": "lookup",
    "lookup-create": "lookup_create", "lookup-merge": "lookup_merge", "lookup-stats": "lookup_stats",
}


def tools_package():
    """pyllama.tools: the tools/ folder next to this pyllama package when it is a source checkout
    (an editable install elsewhere, e.g. a git worktree's main checkout, must not shadow it),
    else the installed package."""
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools")
    if "pyllama.tools" in sys.modules or not os.path.isfile(os.path.join(folder, "_args.py")):
        try:
            return importlib.import_module("pyllama.tools")
        except ImportError:
            pass
    spec = importlib.util.spec_from_file_location(
        "pyllama.tools", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])
    module = importlib.util.module_from_spec(spec)
    sys.modules["pyllama.tools"] = module
    spec.loader.exec_module(module)
    return module


def usage() -> str:
    names = ", ".join(f"llama-{n}" for n in TOOLS)
    return f"usage: python -m pyllama <tool> [args...]\ntools: {names}\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        sys.stdout.write(usage())
        return 0 if argv else 1
    name = argv[0][6:] if argv[0].startswith("llama-") else argv[0]
    if name == "flags-doc":  # developer command: regenerate docs/flags.md from the flag table
        tools_package()
        print(importlib.import_module("pyllama.tools._flagsdoc").write())
        return 0
    if name not in TOOLS:
        sys.stderr.write(f"error: unknown tool '{argv[0]}'\n" + usage())
        return 1
    tools_package()
    module = importlib.import_module(f"pyllama.tools.{TOOLS[name]}")
    sys.argv = [f"llama-{name}"] + argv[1:]
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
