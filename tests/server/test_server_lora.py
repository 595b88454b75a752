"""llama-server with LoRA adapters (server-context.cpp): GET/POST /lora-adapters, the per-request
`lora` field switching adapters without reloading, slots with different adapter sets decoded in
separate batches (can_batch_with) so that concurrent requests equal their single-request
results, and a mismatched adapter refused at start-up (exit 1). The adapter arithmetic itself
is checked against llama.cpp in tests/test_lora.py."""
import concurrent.futures as cf

import httpx
import numpy as np
import pytest

from server_proc import ServerProc


def _tiny_adapter(path, model_path, seed, rank=4, arch="llama"):
    import gguf
    import pyllama
    m = pyllama.load_model(model_path, vocab_only=True)
    hp = m.hparams
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 2.0 * rank)
    qd, e = hp.n_head * hp.n_embd_head_k, hp.n_embd
    for il in range(hp.n_layer):
        for name, rows, cols in (("attn_q", qd, e), ("attn_v", hp.n_embd_v_gqa, e),
                                 ("ffn_down", e, hp.n_ff[il])):
            w.add_tensor(f"blk.{il}.{name}.weight.lora_a",
                         (rng.standard_normal((rank, cols)) / np.sqrt(cols)).astype(np.float32))
            w.add_tensor(f"blk.{il}.{name}.weight.lora_b",
                         rng.standard_normal((rows, rank)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return str(path)


@pytest.fixture(scope="module")
def adapters(tiny_llama, tmp_path_factory):
    d = tmp_path_factory.mktemp("lora-srv")
    return [_tiny_adapter(d / "a.gguf", tiny_llama, 1), _tiny_adapter(d / "b.gguf", tiny_llama, 2)]


@pytest.fixture(scope="module")
def lora_server(tiny_llama, adapters):
    s = ServerProc(["-m", tiny_llama, "-c", "512", "-np", "2", "-t", "1", "--metrics",
                    "--lora", adapters[0], "--lora-scaled", f"{adapters[1]}:0.5"]).wait_ready()
    yield s
    assert s.stop() == 0, s.output()


def _complete(url, lora=None, prompt="Once upon a time", n=12):
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "n_probs": 3,
            "cache_prompt": True}
    if lora is not None:
        body["lora"] = lora
    r = httpx.post(url + "/completion", json=body, timeout=120)
    assert r.status_code == 200, r.text
    j = r.json()
    return j["content"], \
        [[p["logprob"] for p in t["top_logprobs"]] for t in j["completion_probabilities"]]


def test_adapters_listed_and_switched_per_request(lora_server, adapters):
    url = lora_server.url
    got = httpx.get(url + "/lora-adapters").json()
    assert [(a["id"], a["path"], a["scale"]) for a in got] == [(0, adapters[0], 1.0),
                                                              (1, adapters[1], 0.5)]
    assert set(got[0]) == {"id", "path", "scale", "task_name", "prompt_prefix"}
    none = _complete(url, lora=[{"id": 0, "scale": 0.0}])
    only_a = _complete(url, lora=[{"id": 0, "scale": 1.0}])
    only_b = _complete(url, lora=[{"id": 1, "scale": 1.0}])
    both = _complete(url)                                  # the server's scales: a 1, b 0.5
    assert len({str(x) for x in (none, only_a, only_b, both)}) == 4
    assert _complete(url, lora=[{"id": 0, "scale": 1.0}]) == only_a      # no reload, same
    assert _complete(url, lora=[{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.5}]) == both
    # concurrent requests with different adapters: each equals its single-request result
    with cf.ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(_complete, url, lora) for lora in
                ([{"id": 0, "scale": 1.0}], [{"id": 1, "scale": 1.0}],
                 [{"id": 0, "scale": 0.0}], None)]
        assert [f.result() for f in futs] == [only_a, only_b, none, both]
    # POST sets the scales of requests without `lora`; unlisted adapters get 0
    r = httpx.post(url + "/lora-adapters", json=[{"id": 1, "scale": 1.0}])
    assert r.json() == {"success": True}
    assert [a["scale"] for a in httpx.get(url + "/lora-adapters").json()] == [0.0, 1.0]
    assert _complete(url) == only_b
    httpx.post(url + "/lora-adapters", json=[{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.5}])
    assert _complete(url) == both


