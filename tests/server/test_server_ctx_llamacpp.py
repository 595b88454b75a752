"""llama-server's --cache-reuse and --context-shift against llama.cpp's own llama-server
(tests/data/server-ctx-llamacpp.json, recorded by tests/make_server_ctx_fixture.py from the
requests of ctx_cases.py): Qwen 2.5 Coder 0.5B, greedy, the llama.cpp numerics; the same tokens,
cache_n / prompt_n / predicted_n, truncated flags, stop types and errors.

- cache reuse: a prompt that drops a cached chunk B (A B C -> A C D) is served with cache_n
  covering A and the moved chunk C (seq_rm + seq_add, a K-shift before the next decode); a
  per-request n_cache_reuse larger than the chunk reuses only the prefix;
- context shift: with --context-shift, a prompt near the slot context generates past it (one
  shift, truncated); without it generation stops at the slot context with "limit" (finish reason
  "length") and a prompt longer than the slot context gets 400 exceed_context_size_error (slot
  contexts are padded to 256, as llama.cpp pads n_ctx_seq).
Also on the tiny model (no fixture): cache_n covers a moved chunk, and an iSWA cache that cannot
shift disables --cache-reuse with llama.cpp's warning."""
import json
import os

import httpx
import pytest

import ctx_cases as cc
from server_proc import ServerProc

FIXTURE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                       "server-ctx-llamacpp.json")


def _fixture() -> dict:
    if not os.path.exists(FIXTURE):
        pytest.skip("tests/data/server-ctx-llamacpp.json not recorded yet "
                    "(python tests/make_server_ctx_fixture.py)")
    with open(FIXTURE, encoding="utf-8") as f:
        return json.load(f)


def _run(path, flags, requests) -> tuple[dict, str]:
    s = ServerProc(["-m", path, "-t", "2", "-fa", "on", "--numerics", "llama.cpp", *flags]
                   ).wait_ready(300)
    out = {}
    try:
        with httpx.Client(base_url=s.url, timeout=600) as c:
            for name, body in requests:
                r = c.post("/completion", json=body)
                out[name] = cc.summary(r.status_code, r.json())
            assert c.get("/health").status_code == 200
    finally:
        assert s.stop() == 0
    return out, s.output()


SERVERS = {"reuse": (cc.REUSE_FLAGS, cc.reuse_requests),
           "shift": (cc.SHIFT_FLAGS, cc.shift_requests),
           "noshift": (cc.NOSHIFT_FLAGS, cc.noshift_requests)}


@pytest.mark.realmodel
@pytest.mark.parametrize("server", ["reuse", pytest.param("shift", marks=pytest.mark.slow),
                                    pytest.param("noshift", marks=pytest.mark.slow)])
def test_answers_equal_llamacpp_server(qwen_path, server):
    fx = _fixture()
    p = fx["prompts"]
    flags, reqs = SERVERS[server]
    want = fx["servers"][server]["answers"]
    got, log = _run(qwen_path, flags, reqs(p))
    for name, _ in reqs(p):
        assert got[name] == want[name], name
    if server == "reuse":        # the prefix and the moved chunk; then the prefix only
        assert got["acd"]["cache_n"] == p["n_a"] + p["n_chunk"]
        assert got["ace_no_reuse"]["cache_n"] < p["n_a"] + p["n_chunk"]
    if server == "shift":
        r = got["lorem_96"]
        assert r["predicted_n"] == 96 and r["truncated"] is True
        assert "slot context shift" in log
    if server == "noshift":
        assert got["short_all"]["stop_type"] == "limit" and got["short_all"]["truncated"]
        r = got["short_all"]
        assert r["predicted_n"] + r["cache_n"] + r["prompt_n"] == 256
        assert got["long"]["status"] == 400


def test_cache_reuse_moves_a_chunk_tiny(tiny_model_path):
    """cache_n covers the prefix and the moved chunk; the per-request override turns it off."""
    # --cache-ram 0: no host prompt cache swapping whole prompts in between
    s = ServerProc(["-m", tiny_model_path("llama"), "-t", "1", "-np", "1", "-c", "512",
                    "--cache-reuse", "8", "--cache-ram", "0"]).wait_ready()
    a = list(range(10, 40))
    b = list(range(40, 60))
    c = list(range(60, 100))
    d = list(range(100, 105))
    try:
        with httpx.Client(base_url=s.url, timeout=120) as cl:
            def go(prompt, **kw):
                r = cl.post("/completion", json={"prompt": prompt, "n_predict": 4,
                                                 "temperature": 0, **kw})
                assert r.status_code == 200, r.text
                return r.json()
            go(a + b + c)
            t = go(a + c + d)["timings"]
            assert (t["cache_n"], t["prompt_n"]) == (len(a) + len(c), len(d))
            go(a + b + c)
            t = go(a + c + d, n_cache_reuse=0)["timings"]
            assert (t["cache_n"], t["prompt_n"]) == (len(a), len(c) + len(d))
            r = cl.post("/completion", json={"prompt": a, "n_cache_reuse": -1})
            assert r.status_code == 400 and r.json()["error"]["message"] == (
                "Field 'n_cache_reuse': Value must be between 0 <= value <= 2147483647, "
                "but got -1")
    finally:
        assert s.stop() == 0


def test_cache_reuse_disabled_where_the_cache_cannot_shift(tiny_model_path):
    """An iSWA cache whose SWA part is smaller than the base part: llama.cpp's load_model
    warning, and requests asking for reuse are served from the prefix only."""
    path = tiny_model_path("gemma3")
    import pyllama
    ctx = pyllama.Context(pyllama.load_model(path), n_ctx=4096)
    if ctx.memory.can_shift():
        pytest.skip("tiny gemma3's SWA cache is full size here")
    s = ServerProc(["-m", path, "-t", "1", "-np", "1", "-c", "4096", "--cache-reuse", "4"]
                   ).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=120) as cl:
            r = cl.post("/completion", json={"prompt": list(range(10, 60)), "n_predict": 2,
                                             "n_cache_reuse": 4})
            assert r.status_code == 200
    finally:
        assert s.stop() == 0
    out = s.output()
    assert "cache_reuse is not supported by this context, it will be disabled" in out
    assert "cache reuse is not supported - ignoring n_cache_reuse = 4" in out


def test_context_shift_continues_past_the_slot_context_tiny(tiny_model_path):
    """--context-shift in the invariant numerics (the server's default): a 200-token prompt in a
    256-token slot generates 100 tokens (one shift of half the cache), truncated."""
    s = ServerProc(["-m", tiny_model_path("llama"), "-t", "1", "-np", "1", "-c", "256",
                    "--context-shift"]).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=120) as cl:
            r = cl.post("/completion", json={"prompt": list(range(10, 210)), "n_predict": 100,
                                             "temperature": 0, "ignore_eos": True})
            assert r.status_code == 200, r.text
            body = r.json()
            assert body["tokens_predicted"] == 100 and body["truncated"] is True
            assert body["stop_type"] == "limit" and body["tokens_cached"] < 256
    finally:
        assert s.stop() == 0
    assert "slot context shift, n_keep = 0, n_left = 255, n_discard = 127" in s.output()
