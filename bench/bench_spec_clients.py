"""llama-server with and without --spec-default under 4 concurrent clients on repetitive code
prompts: total generated tokens per wall second, and each client's output checked equal to the
output it gets alone from the server without speculation (greedy).

    python bench/bench_spec_clients.py [--model gemma-3-270m] [-n 128] [--clients 4]
                                       [--threads 2] [--reps 1] [--check-only]

Each configuration runs its own server (`python -m pyllama server -np <clients>`); the plain and
--spec-default runs alternate --reps times and the figures are medians. Besides wall-clock
tokens/s, the server process's CPU seconds per round (from /proc: the figure to compare on a
shared, loaded machine) and the 1-minute load average are recorded. --check-only runs the
single-client references and one concurrent round of each server, and checks outputs only
(no speed claim). Results (markdown + JSON) go to bench/results/spec_clients-<model>.{md,json}.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "server"))

import httpx  # noqa: E402

from server_proc import ServerProc  # noqa: E402

FUNCS = ["load_config", "save_config", "parse_args", "main"]


def prompt(i: int) -> str:
    """Code that repeats earlier code with small changes: the continuation repeats it again."""
    body = []
    for k in range(6):
        name = f"{FUNCS[i % len(FUNCS)]}_{k}"
        body.append(f"def {name}(path, default=None):\n"
                    f"    \"\"\"Read {name} from path, or return default.\"\"\"\n"
                    f"    try:\n        with open(path) as f:\n            return f.read()\n"
                    f"    except OSError:\n        return default\n\n\n")
    return "".join(body) + f"def {FUNCS[i % len(FUNCS)]}_6(path, default=None):\n"


def complete(url, p, n):
    body = {"prompt": p, "n_predict": n, "temperature": 0, "cache_prompt": False,
            "return_tokens": True}
    with httpx.Client(base_url=url, timeout=1800) as c:
        r = c.post("/completion", json=body)
    r.raise_for_status()
    return r.json()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def concurrent(url, prompts, n):
    out = [None] * len(prompts)

    def go(i):
        out[i] = complete(url, prompts[i], n)
    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(prompts))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out, time.perf_counter() - t0


def server(args, extra):
    return ServerProc(["-m", args.model, "-np", str(args.clients), "-c",
                       str(4096 * args.clients), "-t", str(args.threads), *extra]).wait_ready(600)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="gemma-3-270m")
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--check-only", action="store_true")
    args = ap.parse_args(argv)
    prompts = [prompt(i) for i in range(args.clients)]
    configs = {"plain": [], "spec-default": ["--spec-default"]}
    servers = {k: server(args, v) for k, v in configs.items()}
    try:
        solo = [complete(servers["plain"].url, p, args.n) for p in prompts]
        runs = {k: [] for k in configs}
        ok = True
        for _ in range(1 if args.check_only else args.reps):
            for k, s in servers.items():
                c0 = cpu_seconds(s.proc.pid)
                out, dt = concurrent(s.url, prompts, args.n)
                cpu = cpu_seconds(s.proc.pid) - c0
                same = all(o["tokens"] == r["tokens"] for o, r in zip(out, solo))
                ok &= same
                n_tok = sum(len(o["tokens"]) for o in out)
                drafted = sum(o["timings"].get("draft_n", 0) for o in out)
                accepted = sum(o["timings"].get("draft_n_accepted", 0) for o in out)
                runs[k].append(dict(seconds=dt, tokens=n_tok, tps=n_tok / dt, same=same,
                                    drafted=drafted, accepted=accepted, cpu=cpu,
                                    tpc=n_tok / cpu if cpu > 0 else 0.0,
                                    load=os.getloadavg()[0]))
    finally:
        for s in servers.values():
            s.stop()
    res = {k: dict(tps=statistics.median(r["tps"] for r in v),
                   tpc=statistics.median(r["tpc"] for r in v),
                   load=f'{min(r["load"] for r in v):.1f}-{max(r["load"] for r in v):.1f}',
                   same=all(r["same"] for r in v),
                   drafted=v[-1]["drafted"], accepted=v[-1]["accepted"], runs=v)
           for k, v in runs.items()}
    lines = [f"# llama-server, {args.clients} concurrent clients, {args.model}, -n {args.n}, "
             f"-t {args.threads}" + (" (check only: no speed claim)" if args.check_only else ""),
             "", "| server | total tokens/s | tokens/CPU-s | drafted | accepted | "
             "outputs = solo plain | load |",
             "|---|---|---|---|---|---|---|"]
    for k, r in res.items():
        lines.append(f"| {k} | {r['tps']:.2f} | {r['tpc']:.2f} | {r['drafted']} | "
                     f"{r['accepted']} | {'yes' if r['same'] else 'NO'} | {r['load']} |")
    if not args.check_only:
        lines.append(f"\nspeed-up: {res['spec-default']['tps'] / res['plain']['tps']:.2f}x wall, "
                     f"{res['spec-default']['tpc'] / res['plain']['tpc']:.2f}x CPU")
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    base = os.path.join(HERE, "results", f"spec_clients-{os.path.basename(args.model)}")
    with open(base + ".md", "w") as f:
        f.write(text)
    with open(base + ".json", "w") as f:
        json.dump(dict(args=vars(args), results=res), f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
