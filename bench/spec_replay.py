"""Replay greedy outputs through the model-free drafters without the model: rounds, acceptance
and the speed-up a verification cost curve c(k) predicts (tokens / sum of c(drafted) over the
rounds, one decode per token for plain decoding). Greedy acceptance is the longest prefix of a
draft that equals the output, so every drafter and policy can be compared on the very outputs a
bench run produced, in seconds, under several cost curves (a verification of k drafts costs c(k)
one-token decodes; pyllama's is about 1 + 0.3 k on 2 cores, llama.cpp's flatter).

    python bench/spec_replay.py bench/results/speculative-<model>-<stamp>.json \\
        [--slopes 0.27,0.37] [--spec-types ngram-simple,ngram-map-k,ngram-mod] [--policies cost,fixed]

Besides each drafter as --spec-type builds it (tools' defaults; cost-aware policy or fixed), two
bounds: `policy-oracle` (ngram-simple's proposals cut to their accepted prefix when that pays:
what a perfect draft-length policy would get) and `copy-oracle` (at every step the longest
continuation copyable from anywhere in the history, if it pays: no copy-based drafter does
better).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import numpy as np  # noqa: E402

from pyllama.speculative import (NgramDrafter, VerifyCost, drafter_chain,  # noqa: E402
                                 with_policy)

N_MAX = 48


def replay(prompt, out, drafter, n_max, cost) -> dict:
    """speculative_generate's rounds on a known greedy output."""
    history = list(prompt)
    drafter.begin(history)
    history.append(out[0])
    n, total, rounds, drafted, acc = 1, 0.0, 0, 0, 0
    while n < len(out):
        budget = min(n_max, len(out) - n - 1)
        drafts = drafter.draft(history, budget) if budget > 0 else []
        a = 0
        while a < len(drafts) and drafts[a] == out[n + a]:
            a += 1
        drafter.rollback(len(history) + a)
        drafter.accept(a, len(drafts))
        history += out[n:n + a + 1]
        n += a + 1
        total += cost(len(drafts))
        rounds += 1
        drafted += len(drafts)
        acc += a
    return dict(speedup=(len(out) - 1) / total, rounds=rounds, drafted=drafted, accepted=acc)


def policy_oracle(prompt, out, cost) -> float:
    d = NgramDrafter()
    h = list(prompt)
    d.begin(h)
    h.append(out[0])
    n, total = 1, 0.0
    while n < len(out):
        prop = d.draft(h, min(N_MAX, len(out) - n - 1)) if n < len(out) - 1 else []
        a = 0
        while a < len(prop) and prop[a] == out[n + a]:
            a += 1
        k = a if a and (a + 1) / cost(a) > 1 else 0
        d.accept(k, k)
        total += cost(k)
        h += out[n:n + k + 1]
        n += k + 1
    return (len(out) - 1) / total


def copy_oracle(prompt, out, cost) -> float:
    h = list(prompt) + [out[0]]
    n, total = 1, 0.0
    while n < len(out):
        best = 0
        for s in np.flatnonzero(np.asarray(h) == out[n]):
            ln, L = 0, len(h)
            while n + ln < len(out) and ln < N_MAX:
                src = h[s + ln] if s + ln < L else out[n + ln - (L - s)]
                if src != out[n + ln]:
                    break
                ln += 1
            best = max(best, ln)
        a = min(best, len(out) - n - 1)
        k = a if a and (a + 1) / cost(a) > 1 else 0
        total += cost(k)
        h += out[n:n + k + 1]
        n += k + 1
    return (len(out) - 1) / total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", help="bench_speculative.py JSON files")
    ap.add_argument("--slopes", default="0.27,0.37")
    ap.add_argument("--spec-types", default="ngram-simple,ngram-map-k,ngram-mod")
    ap.add_argument("--policies", default="cost,fixed")
    args = ap.parse_args()
    types, pols = args.spec_types.split(","), args.policies.split(",")
    cols = [f"{t} {p}" for t in types for p in pols] + ["policy-oracle", "copy-oracle"]
    print("| output | c(k) | " + " | ".join(cols) + " |")
    print("|---|---|" + "---|" * len(cols))
    for path in args.results:
        rows = [r for r in json.load(open(path))["rows"] if "output_tokens" in r]
        for r in rows:
            for slope in (float(x) for x in args.slopes.split(",")):
                cost = VerifyCost.linear(slope)
                cells = []
                for t in types:
                    for p in pols:
                        d, n_max = drafter_chain([t], {}, lookup=({}, {}))
                        if p == "cost":
                            d = with_policy(d)
                        res = replay(r["prompt_tokens"], r["output_tokens"], d, n_max, cost)
                        cells.append(f"{res['speedup']:.2f}")
                cells.append(f"{policy_oracle(r['prompt_tokens'], r['output_tokens'], cost):.2f}")
                cells.append(f"{copy_oracle(r['prompt_tokens'], r['output_tokens'], cost):.2f}")
                print(f"| {os.path.basename(path).split('-2026')[0]} {r['prompt']} "
                      f"{r['numerics']} | 1+{slope}k | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
