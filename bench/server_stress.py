"""Stress llama-server's streaming: many streamed /v1/completions while other clients cancel
their streams mid-way and slots are saved, restored and erased, checking that every stream the
client reads to the end ends properly (200, no "error" event, `data: [DONE]` last).

Starts `python -m pyllama server -m MODEL -np SLOTS --slot-save-path DIR` itself (or --url).
Prints a summary and every failure (request, status, last lines); exit status 1 if any stream
failed. Not a benchmark: it asserts correctness, not speed.

  PYTHONPATH=. python bench/server_stress.py -m gemma-3-270m -np 4 --clients 6 --duration 60
  PYTHONPATH=. python bench/server_stress.py -m /tmp/tiny.gguf -np 2 --clients 4 --requests 40
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time

import httpx

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "server"))

PROMPTS = ["Write a short story about a robot learning to paint.", "Explain how a hash map works.",
           "List five facts about the moon.", "Summarise the plot of Hamlet.",
           "Give me a recipe for pancakes.", "Why is the sky blue?"]


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = self.cancelled = self.slot_ops = self.slot_errors = 0
        self.failures: list[dict] = []

    def add(self, field: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, field, getattr(self, field) + n)

    def fail(self, what: dict) -> None:
        with self.lock:
            self.failures.append(what)


def stream_one(c: httpx.Client, rng: random.Random, tally: Tally, cancel: bool) -> None:
    body = {"prompt": rng.choice(PROMPTS), "max_tokens": rng.randint(4, 48), "stream": True,
            "temperature": 0.7, "seed": rng.randint(0, 2**31)}
    if rng.random() < 0.3:
        body["id_slot"] = rng.randint(0, tally.n_slots - 1)
    extras = {"logprobs": lambda: rng.randint(0, 5), "stop": lambda: [rng.choice(["the", "\n", "a"])],
              "n": lambda: rng.randint(1, tally.n_slots), "cache_prompt": lambda: False,
              "return_progress": lambda: True, "prompt": lambda: [rng.choice(PROMPTS)] * 2,
              "top_k": lambda: rng.choice([0, 1, 40]), "presence_penalty": lambda: 0.5,
              "stream_options": lambda: {"include_usage": True}, "timings_per_token": lambda: True}
    for k, f in extras.items():
        if rng.random() < 0.15:
            body[k] = f()
    stop_after = rng.randint(1, 6) if cancel else None
    lines: list[str] = []
    try:
        with c.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                r.read()
                tally.fail({"body": body, "status": r.status_code, "text": r.text[:300]})
                return
            for line in r.iter_lines():
                if not line:
                    continue
                lines.append(line)
                if stop_after is not None and len(lines) >= stop_after:
                    tally.add("cancelled")
                    return               # closing the response cancels the request
    except httpx.HTTPError as e:
        tally.fail({"body": body, "status": "transport", "text": repr(e), "last": lines[-3:]})
        return
    errors = [ln for ln in lines if ln.startswith("data: ") and ln != "data: [DONE]"
              and "error" in json.loads(ln[6:])]
    if errors or not lines or lines[-1] != "data: [DONE]":
        tally.fail({"body": body, "status": 200, "errors": errors[:2], "last": lines[-3:]})
    else:
        tally.add("ok")


def slot_ops(url: str, n_slots: int, rng: random.Random, tally: Tally, stop: threading.Event):
    names = [f"stress-{i}.bin" for i in range(3)]
    saved = set()
    with httpx.Client(base_url=url, timeout=120) as c:
        while not stop.is_set():
            slot = rng.randint(0, n_slots - 1)
            action = rng.choice(["save", "restore", "erase"])
            name = rng.choice(sorted(saved) if action == "restore" and saved else names)
            if action == "restore" and name not in saved:
                action = "save"
            body = {} if action == "erase" else {"filename": name}
            r = c.post(f"/slots/{slot}?action={action}", json=body)
            tally.add("slot_ops")
            if r.status_code == 200 and action == "save":
                saved.add(name)
            elif r.status_code != 200:
                tally.add("slot_errors")
            time.sleep(rng.uniform(0.05, 0.4))


def run(url: str, clients: int, requests: int, duration: float, n_slots: int, seed: int):
    tally = Tally()
    tally.n_slots = n_slots
    stop = threading.Event()
    t_end = time.monotonic() + duration if duration else None

    def client(i: int) -> None:
        rng = random.Random(seed * 1000 + i)
        with httpx.Client(base_url=url, timeout=300) as c:
            n = 0
            while (t_end is None and n < requests) or (t_end is not None and
                                                       time.monotonic() < t_end):
                stream_one(c, rng, tally, cancel=rng.random() < 0.35)
                n += 1
    ops = threading.Thread(target=slot_ops, args=(url, n_slots, random.Random(seed), tally,
                                                  stop))
    ops.start()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    ops.join()
    return tally


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default="gemma-3-270m")
    ap.add_argument("-np", "--slots", type=int, default=4)
    ap.add_argument("-c", "--ctx", type=int, default=2048)
    ap.add_argument("--clients", type=int, default=6)
    ap.add_argument("--requests", type=int, default=20, help="per client (without --duration)")
    ap.add_argument("--duration", type=float, default=0.0, help="seconds (overrides --requests)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--url", default=None)
    ap.add_argument("--server-args", default="", help="more llama-server flags, e.g. '-kvu'")
    a = ap.parse_args()
    proc = None
    if a.url is None:
        from server_proc import ServerProc
        slots = tempfile.mkdtemp(prefix="pyllama-stress-")
        proc = ServerProc(["-m", a.model, "-np", str(a.slots), "-c", str(a.ctx),
                           "--slot-save-path", slots, *a.server_args.split()]).wait_ready(300)
        a.url = proc.url
    t0 = time.monotonic()
    try:
        tally = run(a.url, a.clients, a.requests, a.duration, a.slots, a.seed)
    finally:
        rc = proc.stop() if proc is not None else 0
    print(f"{time.monotonic() - t0:.0f} s: {tally.ok} streams ended with [DONE], "
          f"{tally.cancelled} cancelled by the client, {len(tally.failures)} failed; "
          f"{tally.slot_ops} slot actions ({tally.slot_errors} refused); server exit {rc}")
    for f in tally.failures:
        print("FAIL", json.dumps(f)[:600])
    bad_log = []
    if proc is not None:
        log = proc.output().splitlines()
        bad_log = [ln for ln in log if "update_slots" in ln or "Traceback" in ln
                   or "decode failed" in ln or "failed to find" in ln]
        print(f"server log: {len(bad_log)} error lines")
        for ln in bad_log[:20]:
            print("LOG", ln[:300])
        if tally.failures:
            print("server log tail:\n" + "\n".join(log[-30:]))
    return 1 if tally.failures or bad_log or rc else 0


if __name__ == "__main__":
    sys.exit(main())
