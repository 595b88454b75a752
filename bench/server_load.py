"""Load test for llama-server: C concurrent streaming clients, for R requests each or D seconds.

Starts `python -m pyllama server` itself (-m MODEL, -np SLOTS) or uses a running one (--url; give
--pid to also read its RSS). Reports errors, completed responses, aggregate generation tokens/s,
time to first token, request latency, server RSS before/after and the machine's load average;
never asserts. --out PREFIX writes PREFIX.json (with machine info) and PREFIX.md.

  PYTHONPATH=. python bench/server_load.py -m gemma-3-270m -np 8 --clients 8 --duration 120 \\
      --out bench/results/server-load-gemma-3-270m
  PYTHONPATH=. python bench/server_load.py --url http://127.0.0.1:8080 --clients 8 --requests 2
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
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


def one_request(client: httpx.Client, prompt: str, n_predict: int, seed: int) -> dict:
    """Stream one chat completion; returns ttft, latency and tokens generated."""
    t0 = time.perf_counter()
    ttft, n_tokens, finished = None, 0, False
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": n_predict,
            "stream": True, "temperature": 0.7, "seed": seed, "stream_options":
            {"include_usage": True}}
    with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line == "data: [DONE]":
                finished = True
            if not line.startswith("data: ") or finished:
                continue
            ev = json.loads(line[6:])
            if "error" in ev:
                raise RuntimeError(ev["error"].get("message", str(ev["error"])))
            if ev.get("choices") and ev["choices"][0]["delta"].get("content") and ttft is None:
                ttft = time.perf_counter() - t0
            if ev.get("usage"):
                n_tokens = ev["usage"]["completion_tokens"]
    if not finished:
        raise RuntimeError("stream ended without [DONE]")
    return {"ttft": ttft or 0.0, "latency": time.perf_counter() - t0, "tokens": n_tokens}


def run_load(url: str, clients: int, requests: int | None, duration: float | None,
             n_predict: int) -> dict:
    """Each client sends requests back to back: `requests` of them, or until `duration` s."""
    results, errors, lock = [], [], threading.Lock()
    t0 = time.perf_counter()

    def more(k: int) -> bool:
        return time.perf_counter() - t0 < duration if duration else k < requests

    def worker(i: int) -> None:
        with httpx.Client(base_url=url, timeout=600) as c:
            k = 0
            while more(k):
                try:
                    res = one_request(c, PROMPTS[(i + k) % len(PROMPTS)], n_predict, 1000 * i + k)
                    with lock:
                        results.append(res)
                except (httpx.HTTPError, RuntimeError, ValueError) as e:
                    with lock:
                        errors.append(f"{type(e).__name__}: {e}")
                k += 1
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summarise(results, errors, clients, time.perf_counter() - t0)


def summarise(results: list[dict], errors: list[str], clients: int, wall: float) -> dict:
    tokens = sum(r["tokens"] for r in results)
    med = (lambda xs: statistics.median(xs) if xs else 0.0)
    return {"clients": clients, "completed": len(results), "errors": len(errors),
            "error_samples": sorted(set(errors))[:5], "wall_s": round(wall, 3),
            "tokens": tokens, "aggregate_tps": round(tokens / wall, 2),
            "per_request_tps_median": round(med([r["tokens"] / r["latency"] for r in results]), 2),
            "ttft_ms_median": round(1e3 * med([r["ttft"] for r in results]), 1),
            "latency_s_median": round(med([r["latency"] for r in results]), 3),
            "latency_s_max": round(max((r["latency"] for r in results), default=0.0), 3)}


def rss_mib(pid: int | None) -> float | None:
    """Resident set size of a process from /proc (None when unknown)."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine_info() -> dict:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, cwd=here).stdout.strip()
    except OSError:
        commit = ""
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "commit": commit,
            "date_utc": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}


def markdown(report: dict) -> str:
    m, a = report["machine"], report["args"]
    lines = [f"# llama-server load: {a['model']}, -np {a['parallel']}, {a['clients']} streaming "
             f"clients", "",
             f"{m['date_utc']} UTC, commit {m['commit']}, {m['cpu']} ({m['cores']} cores), "
             f"Python {m['python']}.",
             f"Load average (1/5/15 min) before: {report['loadavg_before']}, after: "
             f"{report['loadavg_after']} (shared machine: other jobs ran at the same time).",
             f"Requests: chat completions, stream, max_tokens {a['n_predict']}, temperature 0.7, "
             f"per-request seed; each client sends its next request when the previous ends.", "",
             "| clients | duration s | completed | errors | tokens | tokens/s (all) | "
             "t/s per request (median) | TTFT ms (median) | latency s (median / max) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        lines.append(f"| {r['clients']} | {r['wall_s']} | {r['completed']} | {r['errors']} | "
                     f"{r['tokens']} | {r['aggregate_tps']} | {r['per_request_tps_median']} | "
                     f"{r['ttft_ms_median']} | {r['latency_s_median']} / {r['latency_s_max']} |")
    lines += ["", f"Server RSS: {report['rss_mib_before']} MiB before, "
              f"{report['rss_mib_after']} MiB after."]
    for r in report["runs"]:
        lines += [f"Error sample: {e}" for e in r["error_samples"]]
    return "\n".join(lines) + "\n"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="use a running server instead of starting one")
    ap.add_argument("--pid", type=int, help="pid of the --url server (for its RSS)")
    ap.add_argument("-m", "--model", default="gemma-3-270m")
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("-c", "--ctx-size", type=int, default=4096)
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--duration", type=float, help="seconds to run (instead of --requests)")
    ap.add_argument("-n", "--n-predict", type=int, default=64)
    ap.add_argument("--sweep", action="store_true", help="also run with 1 client for comparison")
    ap.add_argument("--out", help="write OUT.json and OUT.md")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    proc = None
    if args.url is None:
        from server_proc import ServerProc
        extra = ["-t", str(args.threads)] if args.threads else []
        proc = ServerProc(["-m", args.model, "-np", str(args.parallel), "-c",
                           str(args.ctx_size), "--metrics", *extra]).wait_ready(600)
        args.url, args.pid = proc.url, proc.proc.pid
    report = {"args": vars(args), "machine": machine_info(), "loadavg_before": loadavg(),
              "rss_mib_before": rss_mib(args.pid)}
    try:
        runs = [run_load(args.url, 1, args.requests, args.duration, args.n_predict)] \
            if args.sweep else []
        runs.append(run_load(args.url, args.clients, args.requests, args.duration,
                             args.n_predict))
        report["rss_mib_after"] = rss_mib(args.pid)
        metrics = httpx.get(args.url + "/metrics").text
    finally:
        if proc is not None:
            proc.stop()
    report.update(runs=runs, loadavg_after=loadavg(),
                  metrics=[ln for ln in metrics.splitlines() if ln.startswith("llamacpp:")])
    for r in runs:
        print(json.dumps(r))
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(report, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
