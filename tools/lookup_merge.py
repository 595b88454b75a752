"""llama-lookup-merge (llama.cpp examples/lookup/lookup-merge.cpp): merge lookup cache files
(pyllama.speculative.ngram_cache's format, llama.cpp's) into the last one named."""
from __future__ import annotations

import sys

USAGE = ("Merges multiple lookup cache files into a single one.\n"
         "Usage: {} [--help] lookup_part_1.bin lookup_part_2.bin ... lookup_merged.bin\n")


def run(argv, prog: str = "llama-lookup-merge") -> int:
    from pyllama.errors import PyllamaError
    from pyllama.speculative.ngram_cache import cache_load, cache_merge, cache_save
    if len(argv) < 2:
        sys.stderr.write(USAGE.format(prog))
        return 1
    if any(a in ("-h", "--help") for a in argv):
        sys.stderr.write(USAGE.format(prog))
        return 0
    try:
        sys.stderr.write(f"lookup-merge: loading file {argv[0]}\n")
        merged = cache_load(argv[0])
        for path in argv[1:-1]:
            sys.stderr.write(f"lookup-merge: loading file {path}\n")
            cache_merge(merged, cache_load(path))
        sys.stderr.write(f"lookup-merge: saving file {argv[-1]}\n")
        cache_save(merged, argv[-1])
    except (PyllamaError, OSError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 1
    return 0


def main(argv=None) -> int:
    return run(sys.argv[1:] if argv is None else argv)
