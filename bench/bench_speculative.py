"""Speculative decoding speed-up on the bundled models: plain greedy vs n-gram and self-draft
speculation, on a code prompt and a prose prompt (tokens/s, acceptance rate, speed-up).

    python bench/bench_speculative.py [--model gemma-3-270m] [-n 128] [--self-layers 6]
                                      [--drafters ngram,self] [--clock wall|cpu] [--threads N]

--clock cpu reports tokens per CPU second (time.process_time(), all threads): the figure to
compare on a shared, loaded machine, where wall clock mostly measures the other processes.

Greedy output is checked to be identical to plain decoding on every run. Results (markdown + JSON)
go to bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import pyllama  # noqa: E402
from pyllama.generate import generate  # noqa: E402
from pyllama.sampling import SamplerChain, SamplerParams  # noqa: E402
from pyllama.speculative import (DraftModelDrafter, NgramDrafter, SpecParams, SpecStats,  # noqa
                                 speculative_generate, truncated_model)

PROMPTS = {
    "code": "Write a Python class `Matrix` with methods add, sub, mul and transpose, each "
            "method fully implemented with loops, followed by unit tests for every method.\n\n"
            "```python\nclass Matrix:\n    def __init__(self, rows):\n        self.rows = rows\n",
    "prose": "The history of the printing press begins in the fifteenth century, when",
}


def greedy(model):
    return SamplerChain(SamplerParams(temp=0.0), model.n_vocab)


CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
OPTS = {"clock": time.perf_counter, "threads": None}


def make_ctx(model):
    kw = {"n_threads": OPTS["threads"]} if OPTS["threads"] else {}
    return pyllama.Context(model, n_ctx=2048, **kw)


def run_plain(model, prompt, n):
    ctx = make_ctx(model)
    clock = OPTS["clock"]
    t = clock()
    out = list(generate(ctx, prompt, greedy(model), n_predict=n, stop_tokens=()))
    return out, n / (clock() - t)


def run_spec(model, prompt, n, drafter, n_max, ctx=None):
    ctx = ctx or make_ctx(model)
    st = SpecStats()
    clock = OPTS["clock"]
    t = clock()
    out = list(speculative_generate(ctx, greedy(model), prompt, drafter, SpecParams(n_max=n_max),
                                    n_predict=n, stop_tokens=(), stats=st))
    return out, n / (clock() - t), st


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--self-layers", type=int, default=6)
    ap.add_argument("--drafters", default="ngram,self", help="comma list of: ngram, self")
    ap.add_argument("--clock", choices=sorted(CLOCK), default="wall")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    OPTS.update(clock=CLOCK[args.clock], threads=args.threads)
    chosen = set(args.drafters.split(","))
    model = pyllama.load_model(args.model)
    rows = []
    for kind, text in PROMPTS.items():
        prompt = model.tokenize(text)
        ref, tps0 = run_plain(model, prompt, args.n)
        rows.append((kind, "none", "-", f"{tps0:.2f}", "-", "1.00"))
        drafters = [
            ("ngram", "ngram-simple", 8, lambda: NgramDrafter()),
            ("self", f"self-draft {args.self_layers}L", 4, lambda: DraftModelDrafter(
                make_ctx(truncated_model(model, args.self_layers)))),
        ]
        for key, name, n_max, make in drafters:
            if key not in chosen:
                continue
            out, tps, st = run_spec(model, prompt, args.n, make(), n_max)
            assert out == ref, f"{name}: speculative output differs from plain greedy"
            rows.append((kind, name, str(n_max), f"{tps:.2f}", f"{100 * st.accept_rate:.1f}%",
                         f"{tps / tps0:.2f}"))
            print(rows[-1], file=sys.stderr)
    unit = "tokens/s" if args.clock == "wall" else "tokens/CPU-s"
    lines = [f"# speculative decoding, {args.model}, greedy, {args.n} tokens, "
             f"{time.strftime('%Y-%m-%d %H:%M')}", "",
             f"clock: {args.clock}, threads: {args.threads or 'default'}", "",
             f"| prompt | drafter | n_max | {unit} | accept | speed-up |", "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with open(os.path.join(HERE, "results", f"speculative-{args.model}-{stamp}.md"), "w") as f:
        f.write(text)
    with open(os.path.join(HERE, "results", f"speculative-{args.model}-{stamp}.json"), "w") as f:
        json.dump(rows, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
