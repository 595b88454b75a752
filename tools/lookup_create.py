"""llama-lookup-create (llama.cpp examples/lookup/lookup-create.cpp): tokenize the prompt (-p / -f)
and write the static lookup cache of its 2-grams to -lcs, in llama.cpp's file format and record
order (pyllama.speculative.ngram_cache), for llama-lookup / llama-server -lcs."""
from __future__ import annotations

import sys
import time

from ._args import LK
from ._common import guard, load_model, log, parse_or_exit


def run(argv) -> int:
    params = parse_or_exit(LK, argv)
    lg = log()
    from pyllama.errors import PyllamaError
    from pyllama.speculative.ngram_cache import NGRAM_STATIC, cache_save, cache_update
    path = params.speculative.lookup_cache_static
    if not path:
        lg.error("error: -lcs/--lookup-cache-static FNAME is required: the file to write")
        return 1
    try:
        model = load_model(params)
    except PyllamaError as e:
        lg.error(f"main: error: unable to load model ({e})")
        return 1
    inp = model.tokenize(params.prompt, add_special=True, parse_special=True)
    sys.stderr.write("main: tokenization done\n")
    cache: dict = {}
    t0 = time.perf_counter()

    def progress(n_done, n_todo):          # llama.cpp's print_progress lines
        eta = int((n_todo - n_done) * (time.perf_counter() - t0) / n_done)
        sys.stderr.write(f"common_ngram_cache_update: {n_done}/{n_todo} done, ETA: "
                         f"{eta // 60:02d}:{eta % 60:02d}\n")
    cache_update(cache, NGRAM_STATIC, NGRAM_STATIC, inp, len(inp), progress)
    sys.stderr.write(f"main: hashing done, writing file to {path}\n")
    cache_save(cache, path)
    return 0


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)
