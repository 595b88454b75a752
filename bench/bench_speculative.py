"""Speculative decoding speed-up on the bundled models, as the tools draft: plain greedy against
`llama-speculative-simple --spec-type <drafter>` with no other tuning flag (the drafter, its
llama.cpp default settings and pyllama's default cost-aware policy, built by the tool's own
tools._spec.make_drafter), in the llama.cpp numerics (that tool's default, one-row verification)
and the invariant ones (llama-server's default), on a code prompt whose answer repeats earlier
code, code-edit chats (the answer re-emits the given code with changes) and prose.

    python bench/bench_speculative.py [--model gemma-3-270m] [-n 256] [--reps 3] [--threads 2]
        [--spec-types ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,ngram-cache,default]
        [--numerics llama.cpp,invariant] [--prompts code,code-edit,code-edit2,prose:96]
        [--llamacpp-server /work/llamacpp/build/bin/llama-server]

Speeds are of generation after the first token (prompt processing excluded: the same for all).
Both clocks are read on every run (CPU time: process_time() of all threads, the figure to compare
on a shared, loaded machine). The plain and speculative runs of a prompt alternate per
repetition (interleaved); speeds are medians, speed-ups the medians of the ratios to the plain
run of the same repetition and numerics. Every speculative output is checked identical to plain
greedy in the same numerics (the run exits 1 otherwise). `rep4` is the share of output tokens
whose preceding 4 tokens occurred earlier (prompt included): how much the answer repeats.
`load` is the 1-minute load average around the prompt's runs.

With --llamacpp-server, llama.cpp's own drafters run side by side on the same prompt tokens:
llama-server -t THREADS with and without --spec-type <drafter> (its defaults), /completion at
temperature 0 after a first request has cached the prompt, its reported draft counts,
predicted_per_second (wall) and the server process's CPU time per generated token (from /proc,
over the second request: the cached prompt's last token and the generation).

Results (markdown + JSON) go to bench/results/.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import pyllama  # noqa: E402
from pyllama import models  # noqa: E402
from pyllama.generate import generate  # noqa: E402
from pyllama.sampling import SamplerChain, SamplerParams  # noqa: E402
from pyllama.speculative import SpecParams, SpecStats, speculative_generate  # noqa: E402
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

EDIT_CODE2 = '''class Inventory:
    def __init__(self):
        self.items = {}
        self.history = []

    def add(self, name, quantity, price):
        if quantity <= 0:
            raise ValueError("quantity must be positive")
        item = self.items.setdefault(name, {"quantity": 0, "price": price})
        item["quantity"] += quantity
        item["price"] = price
        self.history.append(("add", name, quantity))

    def remove(self, name, quantity):
        if name not in self.items:
            raise KeyError(name)
        item = self.items[name]
        if item["quantity"] < quantity:
            raise ValueError("not enough stock")
        item["quantity"] -= quantity
        if item["quantity"] == 0:
            del self.items[name]
        self.history.append(("remove", name, quantity))

    def total_value(self):
        total = 0.0
        for name, item in self.items.items():
            total += item["quantity"] * item["price"]
        return total

    def report(self):
        lines = []
        for name in sorted(self.items):
            item = self.items[name]
            lines.append(f"{name}: {item['quantity']} x {item['price']:.2f}")
        return "\\n".join(lines)
'''

PROMPTS = {
    # raw text: the answer's methods and tests repeat each other's code
    "code": "Write a Python class `Matrix` with methods add, sub, mul and transpose, each "
            "method fully implemented with loops, followed by unit tests for every method.\n\n"
            "```python\nclass Matrix:\n    def __init__(self, rows):\n        self.rows = rows\n",
    "code-edit": [{"role": "user", "content": "Add type hints to every function in this code. "
                   "Reply with the complete updated code only.\n\n```python\n" + EDIT_CODE +
                   "```"}],
    "code-edit2": [{"role": "user", "content": "Add a docstring to every method of this class. "
                    "Reply with the complete updated code only.\n\n```python\n" + EDIT_CODE2 +
                    "```"}],
    # raw text continuation, little repetition in the first few hundred tokens (rep4 says how
    # much); the old prose prompt ("The history of the printing press ...") loops on both models
    "prose": "In 1887, the young engineer Tomas Varga arrived in Budapest with a single suitcase "
             "and a letter of introduction. Over the following decade he",
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


OPTS = {"threads": 2}
SPEC_FLAGS = {"default": ["--spec-default"]}     # else --spec-type <name>


def make_ctx(model, numerics):
    return pyllama.Context(model, n_ctx=4096, numerics=numerics, n_threads=OPTS["threads"])


def timed(gen):
    """Run a token generator; wall and CPU seconds after its first token (the prompt is decoded
    before the first token is yielded: generation speed excludes prompt processing)."""
    out = [next(gen)]
    w, c = time.perf_counter(), time.process_time()
    out += list(gen)
    return out, time.perf_counter() - w, time.process_time() - c


def run_plain(model, prompt, n, numerics):
    ctx = make_ctx(model, numerics)
    return timed(generate(ctx, prompt, greedy(model), n_predict=n, stop_tokens=()))


def tool_drafter(model, ctx, spec: str):
    """The drafter, its longest draft and SpecParams as `llama-speculative-simple -m M
    --spec-type <spec>` builds them (tools._spec.make_drafter; --spec-default's settings as
    llama-server parses them)."""
    from tools._common import parse_or_exit
    from tools._spec import make_drafter
    flags = SPEC_FLAGS.get(spec, ["--spec-type", spec])
    # --spec-default is a llama-server / llama-cli flag: parsed as the server parses it
    params = parse_or_exit("server" if spec in SPEC_FLAGS else "speculative",
                           ["-m", model.path] + flags)
    drafter, n_max = make_drafter(params, model, ctx, "speculative-simple")
    sp = params.speculative
    return drafter, SpecParams(n_max=n_max, n_min=sp.n_min, p_min=sp.p_min)


def run_spec(model, prompt, n, spec, numerics):
    ctx = make_ctx(model, numerics)
    drafter, sp = tool_drafter(model, ctx, spec)
    st = SpecStats()
    out, tw, tc = timed(speculative_generate(ctx, greedy(model), prompt, drafter, sp,
                                             n_predict=n, stop_tokens=(), stats=st))
    return out, tw, tc, st


def rep4(prompt, out) -> float:
    """Share of output tokens whose preceding 4 tokens occurred earlier in prompt + output."""
    h = list(prompt) + list(out)
    seen, hits = set(), 0
    for i in range(4, len(h)):
        g = tuple(h[i - 4:i])
        if i > len(prompt) and g in seen:
            hits += 1
        seen.add(tuple(h[i - 4:i]))
    return hits / max(1, len(out) - 1)


def bench_prompt(model, kind, prompt, args) -> tuple[list[dict], bool]:
    n = args.n
    res: dict = {}
    ok = True
    loads = [os.getloadavg()[0]]
    for rep in range(args.reps):
        for numerics in args.numerics:
            out, tw, tc = run_plain(model, prompt, n, numerics)
            p = res.setdefault((numerics, "none"), {"w": [], "c": [], "ref": out})
            ok &= out == p["ref"]
            p["w"].append((n - 1) / tw)
            p["c"].append((n - 1) / tc)
            for spec in args.spec_types:
                o2, tw2, tc2, st = run_spec(model, prompt, n, spec, numerics)
                r = res.setdefault((numerics, spec), {"w": [], "c": [], "sw": [], "sc": [],
                                                      "same": True})
                r["same"] &= o2 == p["ref"]
                r["w"].append((n - 1) / tw2)
                r["c"].append((n - 1) / tc2)
                r["sw"].append(r["w"][-1] / p["w"][-1])   # against the plain run just before
                r["sc"].append(r["c"][-1] / p["c"][-1])
                r["st"] = st
                print(f"{kind} {numerics} {spec} rep {rep}: x{r['sw'][-1]:.2f} wall "
                      f"x{r['sc'][-1]:.2f} cpu, accept {st.accept_rate:.2f}, same {o2 == out}",
                      file=sys.stderr, flush=True)
        loads.append(os.getloadavg()[0])
    rows = []
    for (numerics, spec), r in res.items():
        row = dict(prompt=kind, numerics=numerics, drafter=spec, n=n, reps=args.reps,
                   tps_wall=statistics.median(r["w"]), tps_cpu=statistics.median(r["c"]),
                   load=f"{min(loads):.1f}-{max(loads):.1f}")
        if spec == "none":
            row.update(speedup_wall=1.0, speedup_cpu=1.0, accept=None, same=True,
                       rep4=rep4(prompt, r["ref"]), prompt_tokens=list(prompt),
                       output_tokens=list(r["ref"]))        # for bench/spec_replay.py
        else:
            st = r["st"]
            ok &= r["same"]
            row.update(speedup_wall=statistics.median(r["sw"]),
                       speedup_cpu=statistics.median(r["sc"]), accept=st.accept_rate,
                       drafted_per_round=st.n_drafted / max(1, st.n_rounds),
                       tokens_per_round=(st.n_predict - 1) / max(1, st.n_rounds),
                       same=r["same"], sw_all=r["sw"], sc_all=r["sc"])
        rows.append(row)
    return rows, ok


# -- llama.cpp's drafters through its llama-server ----------------------------------------------
def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def _post(port: int, path: str, body: dict, timeout: float = 600) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def _serve(binary, model_path, flags, port):
    cmd = [binary, "-m", model_path, "-t", str(OPTS["threads"]), "--port", str(port),
           "-c", "4096", "-np", "1"] + flags
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:
                if r.status == 200:
                    return proc
        except Exception:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited: {' '.join(cmd)}")
    proc.kill()
    raise RuntimeError("llama-server did not start")


def llamacpp_prompt(binary, model, kind, prompt, args, port=18931) -> list[dict]:
    """Plain and each --spec-type through llama.cpp's llama-server, interleaved per rep."""
    specs = ["none"] + [s for s in args.spec_types]
    res: dict = {}
    loads = [os.getloadavg()[0]]
    for rep in range(args.reps):
        for spec in specs:
            flags = [] if spec == "none" else SPEC_FLAGS.get(spec, ["--spec-type", spec])
            proc = _serve(binary, model.path, flags, port)
            try:
                # the prompt first (cached), so that the timed request's CPU time is generation
                _post(port, "/completion", {"prompt": list(prompt), "n_predict": 1,
                                            "temperature": 0.0, "cache_prompt": True})
                c0 = _cpu_seconds(proc.pid)
                j = _post(port, "/completion", {"prompt": list(prompt), "n_predict": args.n,
                                                "temperature": 0.0, "cache_prompt": True})
                cpu = _cpu_seconds(proc.pid) - c0
            finally:
                proc.terminate()
                proc.wait()
            t = j["timings"]
            r = res.setdefault(spec, {"w": [], "c": [], "content": j["content"], "t": t})
            r["w"].append(t["predicted_per_second"])
            # CPU per generated token (the prompt was cached by the request before)
            r["c"].append(t["predicted_n"] / cpu if cpu > 0 else 0.0)
            r["same"] = j["content"] == res["none"]["content"]
            r["t"] = t
        loads.append(os.getloadavg()[0])
    rows = []
    base = res["none"]
    for spec, r in res.items():
        t = r["t"]
        sw = [a / b for a, b in zip(r["w"], base["w"])]
        sc = [a / b for a, b in zip(r["c"], base["c"])]
        rows.append(dict(prompt=kind, numerics="llama.cpp (llama-server)", drafter=spec,
                         n=t.get("predicted_n"), reps=args.reps,
                         tps_wall=statistics.median(r["w"]), tps_cpu=statistics.median(r["c"]),
                         speedup_wall=statistics.median(sw), speedup_cpu=statistics.median(sc),
                         accept=(t["draft_n_accepted"] / t["draft_n"]) if t.get("draft_n")
                         else None, same=r.get("same", True),
                         load=f"{min(loads):.1f}-{max(loads):.1f}"))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def fmt(model_name, r: dict) -> str:
    acc = "-" if r.get("accept") is None else f"{100 * r['accept']:.1f}%"
    extra = f"{r['rep4']:.2f}" if "rep4" in r else ""
    return (f"| {model_name} | {r['prompt']} ({r['n']}) | {r['numerics']} | {r['drafter']} | "
            f"{r['tps_wall']:.2f} | {r['tps_cpu']:.2f} | {r['speedup_wall']:.2f} | "
            f"{r['speedup_cpu']:.2f} | {acc} | {'yes' if r['same'] else 'NO'} | "
            f"{r['load']} | {extra} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--spec-types", default="ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod,"
                    "ngram-cache,default",
                    help="comma list of --spec-type values; 'default' = --spec-default")
    # a prompt as kind:N generates N tokens instead of -n
    ap.add_argument("--numerics", default="llama.cpp,invariant")
    ap.add_argument("--prompts", default=",".join(PROMPTS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llamacpp-server", default=None,
                    help="llama.cpp's llama-server: its drafters side by side")
    ap.add_argument("--no-pyllama", action="store_true", help="only the llama.cpp rows")
    args = ap.parse_args()
    OPTS.update(threads=args.threads)
    args.spec_types = args.spec_types.split(",")
    args.numerics = args.numerics.split(",")
    path = models.resolve(args.model)
    model = pyllama.load_model(path)
    model.path = path
    rows, ok = [], True
    n_default = args.n
    for item in args.prompts.split(","):
        kind, _, n_kind = item.partition(":")      # "prose:96": that prompt's own -n
        args.n = int(n_kind) if n_kind else n_default
        prompt = tokenize(model, PROMPTS[kind])
        if not args.no_pyllama:
            r, good = bench_prompt(model, kind, prompt, args)
            rows += r
            ok &= good
        if args.llamacpp_server:
            rows += llamacpp_prompt(args.llamacpp_server, model, kind, prompt, args)
    args.n = n_default
    lines = [f"# speculative decoding, {args.model}, greedy, {args.n} tokens, "
             f"{time.strftime('%Y-%m-%d %H:%M')}", "",
             f"threads {args.threads}, {args.reps} interleaved repetitions (medians; speed-ups: "
             "median of the ratios to the plain run of the same repetition and numerics); "
             f"{os.cpu_count()} CPUs", "",
             "| model | prompt | numerics | drafter | tok/s wall | tok/CPU-s | speed-up wall | "
             "speed-up CPU | accept | identical | load | rep4 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [fmt(args.model, r) for r in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = os.path.join(HERE, "results", f"speculative-{args.model}-{stamp}")
    with open(base + ".md", "w") as f:
        f.write(text)
    with open(base + ".json", "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
