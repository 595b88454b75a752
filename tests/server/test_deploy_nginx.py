"""deploy/: 2 llama-server replicas (bundled Gemma) behind nginx on loopback, with
deploy/nginx.conf.in: conversation affinity, identical bytes from either replica (the
"invariant" numerics make replicas interchangeable), SSE passed through, and under a steady
load of 4 clients a SIGKILLed replica's conversations move to the survivor while no other request
fails."""
import json
import os
import shutil
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from server_proc import REPO, free_port

sys.path.insert(0, os.path.join(REPO, "deploy"))
from replicas import Cluster  # noqa: E402

NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx")
                                  else None)
pytestmark = [pytest.mark.realmodel, pytest.mark.skipif(
    NGINX is None, reason="nginx is not installed (Debian: apt-get install nginx)")]

CHAT = {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24,
        "temperature": 0}


def _stable(body: dict) -> dict:
    """A chat completion without what differs per request (id, created, timings, and how much
    of the prompt the replica had cached)."""
    out = {k: v for k, v in body.items() if k not in ("id", "created", "timings")}
    out["usage"] = {k: v for k, v in out["usage"].items() if k != "prompt_tokens_details"}
    return out


def _keys_per_replica(c: httpx.Client) -> dict:
    """Conversation key -> replica address, until both replicas have one."""
    seen = {}
    for i in range(64):
        key = f"conv-{i}"
        r = c.get("/health", headers={"X-Conversation-Id": key})
        assert r.status_code == 200
        seen.setdefault(r.headers["x-upstream"], key)
        if len(seen) == 2:
            return seen
    raise AssertionError(f"64 keys all hashed to {list(seen)}")


def test_two_replicas_behind_nginx(gemma_path, tmp_path):
    port = free_port()
    cl = Cluster(2, port, ["-m", gemma_path, "-c", "2048", "-np", "2", "-t", "1"],
                 prefix=str(tmp_path), base_port=None, nginx=NGINX)
    try:
        cl.wait_ready(300)
        with httpx.Client(base_url=cl.url, timeout=120) as c:
            keys = _keys_per_replica(c)
            (up_a, key_a), (up_b, key_b) = sorted(keys.items())
            # affinity: one key, one replica
            for _ in range(3):
                assert c.get("/health", headers={"X-Conversation-Id": key_a}
                             ).headers["x-upstream"] == up_a
            # the same greedy request: the same bytes from either replica
            # under load: 2 requests per replica at once, another prompt beside each
            other = {**CHAT, "messages": [{"role": "user", "content": "Say hello in French."}]}
            jobs = [(up, key, body) for up, key in keys.items() for body in (CHAT, other)]
            with ThreadPoolExecutor(len(jobs)) as pool:
                answers = list(pool.map(lambda j: c.post(
                    "/v1/chat/completions", json=j[2], headers={"X-Conversation-Id": j[1]}),
                    jobs))
            bodies = {}
            for (up, _, body), r in zip(jobs, answers):
                assert r.status_code == 200 and r.headers["x-upstream"] == up
                if body is CHAT:
                    bodies[up] = _stable(r.json())
            assert bodies[up_a] == bodies[up_b]
            text = bodies[up_a]["choices"][0]["message"]["content"]
            assert text
            # streaming passes through nginx: the same text, chunk by chunk, then [DONE]
            events = []
            with c.stream("POST", "/v1/chat/completions", json={**CHAT, "stream": True},
                          headers={"X-Conversation-Id": key_b}) as r:
                assert r.headers["content-type"].startswith("text/event-stream")
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        events.append(line[6:])
            assert events[-1] == "[DONE]" and len(events) > 3
            streamed = "".join(json.loads(e)["choices"][0]["delta"].get("content") or ""
                               for e in events[:-1] if json.loads(e)["choices"])
            assert streamed == text
            # a steady load (4 clients, 2 per conversation key) while replica A is killed
            idx = cl.ports.index(int(up_a.rsplit(":", 1)[1]))
            results, killed = [], threading.Event()
            small = {**CHAT, "max_tokens": 6}

            def client(key: str) -> None:
                with httpx.Client(base_url=cl.url, timeout=120) as cc:
                    for _ in range(4):
                        after = killed.is_set()
                        try:
                            r = cc.post("/v1/chat/completions", json=small,
                                        headers={"X-Conversation-Id": key})
                            results.append((key, after, r.status_code,
                                            r.headers.get("x-upstream", "")))
                        except httpx.HTTPError as e:
                            results.append((key, after, repr(e), ""))
            workers = [threading.Thread(target=client, args=(k,))
                       for k in (key_a, key_a, key_b, key_b)]
            for w in workers:
                w.start()
            t0 = time.monotonic()
            while len(results) < 2 and time.monotonic() - t0 < 120:
                time.sleep(0.05)
            cl.replicas[idx].send_signal(signal.SIGKILL)
            cl.replicas[idx].wait(30)
            killed.set()
            for w in workers:
                w.join(300)
            assert len(results) == 16
            for key, after, status, up in results:
                # B's conversations never fail; A's fail only if they were in flight on A
                if key == key_b or after:
                    assert status == 200, results
                if status == 200 and key == key_a and after:
                    assert up.split(", ")[-1] == up_b     # moved to the survivor
                if key == key_b:
                    assert up == up_b                     # affinity while B lives
            # after the kill A's conversation is served by B, with the same bytes
            r = c.post("/v1/chat/completions", json=CHAT, headers={"X-Conversation-Id": key_a})
            assert r.status_code == 200
            assert r.headers["x-upstream"].split(", ")[-1] == up_b
            assert _stable(r.json()) == bodies[up_a]
    finally:
        codes = cl.stop()
    assert codes.count(0) >= 1, cl.logs()
