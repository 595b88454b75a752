#!/usr/bin/env python3
"""Extract llama.cpp's flag table from common/arg.cpp into tests/data/llamacpp_flags.json.

    python scripts/extract_llamacpp_flags.py [LLAMA_CPP_TREE]

LLAMA_CPP_TREE defaults to the vendored tree of `bash scripts/build_llamacpp.sh src`. One entry
per `add_opt(common_arg(...))`: the positive and negative spellings, the env var, the examples
(llama_example values from set_examples; COMMON when absent), the excludes, whether the handler
takes a value, and whether it is sampling/speculative/preset-only. The snapshot is what
tests/tools/test_flag_snapshot.py checks pyllama's table (tools/_args.py) against.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "data", "llamacpp_flags.json")


def _tree() -> str:
    if len(sys.argv) > 1:
        return sys.argv[1]
    src = subprocess.check_output(["bash", os.path.join(HERE, "build_llamacpp.sh"), "src"],
                                  text=True).strip()
    return os.path.join(src, "vendor", "llama.cpp")


def _literal_end(text: str, i: int) -> int:
    """Index just past the string or char literal opening at text[i]."""
    j, n = i + 1, len(text)
    while j < n and text[j] != text[i]:
        j += 2 if text[j] == "\\" else 1
    return j + 1


def _strip_comments(text: str) -> str:
    """Blank out // and /* */ comments, keeping string and char literals intact."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = _literal_end(text, i)
            out.append(text[i:j])
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _match(text: str, i: int) -> int:
    """Index just past the bracket closing the one at text[i] (strings skipped)."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack, n = [], len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            i = _literal_end(text, i)
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")}]":
            if stack.pop() != c:
                raise ValueError(f"unbalanced at {i}")
            if not stack:
                return i + 1
        i += 1
    raise ValueError("unterminated")


def _split_top(text: str) -> list[str]:
    """Split a call's argument text at top-level commas."""
    parts, depth, cur, i, n = [], 0, [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = _literal_end(text, i)
            cur.append(text[i:j])
            i = j
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


_STR = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _strings(text: str) -> list[str]:
    return [bytes(m, "utf-8").decode("unicode_escape") for m in _STR.findall(text)]


def _lambda_kind(arg: str) -> str:
    """flag | bool | value, from the handler's parameter list."""
    m = re.match(r"\[[^\]]*\]\s*\(([^)]*)\)", arg)
    params = [p.strip() for p in m.group(1).split(",")]
    if len(params) == 1:
        return "flag"
    return "bool" if re.match(r"bool\b", params[1]) else "value"


def extract(arg_cpp: str) -> list[dict]:
    text = _strip_comments(open(arg_cpp, encoding="utf-8").read())
    start = text.index("common_params_context common_params_parser_init(")
    out = []
    for m in re.finditer(r"add_opt\(\s*common_arg\(", text[start:]):
        i = start + m.start()
        call_end = _match(text, i + len("add_opt"))
        ctor_open = start + m.end() - 1
        ctor_end = _match(text, ctor_open)
        args = _split_top(text[ctor_open + 1:ctor_end - 1])
        pos = _strings(args[0])
        neg = _strings(args[1]) if args[1].startswith("{") else []
        handler = next(a for a in args if a.startswith("["))
        kind = _lambda_kind(handler)
        tail = text[ctor_end:call_end - 1]
        env = re.search(r'\.set_env\(\s*"([^"]+)"', tail)
        ex = re.search(r"\.set_examples\(\s*\{([^}]*)\}", tail)
        if ex is None and ".set_examples(mmproj_examples)" in tail:
            ex = re.search(r"mmproj_examples\s*=\s*\{([^}]*)\}", text)
        exc = re.search(r"\.set_excludes\(\s*\{([^}]*)\}", tail)
        names = lambda g: [e.strip().replace("LLAMA_EXAMPLE_", "")
                           for e in g.group(1).split(",") if e.strip()] if g else []
        out.append({
            "args": pos, "neg": neg, "env": env.group(1) if env else None,
            "examples": names(ex) or ["COMMON"], "excludes": names(exc),
            "takes_value": kind == "value", "kind": kind,
            "sampling": ".set_sampling()" in tail, "spec": ".set_spec()" in tail,
            "preset_only": ".set_preset_only()" in tail,
        })
    return out


def main() -> None:
    tree = _tree()
    flags = extract(os.path.join(tree, "common", "arg.cpp"))
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        json.dump({"source": "llama.cpp 0c1e570 common/arg.cpp", "flags": flags}, f, indent=1)
        f.write("\n")
    print(f"{len(flags)} options -> {OUT}")


if __name__ == "__main__":
    main()
