#!/usr/bin/env python3
"""Record llama.cpp 0c1e570's built-in chat format cases (tests/test-chat-template.cpp: model
name, Jinja source, expected legacy output for its six-message conversation) into
tests/data/llamacpp_chat_templates.json for tests/vocab/test_chat_builtin.py.

    python scripts/extract_llamacpp_chat_templates.py [LLAMA_CPP_TREE]
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "tests", "data", "llamacpp_chat_templates.json")


def _cstr(text: str) -> str:
    """The value of concatenated C string literals (u8 prefixes, escapes, UTF-8 bytes)."""
    out = ""
    for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', text):
        out += bytes(m.group(1), "utf-8").decode("unicode_escape").encode("latin-1").decode()
    return out


def main() -> None:
    tree = sys.argv[1] if len(sys.argv) > 1 else os.path.join(subprocess.check_output(
        ["bash", os.path.join(HERE, "build_llamacpp.sh"), "src"], text=True).strip(),
        "vendor", "llama.cpp")
    src = open(os.path.join(tree, "tests", "test-chat-template.cpp"), encoding="utf-8").read()
    pat = (r"/\* \.name= \*/\s*(.*?),\s*/\* \.template_str= \*/\s*(.*?),\s*"
           r"/\* \.expected_output= \*/\s*(.*?),\s*/\* \.expected_output_jinja= \*/")
    cases = [{"name": _cstr(a), "template": _cstr(b), "expected": _cstr(c)}
             for a, b, c in re.findall(pat, src, re.S)]
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"source": "llama.cpp 0c1e570 tests/test-chat-template.cpp", "cases": cases},
                  f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"{len(cases)} cases -> {OUT}")


if __name__ == "__main__":
    main()
