"""Prebuild the kernel fatbins next to the sources (install time, CI, or a GPU box):

    python -m pyllama.backend.cuda.build [--arch 80 --arch 90] [--out DIR]

Each cuda/<name>.cu becomes <name>.fatbin with SASS for every --arch and PTX for the highest (so
newer GPUs JIT it). The runtime loads these first (pyllama.backend.cuda.runtime); without them it
builds a fatbin for the device at first use, which needs nvcc.
"""
from __future__ import annotations

import argparse
import os
import sys

from .runtime import KERNEL_FILES, compile_fatbin, kernel_dir


def gencode(archs: list[str]) -> list[str]:
    flags = []
    for a in archs:
        flags += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    top = max(archs, key=int)
    return flags + ["-gencode", f"arch=compute_{top},code=compute_{top}"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama.backend.cuda.build")
    ap.add_argument("--arch", action="append", help="compute capability, e.g. 80 (repeatable)")
    ap.add_argument("--out", default=None, help="output folder (default: the kernel folder)")
    a = ap.parse_args(argv)
    archs = a.arch or ["80", "90"]
    out = a.out or kernel_dir()
    for name in KERNEL_FILES:
        path = compile_fatbin(name, os.path.join(out, name + ".fatbin"), gencode(archs))
        print(path, os.path.getsize(path), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
