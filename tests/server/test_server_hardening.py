"""What a hostile or careless client does: huge bodies, half-open sockets, bad slot files, uploads
cut short, and the /metrics text. Each case on a real server process with the tiny model."""
import os
import socket
import struct
import threading
import time

import httpx
import numpy as np
import pytest

from server_proc import ServerProc


@pytest.fixture(scope="module")
def hard(tiny_llama, tmp_path_factory):
    """A server with a 1 MiB body limit, a 2 s read timeout, slot saving and metrics."""
    slots = tmp_path_factory.mktemp("hard-slots")
    s = ServerProc(["-m", tiny_llama, "-c", "512", "-np", "2", "-t", "1", "--metrics",
                    "--slot-save-path", str(slots), "--max-body-size", str(1 << 20),
                    "--timeout", "2"]).wait_ready()
    s.slots = str(slots)
    yield s
    assert s.stop() == 0, s.output()


@pytest.fixture
def hc(hard):
    with httpx.Client(base_url=hard.url, timeout=120) as c:
        yield c


def error_of(r, code):
    assert r.status_code == code, r.text
    err = r.json()["error"]
    assert err["code"] == code and set(err) >= {"code", "message", "type"}
    return err


# -- 1: body limit, and /tokenize never blocks the event loop ---------------------------------------
def test_body_over_the_limit_gets_413(hc):
    big = b'{"content": "' + b"a" * (1 << 20) + b'"}'
    err = error_of(hc.post("/tokenize", content=big), 413)
    assert err["type"] == "invalid_request_error" and "--max-body-size" in err["message"]

    def chunks():     # no Content-Length: the limit applies to the bytes as they arrive
        yield b'{"content": "'
        for _ in range(20):
            yield b"a" * 65536
        yield b'"}'
    error_of(hc.post("/tokenize", content=chunks()), 413)
    assert hc.post("/tokenize", json={"content": "still serving"}).status_code == 200


def test_health_answers_while_a_large_tokenize_runs(tiny_llama):
    """/health keeps answering while a /tokenize of ~4 MB (seconds of work) runs: pings are sent
    and answered in the middle of it. It used to run on the event loop: the ping sent once it
    had started came back only when the tokenization was over."""
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "-t", "1"]).wait_ready()
    try:
        text = "The quick brown fox jumps over the lazy dog, again and again. " * 60000
        t0 = time.monotonic()
        done = {}

        def big():
            with httpx.Client(base_url=s.url, timeout=600) as c:
                r = c.post("/tokenize", json={"content": text})
            done["tokenize"] = (time.monotonic() - t0, r.status_code)
        t = threading.Thread(target=big)
        t.start()
        pings = []        # (sent, answered) seconds after the tokenize request started
        with httpx.Client(base_url=s.url, timeout=600) as c:
            while t.is_alive():
                sent = time.monotonic() - t0
                assert c.get("/health").status_code == 200
                pings.append((sent, time.monotonic() - t0))
                time.sleep(0.1)
        t.join()
        total, code = done["tokenize"]
        assert code == 200
        mid = [p for p in pings if 0.3 * total <= p[0] <= 0.7 * total and p[1] < 0.8 * total]
        assert mid, f"no /health answered during the tokenization ({total:.1f} s): {pings}"
    finally:
        assert s.stop() == 0, s.output()


# -- 2: half-open connections are closed after --timeout -----------------------------------------------
def test_partial_headers_are_closed_after_the_timeout(hard):
    socks = []
    for _ in range(5):
        sk = socket.create_connection(("127.0.0.1", hard.port))
        sk.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Le")
        socks.append(sk)
    silent = socket.create_connection(("127.0.0.1", hard.port))      # sends nothing at all
    socks.append(silent)
    body = socket.create_connection(("127.0.0.1", hard.port))        # headers, half a body
    body.sendall(b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"con")
    socks.append(body)
    try:
        for sk in socks:
            sk.settimeout(30)     # --timeout 2: closed well before this
            data = sk.recv(65536)
            while data:           # the server may answer (408) before it closes
                data = sk.recv(65536)
    finally:
        for sk in socks:
            sk.close()
    with httpx.Client(base_url=hard.url, timeout=60) as c:
        assert c.get("/health").status_code == 200


def test_a_long_request_is_not_cut_by_the_read_timeout(hc):
    """The read timeout is about bytes not arriving, not about time spent answering."""
    r = hc.post("/completion", json={"prompt": "a b c", "n_predict": 400, "temperature": 0,
                                     "ignore_eos": True})
    assert r.status_code == 200 and r.json()["tokens_predicted"] > 0


