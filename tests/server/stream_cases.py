"""The resumable-stream scenario both llama-servers are put through (recorded from llama.cpp's by
tests/make_streams_fixture.py into tests/data/streams-llamacpp.json, replayed against pyllama's
by test_server_streams.py): every step keeps only what does not depend on the model's text, ids
or clocks: statuses, media types, error bodies, lookup entry keys and the replay invariants."""
import json
import os

import httpx

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                    "streams-llamacpp.json")


def events(raw: bytes) -> list:
    """The JSON `data:` payloads of an SSE byte string ([DONE] and pings left out)."""
    out = []
    for frame in raw.decode("utf-8").split("\n\n"):
        for line in frame.splitlines():
            if line.startswith("data: ") and line[6:] != "[DONE]":
                out.append(json.loads(line[6:]))
    return out


def _media(r: httpx.Response) -> str:
    return r.headers.get("content-type", "").split(";")[0]


def _answer(r: httpx.Response) -> dict:
    out = {"status": r.status_code, "media": _media(r)}
    if out["media"] == "application/json" and r.content:
        out["body"] = r.json()
    else:
        out["n_bytes"] = len(r.content)
    return out


def _entry_shape(entries: list, full: dict) -> list:
    """A lookup answer with the clock fields and byte counts checked, not kept."""
    out = []
    for e in entries:
        n = full.get(e["conversation_id"])
        out.append({"keys": sorted(e), "conversation_id": e["conversation_id"],
                    "is_done": e["is_done"],
                    "total_bytes_is_stream": n is not None and e["total_bytes"] == n,
                    "clock": e["completed_at"] >= e["started_at"] > 0 if e["is_done"] else
                    e["completed_at"] == 0})
    return out


def run_scenario(url: str) -> list:
    steps = []
    full: dict[str, int] = {}
    c = httpx.Client(base_url=url, timeout=120,   # one connection per request
                     limits=httpx.Limits(max_keepalive_connections=0))

    def step(name, **kw):
        steps.append({"step": name, **kw})

    def lookup(ids):
        r = c.post("/v1/streams/lookup", json={"conversation_ids": ids})
        return {"status": r.status_code, "entries": _entry_shape(r.json(), full)}

    def stream(path, body, conv):
        r = c.post(path, json=body, headers={"X-Conversation-Id": conv})
        if r.status_code == 200:
            full[conv] = len(r.content)
        return r

    step("get_without_id", **_answer(c.get("/v1/stream")))
    step("get_empty_id", **_answer(c.get("/v1/stream", params={"conv_id": ""})))
    step("get_unknown", **_answer(c.get("/v1/stream", params={"conv_id": "nope"})))
    step("delete_without_id", **_answer(c.delete("/v1/stream")))
    step("delete_unknown", **_answer(c.delete("/v1/stream", params={"conv_id": "nope"})))
    step("lookup_object", **_answer(c.post("/v1/streams/lookup", json={})))
    step("lookup_not_a_list", **_answer(c.post("/v1/streams/lookup",
                                               json={"conversation_ids": "a"})))
    step("lookup_array_body", **_answer(c.post("/v1/streams/lookup", json=[1])))
    r = c.post("/v1/streams/lookup", content=b"{x")
    err = r.json()["error"]
    step("lookup_not_json", status=r.status_code, keys=sorted(err), type=err["type"],
         prefix=err["message"].startswith("invalid body: [json.exception.parse_error.101]"))

    body = {"prompt": "Hello", "n_predict": 8, "stream": True}
    r = stream("/completion", body, "s-1")
    step("completion_stream", status=r.status_code, media=_media(r),
         last_stop=events(r.content)[-1]["stop"])
    orig = r.content
    step("lookup_done", **lookup(["s-1"]))
    r = c.get("/v1/stream", params={"conv_id": "s-1"})
    step("replay", status=r.status_code, media=_media(r), same=r.content == orig)
    k = orig.index(b"\n\n") + 2
    r = c.get("/v1/stream", params={"conv_id": "s-1", "from": str(k)})
    step("replay_from_second_event", status=r.status_code, same=r.content == orig[k:])
    r = c.get("/v1/stream", params={"conv_id": "s-1", "from": str(len(orig) + 100)})
    step("from_past_end", **_answer(r))
    step("from_not_a_number", **_answer(c.get("/v1/stream",
                                              params={"conv_id": "s-1", "from": "abc"})))
    r = c.get("/v1/stream", params={"conv_id": "s-1", "from": "3xyz"})
    step("from_digits_then_junk", status=r.status_code, same=r.content == orig[3:])
    step("from_negative", **_answer(c.get("/v1/stream", params={"conv_id": "s-1",
                                                                "from": "-1"})))
    step("from_too_large", **_answer(c.get("/v1/stream", params={
        "conv_id": "s-1", "from": "99999999999999999999999"})))

    chat = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4,
            "stream": True}
    r = stream("/v1/chat/completions", chat, "s-2::some/model")
    step("chat_stream", status=r.status_code, done=r.content.endswith(b"data: [DONE]\n\n"))
    step("lookup_prefix", **lookup(["s-2"]))
    step("lookup_not_a_prefix", **lookup(["s-"]))
    step("lookup_twice_and_unknown", **lookup(["s-1", "s-1", "zzz", ""]))
    r = c.get("/v1/stream", params={"conv_id": "s-2::some/model"})
    step("replay_slash_id", status=r.status_code, same=len(r.content) == full["s-2::some/model"])

    r = c.post("/completion", json={"prompt": "Hello", "n_predict": 4},
               headers={"X-Conversation-Id": "s-3"})
    step("not_streamed", status=r.status_code, media=_media(r))
    step("lookup_not_streamed", **lookup(["s-3"]))
    r = c.post("/completion", json={"prompt": "Hello", "n_predict": 4, "stream": True},
               headers={"X-Conversation-Id": ""})
    step("empty_header", status=r.status_code)
    r = stream("/completion", {"prompt": "Hello " * 2000, "n_predict": 4, "stream": True},
               "s-4")
    step("failed_request", status=r.status_code)
    step("lookup_failed", **lookup(["s-4"]))
    r = c.post("/completion", json={"prompt": "Hello", "n_predict": 2, "stream": True},
               headers={"x-conversation-id": "s-5"})
    full["s-5"] = len(r.content)
    step("lower_case_header", stream_status=r.status_code, **lookup(["s-5"]))

    step("delete", **_answer(c.delete("/v1/stream", params={"conv_id": "s-1"})))
    step("get_deleted", **_answer(c.get("/v1/stream", params={"conv_id": "s-1"})))
    step("lookup_deleted", **lookup(["s-1"]))
    step("delete_again", **_answer(c.delete("/v1/stream", params={"conv_id": "s-1"})))
    c.close()
    return steps
