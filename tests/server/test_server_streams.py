"""Resumable streams (pyllama/server/streams.py, llama.cpp 0c1e570 server-stream.cpp): a
completion with an X-Conversation-Id header is buffered for GET /v1/stream?conv_id=&from=N,
POST /v1/streams/lookup and DELETE /v1/stream; the router forwards them to the owning child.
The shapes llama.cpp's own llama-server answers are in tests/data/streams-llamacpp.json
(tests/make_streams_fixture.py); the scenario both are put through is stream_cases.py."""
import asyncio
import os
import re
import shutil
import time

import httpx
import pytest

from server_proc import ServerProc
from stream_cases import DATA, events, run_scenario

from pyllama.server import streams as ST

LONG = {"prompt": "hi", "n_predict": 400, "ignore_eos": True, "stream": True}


def _post_stream(url, path, body, conv, stop_after=None, on_event=None):
    """POST a streaming request with the header; the bytes read (all of them, or up to the
    end of the `stop_after`-th SSE event, then the connection is dropped)."""
    got = b""
    with httpx.Client(base_url=url, timeout=60) as c:
        with c.stream("POST", path, json=body, headers={"X-Conversation-Id": conv}) as r:
            assert r.status_code == 200
            for chunk in r.iter_raw():
                got += chunk
                n = got.count(b"\n\n")
                if on_event is not None:
                    on_event(n)
                if stop_after is not None and n >= stop_after:
                    return got[:_nth_end(got, stop_after)]
    return got


def _nth_end(b: bytes, n: int) -> int:
    i = -2
    for _ in range(n):
        i = b.index(b"\n\n", i + 2)
    return i + 2


def _decoded(c) -> int:
    m = re.search(r"^llamacpp:n_decode_total (\d+)", c.get("/metrics").text, re.M)
    return int(m.group(1))


def _wait_idle(c, timeout=10.0):
    t0 = time.monotonic()
    while any(s["is_processing"] for s in c.get("/slots").json()):
        assert time.monotonic() - t0 < timeout, "a slot stayed busy"
        time.sleep(0.02)


def test_same_shapes_as_llama_cpp(server):
    """The scenario of stream_cases.py: statuses, error bodies, lookup entries and the replay
    invariants equal what llama.cpp's llama-server answered."""
    import json
    with open(DATA, encoding="utf-8") as f:
        want = json.load(f)
    got = run_scenario(server.url)
    assert [g["step"] for g in got] == [w["step"] for w in want]
    for g, w in zip(got, want):
        assert g == w, (g, w)


def test_replay_resume_from_every_event(server, client):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12, "stream": True}
    full = _post_stream(server.url, "/v1/chat/completions", body, "resume-1")
    assert full.endswith(b"data: [DONE]\n\n")
    assert client.get("/v1/stream", params={"conv_id": "resume-1"}).content == full
    n = full.count(b"\n\n")
    for k in range(n + 1):
        off = _nth_end(full, k) if k else 0
        r = client.get("/v1/stream", params={"conv_id": "resume-1", "from": str(off)})
        assert r.status_code == 200 and r.content == full[off:]
        assert events(r.content) == events(full)[k:]
    (entry,) = client.post("/v1/streams/lookup",
                           json={"conversation_ids": ["resume-1"]}).json()
    assert entry["is_done"] and entry["total_bytes"] == len(full)
    assert entry["completed_at"] >= entry["started_at"] > 0


def test_disconnect_then_resume_gets_the_rest(server, client):
    """A client that drops after 3 events: the generation goes on; resuming from the byte
    count it had gives exactly the remaining events, ending with the final one."""
    before = _post_stream(server.url, "/completion", LONG, "drop-1", stop_after=3)
    r = client.get("/v1/stream", params={"conv_id": "drop-1", "from": str(len(before))})
    whole = events(before + r.content)
    assert len(events(before)) == 3 and len(whole) == LONG["n_predict"] + 1
    assert [e["stop"] for e in whole] == [False] * LONG["n_predict"] + [True]
    assert whole[-1]["tokens_predicted"] == LONG["n_predict"]
    assert client.get("/v1/stream", params={"conv_id": "drop-1"}).content == before + r.content


def test_delete_cancels_the_generation(server, client):
    """DELETE while the client reads: its stream ends without a final event, the slot is
    freed long before n_predict tokens, the session is gone (404, not in lookup)."""
    _wait_idle(client)
    d0 = _decoded(client)
    deleted = []

    def stop(n):
        if n >= 2 and not deleted:
            deleted.append(client.delete("/v1/stream", params={"conv_id": "stop-1"}))
    got = _post_stream(server.url, "/completion", LONG, "stop-1", on_event=stop)
    assert deleted[0].status_code == 204 and deleted[0].content == b""
    assert all(not e["stop"] for e in events(got))
    _wait_idle(client)
    assert _decoded(client) - d0 < LONG["n_predict"] // 2
    assert client.get("/v1/stream", params={"conv_id": "stop-1"}).status_code == 404
    assert client.post("/v1/streams/lookup",
                       json={"conversation_ids": ["stop-1"]}).json() == []


