"""Load test for llama-server: C concurrent streaming clients, R requests each.

Starts `python -m pyllama server` itself (-m MODEL, -np SLOTS) or uses a running one (--url).
Reports aggregate generation throughput, time to first token and request latency; never asserts.

  PYTHONPATH=. python bench/server_load.py -m gemma-3-270m -np 4 --clients 4 --requests 2
  PYTHONPATH=. python bench/server_load.py --url http://127.0.0.1:8080 --clients 8
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time

import httpx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "server"))

PROMPTS = ["Write a short story about a robot learning to paint.",
           "Explain how a hash map works.", "List five facts about the moon.",
           "What is the capital of France? Answer in one sentence, then explain why.",
           "Summarise the plot of Hamlet.", "Give me a recipe for pancakes.",
           "Describe the water cycle.", "Why is the sky blue?"]


def one_request(client: httpx.Client, prompt: str, n_predict: int) -> dict:
    """Stream one chat completion; returns ttft, latency and tokens generated."""
    t0 = time.perf_counter()
    ttft, n_tokens = None, 0
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n_predict,
            "stream": True, "temperature": 0.7, "seed": 1, "stream_options":
            {"include_usage": True}}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("choices") and ev["choices"][0]["delta"].get("content") and ttft is None:
                ttft = time.perf_counter() - t0
            if ev.get("usage"):
                n_tokens = ev["usage"]["completion_tokens"]
    return {"ttft": ttft or 0.0, "latency": time.perf_counter() - t0, "tokens": n_tokens}


def run_load(url: str, clients: int, requests: int, n_predict: int) -> dict:
    results, lock = [], threading.Lock()

    def worker(i: int) -> None:
        with httpx.Client(base_url=url, timeout=600) as c:
            for k in range(requests):
                res = one_request(c, PROMPTS[(i + k) % len(PROMPTS)], n_predict)
                with lock:
                    results.append(res)
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    tokens = sum(r["tokens"] for r in results)
    return {"clients": clients, "requests": len(results), "wall_s": round(wall, 3),
            "tokens": tokens, "aggregate_tps": round(tokens / wall, 2),
            "ttft_ms_median": round(1e3 * statistics.median(r["ttft"] for r in results), 1),
            "latency_s_median": round(statistics.median(r["latency"] for r in results), 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="use a running server instead of starting one")
    ap.add_argument("-m", "--model", default="gemma-3-270m")
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("-c", "--ctx-size", type=int, default=4096)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("-n", "--n-predict", type=int, default=64)
    ap.add_argument("--sweep", action="store_true", help="also run with 1 client for comparison")
    args = ap.parse_args(argv)
    proc = None
    if args.url is None:
        from server_proc import ServerProc
        proc = ServerProc(["-m", args.model, "-np", str(args.parallel), "-c",
                           str(args.ctx_size), "--metrics"]).wait_ready(600)
        args.url = proc.url
    try:
        runs = [run_load(args.url, 1, args.requests, args.n_predict)] if args.sweep else []
        runs.append(run_load(args.url, args.clients, args.requests, args.n_predict))
        metrics = httpx.get(args.url + "/metrics").text if proc else ""
    finally:
        if proc is not None:
            proc.stop()
    for r in runs:
        print(json.dumps(r))
    busy = [ln for ln in metrics.splitlines() if ln.startswith("llamacpp:n_busy_slots")]
    if busy:
        print(busy[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
