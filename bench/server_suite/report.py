"""Tables for bench/llama_server_suite.sh: per test the outcome on pyllama's llama-server and on
llama.cpp's, then per file the counts.

    python report.py PYLLAMA(.xml|DIR) [LLAMACPP(.xml|DIR)] [--passes-out FILE]
                     [--dedup-map FILE]

Outcomes: pass, FAIL, skip, - (not run). --passes-out writes the node ids llama.cpp's server
passed (one per line), the list tests/server/test_llama_server_suite.py checks pyllama against.
--dedup-map: the SUITE_DEDUP=1 map of pyllama_suite_patch.py ("deselected<TAB>representative"
node ids); each deselected test gets its representative's outcome (marked "=" in the table),
so the counts are the whole file's.
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


def _option(argv, name):
    if name not in argv:
        return None, argv
    i = argv.index(name)
    return argv[i + 1], argv[:i] + argv[i + 2:]


def expand(out: dict, dedup_map: str | None) -> dict:
    """The outcomes with each deduplicated test given its representative's ("=pass", ...)."""
    if not dedup_map or not out:
        return out
    out = dict(out)
    with open(dedup_map) as f:
        for line in f:
            dropped, _, rep = line.rstrip("\n").partition("\t")
            dropped, rep = (os.path.basename(x.split("::", 1)[0]) + "::" + x.split("::", 1)[1]
                            for x in (dropped, rep))
            if rep in out:
                out[dropped] = "=" + out[rep].lstrip("=")
    return out


def main(argv) -> int:
    passes_out, argv = _option(argv, "--passes-out")
    dedup_map, argv = _option(argv, "--dedup-map")
    ours = expand(outcomes(argv[0]), dedup_map)
    ref = expand(outcomes(argv[1] if len(argv) > 1 else None), dedup_map)
    nodes = sorted(set(ours) | set(ref))
    width = max([len(n) for n in nodes] + [10])
    print(f"{'test':<{width}}  {'pyllama':>7}  {'llama.cpp':>9}")
    for n in nodes:
        print(f"{n:<{width}}  {ours.get(n, '-'):>7}  {ref.get(n, '-'):>9}")
    files = OrderedDict()
    for n in nodes:
        f = files.setdefault(n.split("::")[0], [0, 0, 0, 0, 0])
        f[0] += 1
        o, r = ours.get(n, "-").lstrip("="), ref.get(n, "-").lstrip("=")
        f[1] += o == "pass"
        f[2] += r == "pass"
        f[3] += o == "pass" and r == "pass"
        f[4] += r == "pass" and o != "pass"
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
            f.write("".join(n + "\n" for n in nodes if ref.get(n, "-").lstrip("=") == "pass"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