# -- 3: slot restore checks the file before touching the slot -----------------------------------------
def _slot_file(tokens, state: bytes) -> bytes:
    return (struct.pack("<III", 0x67677371, 3, len(tokens)) +
            np.asarray(tokens, np.int32).tobytes() + state)


def _saved(hc, hard, name="good.bin"):
    r = hc.post("/completion", json={"prompt": "one two three", "n_predict": 3,
                                     "temperature": 0, "id_slot": 0})
    assert r.status_code == 200
    r = hc.post("/slots/0?action=save", json={"filename": name})
    assert r.status_code == 200, r.text
    with open(os.path.join(hard.slots, name), "rb") as f:
        data = f.read()
    (n,) = struct.unpack_from("<I", data, 8)
    return data[12:12 + 4 * n], data[12 + 4 * n:]


def _slot0(hc):
    return next(s for s in hc.get("/slots").json() if s["id"] == 0)


@pytest.mark.parametrize("case", ["count", "negative", "vocab", "truncated", "trailing"])
def test_a_bad_slot_file_gets_400_and_the_slot_is_unchanged(hc, hard, case):
    ids, state = _saved(hc, hard)
    tokens = np.frombuffer(ids, np.int32).tolist()
    bad = {"count": _slot_file(tokens[:-1], state),
           "negative": _slot_file([-5] + tokens[1:], state),
           "vocab": _slot_file(tokens[:-1] + [10 ** 6], state),
           "truncated": _slot_file(tokens, state[:len(state) // 2]),
           "trailing": _slot_file(tokens, state + b"\0" * 8)}[case]
    with open(os.path.join(hard.slots, f"bad-{case}.bin"), "wb") as f:
        f.write(bad)
    before = _slot0(hc)
    err = error_of(hc.post("/slots/0?action=restore", json={"filename": f"bad-{case}.bin"}),
                   400)
    assert err["type"] == "invalid_request_error"
    # the slot still holds its tokens: the same prompt is served from the cache
    r = hc.post("/completion", json={"prompt": "one two three", "n_predict": 3,
                                     "temperature": 0, "id_slot": 0})
    assert r.status_code == 200, r.text
    assert r.json()["tokens_cached"] > 0 and before["id"] == 0
    good = hc.post("/slots/0?action=restore", json={"filename": "good.bin"})
    assert good.status_code == 200 and good.json()["n_restored"] == len(tokens)


def test_saving_onto_a_directory_leaks_no_path(hc, hard):
    os.makedirs(os.path.join(hard.slots, "adir"), exist_ok=True)
    err = error_of(hc.post("/slots/0?action=save", json={"filename": "adir"}), 500)
    assert err["message"] == "Unable to save slot"
    assert hard.slots not in err["message"]


def test_symlinks_in_the_slot_directory_are_not_followed(hc, hard, tmp_path):
    _saved(hc, hard, "real.bin")
    outside = tmp_path / "outside.bin"
    outside.write_bytes(open(os.path.join(hard.slots, "real.bin"), "rb").read())
    link = os.path.join(hard.slots, "link.bin")
    if not os.path.lexists(link):
        os.symlink(outside, link)
    error_of(hc.post("/slots/0?action=restore", json={"filename": "link.bin"}), 400)
    target = tmp_path / "target.bin"
    wlink = os.path.join(hard.slots, "wlink.bin")
    if not os.path.lexists(wlink):
        os.symlink(target, wlink)
    error_of(hc.post("/slots/0?action=save", json={"filename": "wlink.bin"}), 500)
    assert not target.exists()


# -- 6: a client that disconnects mid-upload costs one INFO line ---------------------------------------
def test_upload_cut_short_logs_one_line(hard):
    n0 = len(hard.output().splitlines())
    sk = socket.create_connection(("127.0.0.1", hard.port))
    sk.sendall(b"POST /completion HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: 50000\r\n\r\n{\"prompt\": \"" + b"a" * 1000)
    time.sleep(0.3)
    sk.close()
    with httpx.Client(base_url=hard.url, timeout=60) as c:
        for _ in range(50):
            new = hard.output().splitlines()[n0:]
            if any("disconnected before the request body was complete" in ln for ln in new):
                break
            time.sleep(0.1)
            c.get("/health")
    new = hard.output().splitlines()[n0:]
    assert not any("Traceback" in ln or "Exception" in ln for ln in new), "\n".join(new)
    assert sum("disconnected before the request body" in ln for ln in new) == 1, "\n".join(new)


# -- 7: API keys --------------------------------------------------------------------------------------
def test_api_keys_are_compared_in_constant_time(monkeypatch):
    from pyllama.server import app
    calls = []
    real = app.hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)
    monkeypatch.setattr(app.hmac, "compare_digest", spy)
    keys = ["first-key", "second-key", "clé-trois"]
    assert app.key_matches("first-key", keys)
    assert len(calls) == 3, "every key is compared, with no early exit"
    assert app.key_matches("clé-trois", keys)
    assert not app.key_matches("first-ke", keys) and not app.key_matches("", keys)


# -- 10: /metrics prints counters as llama.cpp does ------------------------------------------------
def test_metrics_values_are_printed_like_llama_cpp(hc):
    r = hc.post("/completion", json={"prompt": "metrics please", "n_predict": 3,
                                     "temperature": 0})
    assert r.status_code == 200
    text = hc.get("/metrics").text
    values = dict(ln.split(" ", 1) for ln in text.splitlines() if not ln.startswith("#"))
    for name in ("prompt_tokens_total", "tokens_predicted_total", "n_decode_total",
                 "n_tokens_max", "prompt_tokens_cached_total"):
        v = values[f"llamacpp:{name}"]
        assert v.isdigit(), f"{name} = {v!r}: llama.cpp prints integral counters without '.0'"
    types = [ln.split()[-1] for ln in text.splitlines() if ln.startswith("# TYPE")]
    # server-task.cpp to_metrics: counters first, then its 5 gauges; then pyllama's one extension,
    # the inference gateway's kv_cache_usage_ratio (deploy/README.md)
    assert types == ["counter"] * 10 + ["gauge"] * 6
    assert [ln.split()[2] for ln in text.splitlines() if ln.startswith("# TYPE")][-1] \
        == "llamacpp:kv_cache_usage_ratio"


def test_cpp_double_formatting():
    """std::ostream << double (precision 6, %g): the values llama.cpp's /metrics prints."""
    from pyllama.server.app import cpp_double
    assert [cpp_double(v) for v in (0, 5, 5.0, 0.25, 1234567, 0.1234567, 1e-7, 123456)] == \
        ["0", "5", "5", "0.25", "1.23457e+06", "0.123457", "1e-07", "123456"]


# -- 9: one slot's bad state must not end another slot's stream with an error ---------------------
def test_a_stream_survives_a_bad_restore_in_another_slot(tiny_llama, tmp_path):
    """The cause of streams ending with an "error" event under mixed load: a slot restored from
    a file whose token count disagreed with its state held more tokens than its KV cells, so
    the next batch including that slot failed to decode (-1) and every slot of that batch,
    including a healthy stream in another slot, got the error. The restore is now refused."""
    s = ServerProc(["-m", tiny_llama, "-c", "2048", "-np", "2", "-t", "1",
                    "--slot-save-path", str(tmp_path)]).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            r = c.post("/completion", json={"prompt": "one two three four", "n_predict": 2,
                                            "temperature": 0, "id_slot": 0})
            assert r.status_code == 200
            assert c.post("/slots/0?action=save", json={"filename": "s0.bin"}).status_code == 200
            data = (tmp_path / "s0.bin").read_bytes()
            (n,) = struct.unpack_from("<I", data, 8)
            tokens = np.frombuffer(data, np.int32, n, 12).tolist()
            longer = tokens + tokens[-1:] * 4          # 4 more tokens than the state holds
            (tmp_path / "bad.bin").write_bytes(_slot_file(longer, data[12 + 4 * n:]))
        lines, started = [], threading.Event()

        def stream():
            with httpx.Client(base_url=s.url, timeout=120) as c2:
                with c2.stream("POST", "/v1/completions", json={
                        "prompt": "a long story", "max_tokens": 900, "temperature": 0,
                        "ignore_eos": True, "stream": True, "id_slot": 1}) as r2:
                    for line in r2.iter_lines():
                        if line:
                            lines.append(line)
                            started.set()
        t = threading.Thread(target=stream)
        t.start()
        assert started.wait(60)
        with httpx.Client(base_url=s.url, timeout=120) as c:
            c.post("/slots/0?action=restore", json={"filename": "bad.bin"})
            c.post("/completion", json={"prompt": longer + [5, 6], "n_predict": 4,
                                        "temperature": 0, "id_slot": 0})
        t.join()
        errors = [ln for ln in lines if '"error"' in ln]
        assert not errors and lines[-1] == "data: [DONE]", (errors[:1], lines[-2:])
    finally:
        assert s.stop() == 0, s.output()


# -- 4: status codes and prompt shapes as llama.cpp's llama-server answers them ------------------
# Each expectation is what llama.cpp 0c1e570's llama-server answered (AVX2 build, Qwen2.5-Coder
# and Gemma 3 GGUFs, 2026-12-02); the cases come from the issue, where pyllama answered 500.
def test_empty_messages_render_like_llama_cpp(hc):
    """llama.cpp renders an empty conversation (its jinja gives undefined for messages[0]):
    200 on /apply-template and on /v1/chat/completions."""
    r = hc.post("/apply-template", json={"messages": []})
    assert r.status_code == 200 and r.json()["prompt"].endswith("assistant\n")
    r = hc.post("/v1/chat/completions", json={"messages": [], "max_tokens": 2,
                                              "temperature": 0})
    assert r.status_code == 200, r.text


def test_empty_messages_with_a_template_indexing_messages():
    """Qwen2.5's template reads messages[0]['role']: undefined on an empty list, not an error
    (llama.cpp: the default system prompt and the generation prompt)."""
    from pyllama.vocab.chat import ChatTemplate
    src = ("{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{%- else %}"
           "SYS{%- endif %}{%- for m in messages %}[{{ m.content }}]{%- endfor %}"
           "{%- if add_generation_prompt %}GEN{%- endif %}")
    assert ChatTemplate(src).apply([], add_generation_prompt=True) == "SYSGEN"


def test_chat_template_kwargs_messages_replace_the_conversation(hc):
    body = {"messages": [{"role": "user", "content": "x"}],
            "chat_template_kwargs": {"messages": [{"role": "user", "content": "other"}]}}
    r = hc.post("/apply-template", json=body)
    assert r.status_code == 200 and "other" in r.json()["prompt"] and "x<" not in r.json()[
        "prompt"]
    body["chat_template_kwargs"] = {"messages": "zz"}
    error_of(hc.post("/apply-template", json=body), 400)


@pytest.mark.parametrize("bias", [5, "abc", [["a"]], [[1, "x"]], {"3": "high"}])
def test_malformed_logit_bias_is_ignored(hc, bias):
    r = hc.post("/completion", json={"prompt": "hi", "n_predict": 1, "logit_bias": bias})
    assert r.status_code == 200, r.text


def test_tokenize_with_pieces_and_a_bad_id_is_llama_cpps_500(hc):
    err = error_of(hc.post("/tokenize", json={"content": [1, 99999999], "with_pieces": True}),
                   500)
    assert err["type"] == "server_error" and "(which is 99999999)" in err["message"]
    r = hc.post("/tokenize", json={"content": [1, 99999999]})
    assert r.status_code == 200 and r.json()["tokens"] == [1, 99999999]


def test_prompt_shapes(hc):
    ok = hc.post("/completion", json={"prompt": ["Hello", 15], "n_predict": 1})
    assert ok.status_code == 200, ok.text
    assert ok.json()["tokens_evaluated"] == len(
        hc.post("/tokenize", json={"content": "Hello", "add_special": True}).json()["tokens"]) + 1
    err = error_of(hc.post("/completion", json={"prompt": {"foo": 1}, "n_predict": 1}), 400)
    assert err["message"].startswith('"prompt" elements must be a string, a list of tokens')
    err = error_of(hc.post("/completion", json={"prompt": [], "n_predict": 1}), 400)
    assert err["message"] == '"prompt" must not be empty'
    r = hc.post("/completion", json={"prompt": {"prompt_string": "Hello"}, "n_predict": 1})
    assert r.status_code == 200


def test_a_full_cache_frees_idle_slots_instead_of_failing(tiny_llama):
    """Slots share one unified cache of 256 cells, each may use all of it: an idle slot's cached
    prompt used to leave no room for the next request, which then failed with 500 (and every
    stream of the batch with it). As llama.cpp's update_slots, the idle slots' caches are freed
    and the batch retried (then halved; only a batch of one token that fits nowhere fails)."""
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "2", "-t", "1", "--kv-unified"]
                   ).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            a = c.post("/completion", json={"prompt": [5] * 150, "n_predict": 1,
                                            "temperature": 0, "id_slot": 0})
            assert a.status_code == 200, a.text
            b = c.post("/completion", json={"prompt": [6] * 150, "n_predict": 4,
                                            "temperature": 0, "id_slot": 1})
            assert b.status_code == 200, b.text
            assert b.json()["tokens_predicted"] == 4
    finally:
        assert s.stop() == 0, s.output()
