"""Speculative decoding speed-up on the bundled models: plain greedy vs n-gram (fixed and
cost-aware draft length) and self-draft speculation, on a code prompt, a prose prompt and a
repetitive code-edit chat (the answer re-emits the given function): tokens per wall second and per
CPU second, acceptance, drafted tokens per round, speed-up.

    python bench/bench_speculative.py [--model gemma-3-270m] [-n 128] [--self-layers 6]
                                      [--drafters ngram,adaptive,self] [--reps 1] [--threads N]

Speeds are of generation after the first token (prompt processing excluded: the same for all).
Both clocks are read on every run; speed-ups are given for both (CPU time, process_time() of all
threads, is the figure to compare on a shared, loaded machine). With --reps R the plain and
speculative runs of a prompt alternate R times; speeds are medians, speed-ups the medians of the
ratios to the plain run of the same repetition. The verification cost
curve c(k) (a (k+1)-token decode relative to a 1-token decode, CPU time) is measured once per run
and drives the cost-aware drafter; the "model" column is the speed-up that curve predicts from the
rounds actually run (sum of c(drafted) vs one decode per token).

Greedy output is checked to be identical to plain decoding on every run. Results (markdown + JSON)
go to bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import pyllama  # noqa: E402
from pyllama.generate import generate  # noqa: E402
from pyllama.sampling import SamplerChain, SamplerParams  # noqa: E402
from pyllama.speculative import (DraftModelDrafter, DraftPolicy, NgramDrafter, SpecParams,  # noqa
                                 SpecStats, measure_verify_cost, speculative_generate,
                                 truncated_model)
from pyllama.vocab.chat import ChatTemplate  # noqa: E402

EDIT_CODE = '''def summarize_orders(orders, customers, min_total=0.0, currency="EUR"):
    """Group orders by customer and return per-customer totals, counts and averages."""
    by_customer = {}
    for order in orders:
        customer_id = order["customer_id"]
        if customer_id not in customers:
            continue
        total = 0.0
        for item in order["items"]:
            price = item["price"]
            quantity = item["quantity"]
            discount = item.get("discount", 0.0)
            total += price * quantity * (1.0 - discount)
        if total < min_total:
            continue
        entry = by_customer.setdefault(customer_id, {"total": 0.0, "count": 0, "orders": []})
        entry["total"] += total
        entry["count"] += 1
        entry["orders"].append(order["id"])
    result = []
    for customer_id, entry in by_customer.items():
        customer = customers[customer_id]
        average = entry["total"] / entry["count"] if entry["count"] else 0.0
        result.append({
            "customer_id": customer_id,
            "name": customer["name"],
            "email": customer.get("email", ""),
            "total": round(entry["total"], 2),
            "count": entry["count"],
            "average": round(average, 2),
            "currency": currency,
            "orders": sorted(entry["orders"]),
        })
    result.sort(key=lambda r: r["total"], reverse=True)
    return result


def top_customers(summary, n=3):
    return [row["name"] for row in summary[:n]]
'''

PROMPTS = {
    "code": "Write a Python class `Matrix` with methods add, sub, mul and transpose, each "
            "method fully implemented with loops, followed by unit tests for every method.\n\n"
            "```python\nclass Matrix:\n    def __init__(self, rows):\n        self.rows = rows\n",
    "prose": "The history of the printing press begins in the fifteenth century, when",
    "code-edit": [{"role": "user", "content": "Add type hints to every function in this code. "
                   "Reply with the complete updated code only.\n\n```python\n" + EDIT_CODE +
                   "```"}],
}


def tokenize(model, prompt) -> list[int]:
    """Raw text as is; a chat (message list) through the model's chat template (the built-in
    gemma one for a Gemma GGUF without a template)."""
    if isinstance(prompt, str):
        return model.tokenize(prompt)
    override = "gemma" if not model.vocab.chat_template and "gemma" in model.arch_name else None
    text = ChatTemplate.for_model(model.vocab, override).apply(prompt)
    ids = model.tokenize(text, add_special=True, parse_special=True)
    if len(ids) > 1 and ids[0] == ids[1] == model.vocab.bos:     # the template's own BOS
        ids = ids[1:]
    return ids


def greedy(model):
    return SamplerChain(SamplerParams(temp=0.0), model.n_vocab)


OPTS = {"threads": None}


def make_ctx(model):
    kw = {"n_threads": OPTS["threads"]} if OPTS["threads"] else {}
    return pyllama.Context(model, n_ctx=4096, **kw)


def timed(gen):
    """Run a token generator; wall and CPU seconds after its first token (the prompt is decoded
    before the first token is yielded: generation speed excludes prompt processing)."""
    out = [next(gen)]
    w, c = time.perf_counter(), time.process_time()
    out += list(gen)
    return out, time.perf_counter() - w, time.process_time() - c


def run_plain(model, prompt, n):
    ctx = make_ctx(model)
    return timed(generate(ctx, prompt, greedy(model), n_predict=n, stop_tokens=()))


def run_spec(model, prompt, n, drafter, n_max):
    ctx = make_ctx(model)
    st = SpecStats()
    rounds: list[int] = []
    accept = drafter.accept

    def record(n_acc, n_drafted=None):          # the drafted length of every round
        rounds.append(n_drafted or 0)
        accept(n_acc, n_drafted)
    drafter.accept = record
    out, tw, tc = timed(speculative_generate(ctx, greedy(model), prompt, drafter,
                                             SpecParams(n_max=n_max), n_predict=n,
                                             stop_tokens=(), stats=st))
    return out, tw, tc, st, rounds


def self_draft_cost(model, args, cost) -> float:
    """A self-draft token, in target decodes (measured: it keeps the whole output matrix)."""
    draft = truncated_model(model, args.self_layers)
    return measure_verify_cost(draft, 0, 5, args.threads).t_decode / cost.t_decode


def drafters(model, args, cost):
    draft_cost = args.draft_cost
    return [
        ("ngram", "ngram-simple", 8, lambda: NgramDrafter()),
        ("adaptive", "ngram cost-aware", 16, lambda: NgramDrafter(policy=DraftPolicy(cost))),
        ("self", f"self-draft {args.self_layers}L", 4, lambda: DraftModelDrafter(
            make_ctx(truncated_model(model, args.self_layers)))),
        ("self-adaptive", f"self-draft {args.self_layers}L cost-aware", 8,
         lambda: DraftModelDrafter(make_ctx(truncated_model(model, args.self_layers)),
                                   policy=DraftPolicy(cost, draft_cost=draft_cost))),
    ]


def bench_prompt(model, kind, prompt, args, cost, chosen) -> list[dict]:
    n = args.n
    plain = {"w": [], "c": []}
    res: dict = {}
    ref = None
    for _ in range(args.reps):
        out, tw, tc = run_plain(model, prompt, n)
        assert ref is None or out == ref, "plain greedy output changed between runs"
        ref = out
        plain["w"].append((n - 1) / tw)
        plain["c"].append((n - 1) / tc)
        for key, name, n_max, make in drafters(model, args, cost):
            if key not in chosen:
                continue
            out, tw, tc, st, rounds = run_spec(model, prompt, n, make(), n_max)
            assert out == ref, f"{name}: speculative output differs from plain greedy"
            r = res.setdefault(key, {"name": name, "n_max": n_max, "w": [], "c": [],
                                     "sw": [], "sc": []})
            r["w"].append((n - 1) / tw)
            r["c"].append((n - 1) / tc)
            r["sw"].append(r["w"][-1] / plain["w"][-1])     # against the plain run just before
            r["sc"].append(r["c"][-1] / plain["c"][-1])
            r["st"], r["rounds"] = st, rounds
    w0, c0 = statistics.median(plain["w"]), statistics.median(plain["c"])
    rows = [dict(prompt=kind, drafter="none", n_max=0, tps_wall=w0, tps_cpu=c0, accept=None,
                 drafted_per_round=0.0, tokens_per_round=1.0, speedup_wall=1.0,
                 speedup_cpu=1.0, speedup_model=1.0)]
    for r in res.values():
        st = r["st"]
        w, c = statistics.median(r["w"]), statistics.median(r["c"])
        model_cost = sum(cost(k) for k in r["rounds"])     # plain: one decode per token
        rows.append(dict(prompt=kind, drafter=r["name"], n_max=r["n_max"], tps_wall=w,
                         tps_cpu=c, accept=st.accept_rate,
                         drafted_per_round=st.n_drafted / max(1, st.n_rounds),
                         tokens_per_round=(st.n_predict - 1) / max(1, st.n_rounds),
                         speedup_wall=statistics.median(r["sw"]),
                         speedup_cpu=statistics.median(r["sc"]),
                         speedup_model=(st.n_predict - 1) / model_cost))
        print(rows[-1], file=sys.stderr)
    return rows


def fmt(r: dict) -> str:
    acc = "-" if r["accept"] is None else f"{100 * r['accept']:.1f}%"
    return (f"| {r['prompt']} | {r['drafter']} | {r['n_max'] or '-'} | {r['tps_wall']:.2f} | "
            f"{r['tps_cpu']:.2f} | {acc} | {r['drafted_per_round']:.2f} | "
            f"{r['tokens_per_round']:.2f} | {r['speedup_wall']:.2f} | {r['speedup_cpu']:.2f} | "
            f"{r['speedup_model']:.2f} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--self-layers", type=int, default=6)
    ap.add_argument("--drafters", default="ngram,adaptive,self-adaptive",
                    help="comma list of: ngram, adaptive, self, self-adaptive")
    ap.add_argument("--prompts", default=",".join(PROMPTS))
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    OPTS.update(threads=args.threads)
    chosen = set(args.drafters.split(","))
    model = pyllama.load_model(args.model)
    cost = measure_verify_cost(model, k_max=16, n_rep=5, n_threads=args.threads)
    print("c(k) =", " ".join(f"{c:.2f}" for c in cost.measured), f"fit slope {cost.slope:.3f}",
          file=sys.stderr)
    args.draft_cost = self_draft_cost(model, args, cost)
    print(f"self-draft decode / target decode: {args.draft_cost:.2f}", file=sys.stderr)
    rows = []
    for kind in args.prompts.split(","):
        rows += bench_prompt(model, kind, tokenize(model, PROMPTS[kind]), args, cost, chosen)
    lines = [f"# speculative decoding, {args.model}, greedy, {args.n} tokens, "
             f"{time.strftime('%Y-%m-%d %H:%M')}", "",
             f"threads: {args.threads or 'default'}, reps: {args.reps} (medians), "
             f"speed-ups: median of the ratios to the plain run of the same repetition", "",
             "verification cost c(k), CPU time of a (k+1)-token decode / 1-token decode, k=0..16: "
             + " ".join(f"{c:.2f}" for c in cost.measured) +
             f"; the cost-aware drafters use the fitted line c(k) = 1 + {cost.slope:.3f} k; "
             f"a self-draft token costs {args.draft_cost:.2f} target decodes", "",
             "| prompt | drafter | n_max | tok/s wall | tok/CPU-s | accept | drafted/round "
             "| tokens/round | speed-up wall | speed-up CPU | model |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [fmt(r) for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = os.path.join(HERE, "results", f"speculative-{args.model}-{stamp}")
    with open(base + ".md", "w") as f:
        f.write(text)
    with open(base + ".json", "w") as f:
        json.dump({"cost_measured": list(cost.measured), "cost_slope": cost.slope,
                   "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
