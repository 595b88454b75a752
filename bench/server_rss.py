"""llama-server's resident memory before, during and after one large request (issue: a 50 MB
/tokenize took RSS 0.55 -> 2.9 GB and kept it). Starts `python -m pyllama server -m MODEL`,
reads VmRSS from /proc, sends a /tokenize of --mb megabytes, then a /completion whose prompt is
--mb / 8 megabytes (tokenized, then refused as longer than the context), and prints RSS before,
at the peak and 2 s after; never asserts.

  PYTHONPATH=. python bench/server_rss.py -m gemma-3-270m --mb 20
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time

import httpx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "server"))


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m")
    ap.add_argument("--mb", type=float, default=20.0)
    a = ap.parse_args()
    from server_proc import ServerProc
    s = ServerProc(["-m", a.model, "-np", "1", "-c", "2048",
                    "--max-body-size", str(int((a.mb + 8) * 2**20))]).wait_ready(300)
    pid = s.proc.pid
    try:
        with httpx.Client(base_url=s.url, timeout=900) as c:
            time.sleep(1)
            before = rss_mb(pid)
            text = "The quick brown fox jumps over the lazy dog. " * int(a.mb * 2**20 / 45)
            peak = [before]
            done = threading.Event()

            def watch():
                while not done.is_set():
                    peak[0] = max(peak[0], rss_mb(pid))
                    time.sleep(0.05)
            w = threading.Thread(target=watch)
            w.start()
            t0 = time.perf_counter()
            r = c.post("/tokenize", json={"content": text})
            t_tok = time.perf_counter() - t0
            n = len(r.json()["tokens"]) if r.status_code == 200 else r.status_code
            r2 = c.post("/completion", json={"prompt": text[:len(text) // 8], "n_predict": 1})
            done.set()
            w.join()
            time.sleep(2)
            after = rss_mb(pid)
            h = c.get("/health").status_code
        print(f"model {a.model}: /tokenize of {len(text) / 2**20:.1f} MiB -> {n} tokens in "
              f"{t_tok:.1f} s; /completion of {len(text) / 8 / 2**20:.1f} MiB -> "
              f"{r2.status_code}; RSS before {before:.0f} MiB, peak {peak[0]:.0f} MiB, "
              f"2 s after {after:.0f} MiB; /health {h}")
    finally:
        s.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
