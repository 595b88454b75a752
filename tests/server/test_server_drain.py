"""Graceful drain on SIGTERM (pyllama/server/drain.py, a pyllama extension): a real llama-server
on the bundled Gemma; in-flight streams finish, new requests get llama.cpp's 503 shape, what
outlives --drain-timeout ends with a JSON error or a final SSE error event, exit status 0."""
import json
import signal
import threading
import time

import httpx
import pytest

from server_proc import ServerProc

pytestmark = pytest.mark.realmodel


def _stream(url: str, body: dict, first: threading.Event, out: list) -> None:
    """POST a streaming chat request; out gets the list of SSE data payloads (or the error)."""
    events = []
    try:
        with httpx.stream("POST", url + "/v1/chat/completions", json={**body, "stream": True},
                          timeout=120) as r:
            out.append(r.status_code)
            for line in r.iter_lines():
                if line.startswith("data: "):
                    events.append(line[len("data: "):])
                    first.set()
    except httpx.HTTPError as e:
        events.append(f"transport error: {e!r}")
    finally:
        first.set()
        out.append(events)


def _chat(n: int, **extra) -> dict:
    return {"messages": [{"role": "user", "content": "Count from one to one hundred."}],
            "max_tokens": n, "temperature": 0, "ignore_eos": True, **extra}


def _unavailable(r: httpx.Response, message: str) -> None:
    assert r.status_code == 503, r.text
    assert r.json() == {"error": {"code": 503, "message": message, "type": "unavailable_error"}}


def test_sigterm_drains_four_streams_and_refuses_new(gemma_path):
    s = ServerProc(["-m", gemma_path, "-c", "1024", "-np", "4", "--drain-timeout", "120"]
                   ).wait_ready(300)
    try:
        outs, firsts, threads = [], [], []
        for _ in range(4):
            out, first = [], threading.Event()
            t = threading.Thread(target=_stream, args=(s.url, _chat(96), first, out))
            t.start()
            outs.append(out), firsts.append(first), threads.append(t)
        for f in firsts:
            assert f.wait(120)
        s.proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        while "draining" not in s.output() and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        assert "draining" in s.output()
        _unavailable(httpx.get(s.url + "/health", timeout=10), "Server is draining")
        _unavailable(httpx.post(s.url + "/completion", json={"prompt": "hi"}, timeout=10),
                     "Server is draining")
        assert all(t.is_alive() for t in threads)   # the 4 streams were still running
        for t in threads:
            t.join(120)
        for status, events in outs:
            assert status == 200
            assert events[-1] == "[DONE]", events[-3:]
            last = json.loads(events[-2])
            assert last["choices"][0]["finish_reason"] == "length"
        assert s.proc.wait(30) == 0
    finally:
        s.stop()
    log = s.output()
    assert "Traceback" not in log and "draining" in log


def test_drain_timeout_ends_requests_with_errors(gemma_path):
    s = ServerProc(["-m", gemma_path, "-c", "4096", "-np", "2"],
                   env={"LLAMA_ARG_DRAIN_TIMEOUT": "1"}).wait_ready(300)
    try:
        out, first = [], threading.Event()
        t = threading.Thread(target=_stream, args=(s.url, _chat(3000), first, out))
        t.start()
        plain = []
        p = threading.Thread(target=lambda: plain.append(httpx.post(
            s.url + "/v1/chat/completions", json=_chat(3000), timeout=120)))
        p.start()
        assert first.wait(120)
        t0 = time.monotonic()   # the non-stream request is in its slot once /slots says so
        while sum(x["is_processing"] for x in httpx.get(s.url + "/slots").json()) < 2:
            assert time.monotonic() - t0 < 60
            time.sleep(0.05)
        s.proc.send_signal(signal.SIGTERM)
        t.join(60), p.join(60)
        assert s.proc.wait(30) == 0
    finally:
        s.stop()
    status, events = out
    assert status == 200 and events[-1] != "[DONE]"
    assert json.loads(events[-1]) == {"error": {
        "code": 503, "message": "server is shutting down (--drain-timeout exceeded)",
        "type": "unavailable_error"}}
    _unavailable(plain[0], "server is shutting down (--drain-timeout exceeded)")
    assert "Traceback" not in s.output()
