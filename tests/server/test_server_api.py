"""llama-server end to end: a real server process, the tiny model, httpx and the openai client."""
import json
import os
import struct
import threading
import time

import httpx
import numpy as np
import pytest

PROMPT = "the cat sat on the mat and"


def post(client, path, **body):
    r = client.post(path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def greedy(client, prompt=PROMPT, n=12, **kw):
    return post(client, "/completion", prompt=prompt, n_predict=n, temperature=0, **kw)


def sse_events(response) -> list:
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            out.append(line[6:])
    return out


# ----------------------------------------------------------------------------- basic endpoints
def test_health_props_models(client):
    assert client.get("/health").json() == {"status": "ok"}
    r = client.get("/props")
    props = r.json()
    assert r.headers["server"] == "llama.cpp"
    assert r.headers["content-type"] == "application/json; charset=utf-8"
    assert props["total_slots"] == 2
    assert props["default_generation_settings"]["n_ctx"] == 512
    assert list(props)[:3] == ["default_generation_settings", "total_slots", "model_alias"]
    assert props["model_alias"] == "tiny-llama.gguf"
    assert props["chat_template"]  # ChatML fallback source
    models = client.get("/v1/models").json()
    assert models == client.get("/models").json() | {"data": models["data"]}
    assert models["object"] == "list" and models["data"][0]["id"] == "tiny-llama.gguf"
    assert models["data"][0]["meta"]["n_ctx"] == 512


def test_tokenize_detokenize_round_trip(client):
    text = "Hello world, the cat <|im_start|> é"
    ids = post(client, "/tokenize", content=text)["tokens"]
    assert all(isinstance(t, int) for t in ids)
    assert post(client, "/detokenize", tokens=ids)["content"] == text
    special = post(client, "/tokenize", content="<|im_start|>")["tokens"]
    assert len(special) == 1
    assert len(post(client, "/tokenize", content="<|im_start|>", parse_special=False)["tokens"]) > 1
    pieces = post(client, "/tokenize", content="the cat", with_pieces=True)["tokens"]
    assert "".join(p["piece"] for p in pieces) == "the cat"
    assert post(client, "/tokenize")["tokens"] == []


def test_apply_template_chatml(client):
    r = post(client, "/apply-template", messages=[{"role": "user", "content": "hi"}])
    assert r["prompt"] == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


# ----------------------------------------------------------------------------- native completion
def test_completion_limit_and_timings(client):
    r = greedy(client, n=8, return_tokens=True)
    n_prompt = len(post(client, "/tokenize", content=PROMPT, add_special=True)["tokens"])
    assert r["stop"] is True and r["stop_type"] == "limit" and r["tokens_predicted"] == 8
    assert len(r["tokens"]) == 8 and r["tokens_evaluated"] == n_prompt
    assert r["tokens_cached"] == n_prompt + 8 - 1
    t = r["timings"]
    assert t["predicted_n"] == 8 and t["prompt_n"] + t["cache_n"] == n_prompt
    assert t["predicted_ms"] > 0 and "draft_n" not in t
    assert r["generation_settings"]["n_predict"] == 8
    assert r["generation_settings"]["temperature"] == 0


def test_greedy_is_deterministic_and_prompt_cache_is_reused(client):
    a = greedy(client, id_slot=1)
    b = greedy(client, id_slot=1)
    assert a["content"] == b["content"]
    n_prompt = a["tokens_evaluated"]
    assert b["timings"]["cache_n"] == n_prompt - 1 and b["timings"]["prompt_n"] == 1
    c = greedy(client, id_slot=1, cache_prompt=False)
    assert c["timings"]["cache_n"] == 0 and c["content"] == a["content"]


def test_stream_native_matches_non_stream(client):
    ref = greedy(client, n=10)
    with client.stream("POST", "/completion", json={
            "prompt": PROMPT, "n_predict": 10, "temperature": 0, "stream": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-accel-buffering"] == "no"
        events = [json.loads(e) for e in sse_events(r)]
    assert "[DONE]" not in [e for e in events if isinstance(e, str)]
    partial, final = events[:-1], events[-1]
    assert all(e["stop"] is False and e["id_slot"] == -1 for e in partial)
    assert len(partial) == 10 and all(len(e["tokens"]) == 1 for e in partial)
    assert "".join(e["content"] for e in partial) == ref["content"]
    assert final["stop"] is True and final["content"] == "" and final["stop_type"] == "limit"
    assert final["timings"]["predicted_n"] == 10


def test_stop_string(client):
    text = greedy(client, n=16)["content"]
    i = max(3, len(text) // 2)
    word = text[i:i + 2]
    r = greedy(client, n=16, stop=[word, "\x00never"])
    first = text.find(word)
    assert r["stop_type"] == "word" and r["stopping_word"] == word
    assert r["content"] == text[:first]
    with client.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 16,
                       "temperature": 0, "stop": [word], "stream": True}) as s:
        events = [json.loads(e) for e in sse_events(s)]
    assert "".join(e["content"] for e in events) == text[:first]
    assert events[-1]["stop_type"] == "word"


def test_seed_reproducible(client):
    body = dict(prompt=PROMPT, n_predict=12, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0)
    a = post(client, "/completion", seed=1234, **body)
    b = post(client, "/completion", seed=1234, **body)
    assert a["content"] == b["content"]
    assert a["generation_settings"]["seed"] == 1234


def test_n_probs_match_the_model(client, tiny_llama):
    import pyllama
    r = greedy(client, n=1, n_probs=3)
    probs = r["completion_probabilities"]
    assert len(probs) == 1 and len(probs[0]["top_logprobs"]) == 3
    model = pyllama.load_model(tiny_llama)
    ctx = pyllama.Context(model, n_ctx=256)
    logits = ctx.eval(model.tokenize(PROMPT, add_special=True, parse_special=True))[-1]
    x = logits.astype(np.float64)
    logp = x - (np.log(np.exp(x - x.max()).sum()) + x.max())
    top = np.argsort(-logp, kind="stable")[:3]
    got = probs[0]["top_logprobs"]
    assert [g["id"] for g in got] == top.tolist()
    np.testing.assert_allclose([g["logprob"] for g in got], logp[top], atol=1e-4)
    assert probs[0]["id"] == top[0] and probs[0]["logprob"] == pytest.approx(logp[top[0]], abs=1e-4)
    assert bytes(probs[0]["bytes"]) == model.token_to_piece(int(top[0]))


def test_multiple_prompts_and_n(client):
    r = post(client, "/completion", prompt=["the cat", "a dog"], n_predict=3, temperature=0)
    assert isinstance(r, list) and [x["index"] for x in r] == [0, 1]
    assert r[0]["content"] == greedy(client, "the cat", n=3)["content"]
    tokens = post(client, "/tokenize", content="a dog")["tokens"]
    t = post(client, "/completion", prompt=tokens, n_predict=3, temperature=0)
    assert t["tokens_evaluated"] == len(tokens)


def test_response_fields(client):
    r = post(client, "/completion", prompt=PROMPT, n_predict=2, temperature=0,
             response_fields=["content", "timings/predicted_n"])
    assert set(r) == {"content", "timings/predicted_n"}   # keyed by path (json_get_nested_values)


# ----------------------------------------------------------------------------- OpenAI client
@pytest.fixture
def oai(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def test_openai_completions(oai, client):
    ref = greedy(client, n=6)["content"]
    r = oai.completions.create(model="x", prompt=PROMPT, max_tokens=6, temperature=0)
    assert r.choices[0].text == ref and r.choices[0].finish_reason == "length"
    assert r.object == "text_completion" and r.usage.completion_tokens == 6
    chunks = list(oai.completions.create(model="x", prompt=PROMPT, max_tokens=6, temperature=0,
                                         stream=True))
    assert "".join(c.choices[0].text for c in chunks) == ref
    assert chunks[-1].choices[0].finish_reason == "length"


def test_openai_chat(oai):
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    r = oai.chat.completions.create(model="x", messages=msgs, max_tokens=5, temperature=0,
                                    logprobs=True, top_logprobs=2)
    c = r.choices[0]
    assert c.message.role == "assistant" and c.finish_reason in ("length", "stop")
    assert r.object == "chat.completion" and r.usage.completion_tokens <= 5
    assert len(c.logprobs.content) == r.usage.completion_tokens
    assert len(c.logprobs.content[0].top_logprobs) == 2
    stream = oai.chat.completions.create(model="x", messages=msgs, max_tokens=5, temperature=0,
                                         stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == (c.message.content or "")
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == \
        r.usage.completion_tokens
    assert chunks[-2].choices[0].finish_reason == c.finish_reason


def test_chat_stream_ends_with_done(client):
    with client.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            "stream": True}) as r:
        events = sse_events(r)
    assert events[-1] == "[DONE]"
    last = json.loads(events[-2])
    assert last["object"] == "chat.completion.chunk" and "timings" in last


def test_chat_with_tools_accepted(oai):
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    r = oai.chat.completions.create(model="x", messages=[{"role": "user", "content": "w?"}],
                                    tools=tools, max_tokens=3, temperature=0)
    assert r.choices[0].finish_reason in ("length", "stop", "tool_calls")


# ----------------------------------------------------------------------------- slots and metrics
def test_slots_and_metrics(client):
    greedy(client, n=2, id_slot=0)
    slots = client.get("/slots").json()
    assert [s["id"] for s in slots] == [0, 1]
    assert slots[0]["n_ctx"] == 512 and slots[0]["is_processing"] is False
    # idle: the finished task's budget does not leak (llama.cpp test_metrics_slots_idle_after_completion)
    assert "id_task" in slots[0] and slots[0]["next_token"][0]["n_decoded"] == 0
    assert slots[0]["next_token"][0]["n_remain"] == -1
    m = client.get("/metrics")
    assert m.headers["content-type"].startswith("text/plain; version=0.0.4")
    values = dict(line.split(" ", 1) for line in m.text.splitlines() if not line.startswith("#"))
    assert float(values["llamacpp:prompt_tokens_total"]) > 0
    assert float(values["llamacpp:tokens_predicted_total"]) >= 2
    assert float(values["llamacpp:n_decode_total"]) >= 2
    assert "# TYPE llamacpp:requests_processing gauge" in m.text


def test_slot_save_erase_restore(client, slot_dir):
    a = greedy(client, n=6, id_slot=0)
    saved = post(client, "/slots/0?action=save", filename="s0.bin")
    assert saved["id_slot"] == 0 and saved["n_saved"] == a["tokens_cached"]
    assert os.path.getsize(os.path.join(slot_dir, "s0.bin")) == saved["n_written"]
    with open(os.path.join(slot_dir, "s0.bin"), "rb") as f:     # llama_state_seq_save_file's header
        magic, version, n_tok = struct.unpack("<III", f.read(12))
    assert (magic, version, n_tok) == (0x67677371, 3, a["tokens_cached"])
    assert post(client, "/slots/0?action=erase")["n_erased"] == a["tokens_cached"]
    restored = post(client, "/slots/0?action=restore", filename="s0.bin")
    assert restored["n_restored"] == a["tokens_cached"]
    b = greedy(client, n=6, id_slot=0)
    assert b["content"] == a["content"] and b["timings"]["cache_n"] == a["tokens_evaluated"] - 1
    bad = client.post("/slots/0?action=save", json={"filename": "../x"})
    assert bad.status_code == 400
    missing = client.post("/slots/0?action=restore", json={"filename": "nope.bin"})
    assert missing.status_code == 400


# ----------------------------------------------------------------------------- concurrency
def test_parallel_requests_batch_together_and_match_sequential(client, server):
    prompts = ["the cat sat", "once upon a time there was", "a dog ran"]  # 3 tasks, 2 slots
    ref = [greedy(client, p, n=24, cache_prompt=False)["content"] for p in prompts]
    out = [None] * len(prompts)

    def run(i):
        with httpx.Client(base_url=server.url, timeout=60) as c:
            out[i] = greedy(c, prompts[i], n=24, cache_prompt=False)["content"]
    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == ref  # results do not depend on batching (docs/architecture.md)


def test_disconnect_cancels_the_task(client, server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        with c.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 400,
                                                   "stream": True, "id_slot": 1}) as r:
            it = r.iter_lines()
            for _ in range(3):
                next(it)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10:
        if not client.get("/slots").json()[1]["is_processing"]:
            break
        time.sleep(0.05)
    slot = client.get("/slots").json()[1]
    assert slot["is_processing"] is False
    assert slot["next_token"][0]["n_decoded"] < 400
    assert greedy(client, n=2)["tokens_predicted"] == 2


def test_non_stream_disconnect_cancels_the_task(client, server):
    with httpx.Client(base_url=server.url, timeout=0.05) as c:
        with pytest.raises(httpx.ReadTimeout):
            c.post("/completion", json={"prompt": PROMPT, "n_predict": 3000, "id_slot": 1,
                                        "ignore_eos": True})
    t0 = time.monotonic()
    while time.monotonic() - t0 < 10 and client.get("/slots").json()[1]["is_processing"]:
        time.sleep(0.05)
    slot = client.get("/slots").json()[1]
    # cancelled: it stopped well before the slot's context would have ended it
    assert slot["is_processing"] is False
    assert slot["next_token"][0]["n_decoded"] < slot["n_ctx"] - 16


def test_mixed_traffic_with_aborts_stays_exact(client, server):
    """8 clients × 5 requests on 2 slots (plain, streamed, aborted, chat), prompts sharing
    prefixes: every completed greedy result equals its solo reference."""
    import random
    prompts = [f"prompt number {i} " * (1 + i % 5) for i in range(5)]
    ref = {p: greedy(client, p, n=16, cache_prompt=False)["content"] for p in prompts}
    errors = []

    def worker(k):
        rnd = random.Random(k)
        with httpx.Client(base_url=server.url, timeout=60) as c:
            for _ in range(5):
                p, mode = rnd.choice(prompts), rnd.choice(["plain", "stream", "abort", "chat"])
                body = {"prompt": p, "n_predict": 16, "temperature": 0}
                if mode == "plain" and greedy(c, p, n=16)["content"] != ref[p]:
                    errors.append(("plain", p))
                elif mode == "stream":
                    with c.stream("POST", "/completion", json={**body, "stream": True}) as r:
                        text = "".join(json.loads(e)["content"] for e in sse_events(r))
                    if text != ref[p]:
                        errors.append(("stream", p))
                elif mode == "abort":
                    with c.stream("POST", "/completion", json={**body, "n_predict": 300,
                                                               "stream": True}) as r:
                        next(r.iter_lines())
                elif mode == "chat":
                    r = c.post("/v1/chat/completions", json={
                        "messages": [{"role": "user", "content": p}], "max_tokens": 8})
                    if r.status_code != 200:
                        errors.append(("chat", r.text))
    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_return_progress(client):
    prompt = "the cat sat on the mat " * 10
    n = len(post(client, "/tokenize", content=prompt, add_special=True)["tokens"])
    body = {"prompt": prompt, "n_predict": 2, "stream": True, "return_progress": True,
            "cache_prompt": False}
    with client.stream("POST", "/completion", json=body) as r:
        events = [json.loads(e) for e in sse_events(r)]
    progress = [e["prompt_progress"] for e in events if "prompt_progress" in e]
    assert progress and progress[-1]["processed"] == progress[-1]["total"] == n
    assert all(e["content"] == "" for e in events if "prompt_progress" in e)
    assert sum(1 for e in events if e.get("tokens")) == 2
    with client.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True,
            "return_progress": True}) as r:
        chunks = [json.loads(e) for e in sse_events(r) if e != "[DONE]"]
    # llama.cpp: an initial report (processed = cache) then one per prompt batch
    prog = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
    assert prog[0]["processed"] == prog[0]["cache"] and len(prog) >= 2
    assert prog[-1]["processed"] == prog[-1]["total"]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}


def test_eos_stops_and_is_not_in_the_text(client):
    eos = post(client, "/tokenize", content="<|im_end|>")["tokens"]
    assert len(eos) == 1
    r = greedy(client, n=5, logit_bias=[[eos[0], 100.0]], return_tokens=True)
    assert r["stop_type"] == "eos" and r["content"] == "" and r["tokens"] == eos
    assert r["tokens_predicted"] == 1


def test_penalties_see_the_prompt(client):
    """llama.cpp replays the prompt into the sampler: with a huge presence penalty the first
    generated token is never a prompt token."""
    ids = post(client, "/tokenize", content=PROMPT, add_special=True)["tokens"]
    bias = [[ids[-1], 100.0]]   # make a prompt token the clear favourite
    assert greedy(client, n=1, logit_bias=bias, return_tokens=True)["tokens"] == [ids[-1]]
    r = greedy(client, n=1, logit_bias=bias, presence_penalty=1000.0, return_tokens=True)
    assert r["tokens"][0] not in set(ids)
