"""Serving throughput by process count: 1, 2 and 4 llama-server processes, C concurrent clients.

Each configuration starts P `python -m pyllama server` processes on loopback (their own ports,
-np = ceil(C / P) slots each, the machine's cores split between them with -t), then C streaming
chat clients send requests back to back, client i always to process i % P (what a proxy's
affinity by conversation key does); R requests per client. Reports total generation tokens/s,
p50/p95 request latency and time to first token per configuration; with --llamacpp-server
PATH, the same load on llama.cpp's own llama-server (one process, -np C) as the side row.
Never asserts; --out PREFIX writes PREFIX.json and PREFIX.md.

  PYTHONPATH=. python bench/serve_scaling.py -m gemma-3-270m --clients 8 --requests 3 \\
      --llamacpp-server /work/llamacpp/build/bin/llama-server --out bench/results/serve-scaling
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
from server_load import PROMPTS, loadavg, machine_info, one_request  # noqa: E402
from server_proc import ServerProc, free_port  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    """Nearest-rank percentile."""
    if not xs:
        return 0.0
    xs = sorted(xs)
    return xs[max(0, math.ceil(q / 100 * len(xs)) - 1)]


def run(urls: list[str], clients: int, requests: int, n_predict: int) -> dict:
    results, errors, lock = [], [], threading.Lock()

    def worker(i: int) -> None:
        with httpx.Client(base_url=urls[i % len(urls)], timeout=900) as c:
            for k in range(requests):
                try:
                    r = one_request(c, PROMPTS[(i + k) % len(PROMPTS)], n_predict, 1000 * i + k)
                    with lock:
                        results.append(r)
                except (httpx.HTTPError, RuntimeError, ValueError) as e:
                    with lock:
                        errors.append(f"{type(e).__name__}: {e}")
    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = [r["latency"] for r in results]
    ttft = [r["ttft"] for r in results]
    tokens = sum(r["tokens"] for r in results)
    return {"completed": len(results), "errors": len(errors), "error_samples": errors[:3],
            "wall_s": round(wall, 2), "tokens": tokens, "tps": round(tokens / wall, 2),
            "latency_p50_s": round(pct(lat, 50), 2), "latency_p95_s": round(pct(lat, 95), 2),
            "ttft_p50_s": round(pct(ttft, 50), 2), "ttft_p95_s": round(pct(ttft, 95), 2)}


class LlamaCppServer:
    """llama.cpp's own llama-server on loopback."""

    def __init__(self, exe: str, model: str, args: list[str]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(os.devnull, "w")
        self.proc = subprocess.Popen([exe, "-m", model, "--port", str(self.port), *args],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 300) -> "LlamaCppServer":
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("llama-server not ready")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m")
    ap.add_argument("--procs", default="1,2,4", help="process counts to run")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=3, help="requests per client")
    ap.add_argument("-n", "--n-predict", type=int, default=64)
    ap.add_argument("-c", "--ctx-size", type=int, default=4096, help="per process")
    ap.add_argument("--cores", type=int, default=os.cpu_count())
    ap.add_argument("--llamacpp-server", help="llama.cpp's llama-server executable (side row)")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    from pyllama.models import resolve
    model_path = resolve(args.model)
    report = {"args": vars(args), "machine": machine_info(), "loadavg_before": loadavg(),
              "rows": []}
    for p in [int(x) for x in args.procs.split(",")]:
        np_ = -(-args.clients // p)
        threads = max(1, args.cores // p)
        procs = [ServerProc(["-m", model_path, "-np", str(np_), "-c", str(args.ctx_size),
                             "-t", str(threads)]) for _ in range(p)]
        try:
            for s in procs:
                s.wait_ready(900)
            one_request(httpx.Client(base_url=procs[0].url, timeout=900), "Hi", 4, 0)  # warm
            row = run([s.url for s in procs], args.clients, args.requests, args.n_predict)
        finally:
            for s in procs:
                s.stop()
        row.update(server="pyllama", procs=p, np=np_, threads=threads, loadavg=loadavg())
        print(json.dumps(row), flush=True)
        report["rows"].append(row)
    if args.llamacpp_server:
        s = LlamaCppServer(args.llamacpp_server, model_path,
                           ["-np", str(args.clients), "-c", str(args.ctx_size),
                            "-t", str(args.cores)]).wait_ready()
        try:
            one_request(httpx.Client(base_url=s.url, timeout=900), "Hi", 4, 0)
            row = run([s.url], args.clients, args.requests, args.n_predict)
        finally:
            s.stop()
        row.update(server="llama.cpp", procs=1, np=args.clients, threads=args.cores,
                   loadavg=loadavg())
        print(json.dumps(row), flush=True)
        report["rows"].append(row)
    report["loadavg_after"] = loadavg()
    if args.out:
        with open(args.out + ".json", "w") as f:
            json.dump(report, f, indent=1)
        with open(args.out + ".md", "w") as f:
            f.write(markdown(report))
    print(markdown(report))
    return 0


def markdown(report: dict) -> str:
    m, a = report["machine"], report["args"]
    lines = [f"# Serving by process count: {a['model']}, {a['clients']} concurrent clients", "",
             f"{m['date_utc']} UTC, commit {m['commit']}, {m['cpu']} ({m['cores']} cores), "
             f"Python {m['python']}. Load average before {report['loadavg_before']}, after "
             f"{report['loadavg_after']} (shared machine: other jobs ran at the same time).",
             f"Each client: {a['requests']} streaming chat completions back to back, max_tokens "
             f"{a['n_predict']}, temperature 0.7, its own seed; client i to process i % P. "
             f"Each process: -np ceil(clients / P), -t cores / P, -c {a['ctx_size']}.", "",
             "| server | processes | -np each | -t each | requests ok / errors | tokens/s (total) "
             "| latency p50 / p95 s | TTFT p50 / p95 s | load avg after |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['server']} | {r['procs']} | {r['np']} | {r['threads']} | "
                     f"{r['completed']} / {r['errors']} | {r['tps']} | {r['latency_p50_s']} / "
                     f"{r['latency_p95_s']} | {r['ttft_p50_s']} / {r['ttft_p95_s']} | "
                     f"{r['loadavg'][0]} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