def test_bad_lora_field_is_400(lora_server):
    r = httpx.post(lora_server.url + "/completion", json={"prompt": "x", "lora": {"id": 0}})
    assert r.status_code == 400
    assert "'lora' must be an array" in r.json()["error"]["message"]
    r = httpx.post(lora_server.url + "/lora-adapters", json={"id": 0})
    assert r.status_code == 400 and r.json()["error"]["message"] == "Request body must be an array"
    assert httpx.get(lora_server.url + "/health").status_code == 200


def test_init_without_apply_and_mismatch(tiny_llama, tiny_model_path, adapters):
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "-t", "1", "--lora", adapters[0],
                    "--lora-init-without-apply"]).wait_ready()
    try:
        assert [a["scale"] for a in httpx.get(s.url + "/lora-adapters").json()] == [0.0]
        assert _complete(s.url, n=4) == _complete(s.url, lora=[{"id": 0, "scale": 0.0}], n=4)
    finally:
        assert s.stop() == 0
    other = tiny_model_path("qwen2")
    bad = ServerProc(["-m", other, "-c", "256", "--lora", adapters[0]])
    rc = bad.proc.wait(timeout=120)
    assert rc == 1, bad.output()
    assert "model arch and LoRA arch mismatch" in bad.output()


def _lora_info(url) -> tuple[dict, float]:
    """The llamacpp:lora_requests_info series (the gateway's LoRA adapter info): labels, value."""
    text = httpx.get(url + "/metrics").text
    assert "# TYPE llamacpp:lora_requests_info gauge" in text
    line, = [ln for ln in text.splitlines() if ln.startswith("llamacpp:lora_requests_info{")]
    labels, value = line[len("llamacpp:lora_requests_info{"):].rsplit("} ", 1)
    pairs = (p.split("=", 1) for p in labels.split('",'))
    return {k: v.strip('"') for k, v in pairs}, float(value)


def test_model_field_names_an_adapter_for_the_inference_gateway(lora_server):
    """The model server protocol's LoRA serving: `model` = an adapter's file name (no .gguf)
    serves that adapter alone at scale 1; an unknown model name is ignored, as llama.cpp does."""
    url = lora_server.url
    only_a = _complete(url, lora=[{"id": 0, "scale": 1.0}])
    only_b = _complete(url, lora=[{"id": 1, "scale": 1.0}])
    assert only_a != only_b
    body = {"prompt": "Once upon a time", "n_predict": 12, "temperature": 0, "n_probs": 3}
    for model, want in (("a", only_a), ("b", only_b), ("gpt-4o", _complete(url))):
        j = httpx.post(url + "/completion", json={**body, "model": model}, timeout=120).json()
        got = j["content"], [[p["logprob"] for p in t["top_logprobs"]]
                             for t in j["completion_probabilities"]]
        assert got == want, model
    # an explicit `lora` field wins over the model name
    j = httpx.post(url + "/completion", json={**body, "model": "a",
                                              "lora": [{"id": 1, "scale": 1.0}]}).json()
    assert j["content"] == only_b[0]


def test_lora_requests_info_metric(lora_server):
    import threading
    url = lora_server.url
    labels, t0 = _lora_info(url)
    assert labels == {"max_lora": "2", "running_lora_adapters": "", "waiting_lora_adapters": ""}
    assert abs(t0 - __import__("time").time()) < 60
    seen, started = [], threading.Event()

    def stream():
        body = {"prompt": "Once upon a time", "n_predict": 400, "ignore_eos": True,
                "stream": True, "model": "b", "cache_prompt": False}
        with httpx.stream("POST", url + "/completion", json=body, timeout=120) as r:
            for ln in r.iter_lines():
                if ln.startswith("data: "):
                    started.set()
    th = threading.Thread(target=stream)
    th.start()
    assert started.wait(60)
    seen.append(_lora_info(url)[0])
    th.join(120)
    assert seen[0]["running_lora_adapters"] == "b"
    assert _lora_info(url)[0]["running_lora_adapters"] == ""
