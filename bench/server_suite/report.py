"""Tables for bench/llama_server_suite.sh: per test the outcome on pyllama's llama-server and on
llama.cpp's, then per file the counts.

    python report.py PYLLAMA(.xml|DIR) [LLAMACPP(.xml|DIR)] [--passes-out FILE]

Outcomes: pass, FAIL, skip, - (not run). --passes-out writes the node ids llama.cpp's server
passed (one per line), the list tests/server/test_llama_server_suite.py checks pyllama against.
"""
from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET
from collections import OrderedDict


def outcomes(path: str | None) -> dict:
    """node id ('test_basic.py::test_server_start_simple[...]') -> pass | FAIL | skip, from a
    junit XML file or a directory of them (one per suite file)."""
    if not path:
        return {}
    if os.path.isdir(path):
        out = {}
        for name in sorted(os.listdir(path)):
            if name.endswith(".xml"):
                out.update(outcomes(os.path.join(path, name)))
        return out
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "").split(".")[-1]
        node = f"{module}.py::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            out[node] = "FAIL"
        elif case.find("skipped") is not None:
            out[node] = "skip"
        else:
            out[node] = "pass"
    return out


def main(argv) -> int:
    passes_out = None
    if "--passes-out" in argv:
        i = argv.index("--passes-out")
        passes_out = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    ours = outcomes(argv[0])
    ref = outcomes(argv[1] if len(argv) > 1 else None)
    nodes = sorted(set(ours) | set(ref))
    width = max([len(n) for n in nodes] + [10])
    print(f"{'test':<{width}}  {'pyllama':>7}  {'llama.cpp':>9}")
    for n in nodes:
        print(f"{n:<{width}}  {ours.get(n, '-'):>7}  {ref.get(n, '-'):>9}")
    files = OrderedDict()
    for n in nodes:
        f = files.setdefault(n.split("::")[0], [0, 0, 0, 0, 0])
        f[0] += 1
        f[1] += ours.get(n) == "pass"
        f[2] += ref.get(n) == "pass"
        f[3] += ours.get(n) == "pass" and ref.get(n) == "pass"
        f[4] += ref.get(n) == "pass" and ours.get(n) != "pass"
    print()
    print("| file | tests | pyllama pass | llama.cpp pass | both | llama.cpp-only |")
    print("|---|---|---|---|---|---|")
    tot = [0, 0, 0, 0, 0]
    for name, c in files.items():
        print(f"| {name} | " + " | ".join(str(x) for x in c) + " |")
        tot = [a + b for a, b in zip(tot, c)]
    print("| total | " + " | ".join(str(x) for x in tot) + " |")
    if passes_out and ref:
        with open(passes_out, "w") as f:
            f.write("".join(n + "\n" for n in nodes if ref.get(n) == "pass"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
