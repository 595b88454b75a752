"""/metrics as the Kubernetes inference gateway's model server protocol reads it (deploy/README.md):
queued and running requests as gauges, KV-cache utilisation as a 0-1 gauge that counts the cells
of requests in flight only. On a real server process with the tiny model."""
import json
import threading
import time


def _gauges(client) -> tuple[dict, str]:
    text = client.get("/metrics").text
    values = {ln.split(" ", 1)[0]: float(ln.split(" ", 1)[1])
              for ln in text.splitlines() if ln and not ln.startswith("#")}
    return values, text


def test_gateway_gauges_types_and_idle_values(client):
    client.post("/completion", json={"prompt": "warm the prompt cache", "n_predict": 4})
    values, text = _gauges(client)
    for name in ("requests_deferred", "requests_processing", "kv_cache_usage_ratio"):
        assert f"# TYPE llamacpp:{name} gauge" in text
    # idle: nothing queued, nothing running, and the idle slot's cached prompt is not counted
    assert values["llamacpp:requests_deferred"] == 0
    assert values["llamacpp:requests_processing"] == 0
    assert values["llamacpp:kv_cache_usage_ratio"] == 0


def test_kv_usage_counts_the_cells_of_a_request_in_flight(client):
    """While one prompt streams on the -c 1024 server (512-token slots), the ratio is at least its
    cells over the context's; running is 1; after the end both go back to 0."""
    prompt = " ".join(f"w{i}" for i in range(40))
    n_prompt = len(client.post("/tokenize", json={"content": prompt}).json()["tokens"])
    assert 40 <= n_prompt <= 250
    seen, first, errors = [], threading.Event(), []

    def stream():
        body = {"prompt": prompt, "n_predict": 200, "stream": True, "ignore_eos": True,
                "cache_prompt": False}
        with client.stream("POST", "/completion", json=body) as r:
            for ln in r.iter_lines():
                if ln.startswith("data: "):
                    ev = json.loads(ln[6:])
                    if "error" in ev:
                        errors.append(ev)
                    first.set()
            if r.status_code != 200:
                errors.append(r.status_code)
                first.set()
    t = threading.Thread(target=stream)
    t.start()
    assert first.wait(60) and not errors, errors
    while t.is_alive():
        values, _ = _gauges(client)
        if values["llamacpp:requests_processing"] == 1:
            seen.append(values["llamacpp:kv_cache_usage_ratio"])
        time.sleep(0.05)
    t.join()
    assert seen, "no scrape saw the request running"
    # the last scrape may have caught the slot between its release and the gauge
    assert all(n_prompt / 1024 <= v <= 1 for v in seen[:-1]) and 0 <= seen[-1] <= 1, \
        (n_prompt, seen)
    values, _ = _gauges(client)
    assert values["llamacpp:kv_cache_usage_ratio"] == 0
    assert values["llamacpp:requests_processing"] == 0