def test_delete_after_disconnect_frees_the_slot(server, client):
    _wait_idle(client)
    d0 = _decoded(client)
    _post_stream(server.url, "/completion", LONG, "stop-2", stop_after=2)
    assert client.delete("/v1/stream", params={"conv_id": "stop-2"}).status_code == 204
    _wait_idle(client)
    assert _decoded(client) - d0 < LONG["n_predict"] // 2


def test_same_conversation_replaces_the_session(server, client):
    first = []

    def again(n):
        if n >= 2 and not first:
            first.append(_post_stream(server.url, "/completion",
                                      {**LONG, "n_predict": 4}, "same-1"))
    old = _post_stream(server.url, "/completion", LONG, "same-1", on_event=again)
    assert all(not e["stop"] for e in events(old))       # cancelled by the second request
    (entry,) = client.post("/v1/streams/lookup", json={"conversation_ids": ["same-1"]}).json()
    assert entry["total_bytes"] == len(first[0])
    _wait_idle(client)


# ---------------------------------------------------------------------------- limits, GC
def test_buffer_cap_drops_the_oldest_bytes():
    async def run():
        s = ST.StreamSession("c", 10)
        s.append(b"0123456")
        s.append(b"789ab")                # 12 bytes: the first 2 drop
        assert (s.prefix_dropped, bytes(s.buffer), s.total_size) == (2, b"23456789ab", 12)
        s.append(b"ABCDEFGHIJKLMN")       # one chunk over the cap: its tail stays
        assert (s.prefix_dropped, bytes(s.buffer)) == (16, b"EFGHIJKLMN")
        s.finalize()
        assert not s.append(b"x")
        assert [c async for c in s.read_from(20)] == [b"IJKLMN"]
        assert [c async for c in s.read_from(3)] == []          # offset lost
        assert [c async for c in s.read_from(99)] == []         # past the end: nothing
        assert ST.STREAM_SESSION_MAX_BYTES == 4 * 1024 * 1024
    asyncio.run(run())


def test_offset_lost_is_400():
    from starlette.requests import Request

    async def run():
        m = ST.StreamSessions(max_bytes=8)
        s = m.create_or_replace("c")
        s.append(b"data: 1\n\ndata: 2\n\n")
        scope = {"type": "http", "method": "GET", "path": "/v1/stream", "headers": [],
                 "query_string": b"conv_id=c&from=0"}
        r = await ST.get_stream(m, Request(scope))
        assert r.status_code == 400 and b"Stream offset lost, please restart" in r.body
        m.stop()
        assert m.get("c") is None and s.done
    asyncio.run(run())


def test_finished_sessions_live_300_s():
    async def run():
        m = ST.StreamSessions()
        assert m.ttl == 300 and m.gc_interval == 60
        a, b = m.create_or_replace("a"), m.create_or_replace("b")
        a.finalize()
        m.collect(now=a.completed_ts + 299)
        assert m.get("a") is a
        m.collect(now=a.completed_ts + 300)
        assert m.get("a") is None and m.get("b") is b        # a live one is never collected
        m.stop()
    asyncio.run(run())


def test_strtoull():
    assert ST.strtoull("12") == 12 and ST.strtoull(" +7x") == 7
    assert ST.strtoull("-1") == 2**64 - 1
    for bad in ("", "abc", "-", str(2**64)):
        with pytest.raises(ValueError):
            ST.strtoull(bad)


# ---------------------------------------------------------------------------- router
def test_router_forwards_the_stream_routes(tiny_llama, tmp_path):
    shutil.copy(tiny_llama, tmp_path / "tiny.gguf")
    s = ServerProc(["--models-dir", str(tmp_path), "-c", "512", "-np", "1", "-t", "1"]
                   ).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            body = {"model": "tiny", "prompt": "hi", "n_predict": 8, "stream": True}
            full = _post_stream(s.url, "/completion", body, "r-1::tiny")
            assert len(events(full)) == 9
            (e,) = c.post("/v1/streams/lookup", json={"conversation_ids": ["r-1::tiny"]}).json()
            assert e["conversation_id"] == "r-1::tiny" and e["total_bytes"] == len(full)
            assert c.post("/v1/streams/lookup", content=b"x").json() == []
            r = c.get("/v1/stream", params={"conv_id": "r-1::tiny", "from": "5"})
            assert r.status_code == 200 and r.content == full[5:]
            assert c.get("/v1/stream", params={"conv_id": "nope"}).status_code == 404
            assert c.get("/v1/stream").json()["error"]["message"] == \
                "Missing conversation id in path"
            assert c.delete("/v1/stream", params={"conv_id": "r-1::tiny"}).status_code == 204
            assert c.get("/v1/stream", params={"conv_id": "r-1::tiny"}).status_code == 404
    finally:
        assert s.stop() == 0, s.output()
