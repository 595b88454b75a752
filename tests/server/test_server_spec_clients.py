"""llama-server --spec-default (ngram-mod, n_match 24, n_min 48, n_max 64, llama.cpp's defaults, no
other tuning) with 4 concurrent clients on repetitive code prompts: each client's output equals
the output it gets alone from a server without speculation, token for token (greedy and seeded
sampling; one drafter state per slot, the ngram-mod pool shared, one unified batch). The tiny
Gemma-3 model (SWA, n_swa 16) falls into a loop on these prompts, so the long ngram-mod drafts
are proposed and accepted, by every client."""
import threading

import httpx
import pytest

from server_proc import ServerProc

CODE = ["def add_{i}(a, b):\n    return a + b + {i}\n\n", "for i in range({i}):\n    print(i)\n",
        "int f{i}(int x) {{ return x * {i}; }}\n", "x{i} = [v * {i} for v in range(10)]\n"]
PROMPTS = ["".join(c.format(i=i) for i in range(12)) for c in CODE]
CASES = [dict(temperature=0), dict(temperature=0),
         dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=11),
         dict(temperature=0.7, seed=5)]
BASE = ["-c", "4096", "-np", "4", "-ub", "64", "-b", "256", "-t", "1", "--metrics"]
N_PREDICT = 160


def complete(url, i):
    body = {"prompt": PROMPTS[i], "n_predict": N_PREDICT, "cache_prompt": False,
            "return_tokens": True, **CASES[i]}
    with httpx.Client(base_url=url, timeout=300) as c:
        r = c.post("/completion", json=body)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def model(tiny_model_path):
    return tiny_model_path("gemma3", embd_std=0.25)


def test_four_clients_with_spec_default_equal_their_solo_plain_output(model):
    plain = ServerProc(["-m", model, *BASE]).wait_ready()
    try:
        solo = [complete(plain.url, i) for i in range(4)]
    finally:
        assert plain.stop() == 0
    s = ServerProc(["-m", model, *BASE, "--spec-default"]).wait_ready()
    got = [None] * 4
    try:
        def go(i):
            got[i] = complete(s.url, i)
        threads = [threading.Thread(target=go, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with httpx.Client(base_url=s.url, timeout=60) as c:
            metrics = c.get("/metrics").text
    finally:
        assert s.stop() == 0
    for i in range(4):
        assert got[i]["tokens"] == solo[i]["tokens"], f"client {i}"
        assert got[i]["content"] == solo[i]["content"]
        assert len(got[i]["tokens"]) == N_PREDICT
        assert "draft_n" not in solo[i]["timings"]
    drafted = [g["timings"].get("draft_n", 0) for g in got]
    accepted = [g["timings"].get("draft_n_accepted", 0) for g in got]
    assert all(a > 0 for a in accepted)                 # every client's loop is drafted
    assert sum(accepted) <= sum(drafted)
    m = {ln.split()[0]: float(ln.split()[1]) for ln in metrics.splitlines()
         if ln.startswith("llamacpp:spec_decode")}
    assert m["llamacpp:spec_decode_num_draft_tokens_total"] == sum(drafted)
