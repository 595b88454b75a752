"""llama-lookup-stats (llama.cpp examples/lookup/lookup-stats.cpp): how well ngram-cache drafting
would do on a text (-p / -f), without running the model: the tokens in chunks of the context size
(-c), each "generated" as if the model always produced the text, drafting up to
--spec-draft-n-max tokens from the context cache and the -lcs / -lcd caches
(pyllama.speculative.ngram_cache.lookup_stats). Prints llama.cpp's statistics block."""
from __future__ import annotations

import sys
import time

from ._args import LK
from ._common import Output, guard, load_model, log, parse_or_exit
from .lookup import load_caches, print_stats


def run(argv) -> int:
    params = parse_or_exit(LK, argv)
    lg = log()
    from pyllama.errors import PyllamaError
    from pyllama.kv.swa import ctx_geometry
    from pyllama.speculative.ngram_cache import lookup_stats
    try:
        model = load_model(params)
    except PyllamaError as e:
        lg.error(f"main: error: unable to load model ({e})")
        return 1
    kw = params.context_kwargs(model.hparams.n_ctx_train)
    n_ctx = ctx_geometry(max(8, kw["n_ctx"]), kw["n_seq_max"], kw["kv_unified"])[0]
    inp = model.tokenize(params.prompt, add_special=True, parse_special=True)
    caches = load_caches(params.speculative, lg)
    if caches is None:
        return 1
    static, dynamic, t_flat = caches
    t_start = time.perf_counter()

    def progress(i_start, n_input):
        eta = (n_input - i_start) * (time.perf_counter() - t_start) / i_start
        lg.info(f"lookup-stats: {i_start}/{n_input} done, ETA: {int(eta) // 60:02d}:"
                f"{int(eta) % 60:02d}")
    n_draft = params.speculative.n_max
    t0 = time.perf_counter()
    r = lookup_stats(inp, n_ctx, n_draft, static, dynamic, progress)
    t_draft = time.perf_counter() - t0
    out = Output(params)
    out("\n")
    print_stats(lg, n_draft, r["n_predict"], r["n_drafted"], r["n_accept"], t_flat, t_draft)
    out("\n\n")
    return 0


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)
