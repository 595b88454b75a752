"""The request-limit scenario shared by tests/make_n_predict_fixture.py (llama.cpp's llama-server)
and tests/server/test_server_n_predict.py (pyllama's): a server started with -n 8 and a
256-token unified KV cache of 4 slots. llama.cpp 0c1e570's launch_slot_with_task: "the
per-request limit takes priority over the global one" (n_predict_max = the request's n_predict
unless -1, else -n), and with --kv-unified each slot has the whole context (n_ctx_slot = 256)."""
import os
from concurrent.futures import ThreadPoolExecutor

import httpx

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                    "n-predict-llamacpp.json")
SERVER_ARGS = ["-c", "256", "-np", "4", "--kv-unified", "-n", "8", "-t", "1", "-b", "32"]
SOLO = [{"prompt": "A", "n_predict": 20}, {"prompt": "A"}, {"prompt": "A", "n_predict": 3},
        {"prompt": "A", "max_tokens": 12}]
PARALLEL = [80, 40, 80, 80]     # test_completion_unified's first case: fits in the pool


def _one(url, body):
    r = httpx.post(url + "/completion", json={"temperature": 0, "ignore_eos": True, **body},
                   timeout=300)
    d = r.json()
    return {"status": r.status_code, "predicted_n": d["timings"]["predicted_n"],
            "n_predict": d["generation_settings"]["n_predict"], "stop_type": d["stop_type"]}


def run_scenario(url: str) -> dict:
    solo = [_one(url, b) for b in SOLO]
    with ThreadPoolExecutor(len(PARALLEL)) as ex:
        par = list(ex.map(lambda n: _one(url, {"prompt": "A", "n_predict": n}), PARALLEL))
    return {"solo": solo, "parallel": par}
