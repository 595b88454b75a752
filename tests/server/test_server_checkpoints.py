"""SWA context checkpoints (-ctxcp): a chat continued or regenerated on a sliding-window model
without --swa-full reuses the cache instead of re-processing the whole conversation, and every
answer equals a fresh (cache_prompt false) run. Tiny model (n_swa 16, 256-cell SWA cache) for CI;
Gemma 3 270M (n_swa 512, -ub 64: 768-cell SWA cache) marked realmodel + slow."""
import httpx
import pytest

from server_proc import ServerProc

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()


def user_text(k: int, n: int) -> str:
    return " ".join(f"{WORDS[(i * 7 + k) % len(WORDS)]} {i}" for i in range(n))


def chat(c, messages, **kw) -> dict:
    body = {"messages": messages, "temperature": 0, **kw}
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def answer(r) -> str:
    return r["choices"][0]["message"]["content"]


def n_prompt(c, messages) -> int:
    r = c.post("/apply-template", json={"messages": messages})
    assert r.status_code == 200, r.text
    return len(c.post("/tokenize", json={"content": r.json()["prompt"],
                                         "add_special": True, "parse_special": True}
                      ).json()["tokens"])


def three_turns(c, user_len: int, n_answer: int, margin: int) -> list:
    """A 3-turn chat; turns 2 and 3 re-process only their new tokens, answers as fresh runs."""
    msgs, n_prev = [], 0
    for k in range(3):
        msgs.append({"role": "user", "content": user_text(k, user_len)})
        r = chat(c, msgs, max_tokens=n_answer)
        n = n_prompt(c, msgs)
        t = r["timings"]
        if k:
            assert t["cache_n"] >= n_prev and t["prompt_n"] <= n - n_prev + margin, (k, t)
        assert answer(r) == answer(chat(c, msgs, max_tokens=n_answer, cache_prompt=False))
        msgs.append({"role": "assistant", "content": answer(r)})
        n_prev = n
    return msgs


def regenerate(c, msgs, n_answer: int, margin: int) -> None:
    """The last answer again (long enough that the window of the prompt end is gone): restored
    from the checkpoint 4 tokens before the prompt end."""
    q = msgs[:-1]
    first = chat(c, q, max_tokens=n_answer)
    again = chat(c, q, max_tokens=n_answer)
    n = n_prompt(c, q)
    assert again["timings"]["cache_n"] > 0 and again["timings"]["prompt_n"] <= margin, \
        again["timings"]
    assert answer(again) == answer(first)


@pytest.fixture(scope="module")
def tiny_server(tiny_model_path):
    s = ServerProc(["-m", tiny_model_path("gemma3"), "-c", "4096", "-np", "1", "-ub", "16",
                    "-b", "64", "-t", "1"]).wait_ready()
    yield s
    assert s.stop() == 0


def test_tiny_chat_reuses_cache_past_the_swa_window(tiny_server):
    with httpx.Client(base_url=tiny_server.url, timeout=300) as c:
        msgs = three_turns(c, user_len=60, n_answer=12, margin=8)
        assert n_prompt(c, msgs) > 256 + 16
        regenerate(c, msgs, n_answer=280, margin=4)
        slot = c.get("/slots").json()[0]
    ck = slot["ctx_checkpoints"]
    assert 0 < ck["n"] <= 32 and ck["size"] > 0 and ck["size_draft"] == 0
    out = tiny_server.output()
    assert "created context checkpoint" in out and "restored context checkpoint" in out


def test_tiny_checkpoints_with_a_draft_model(tiny_model_path):
    """With speculation the checkpoints hold the draft context's SWA state too, and the restored
    conversation continues exactly."""
    m = tiny_model_path("gemma3")
    # --spec-policy fixed: the draft is the target itself, where the default cost-aware policy
    # (rightly) drafts nothing; this test needs drafts
    s = ServerProc(["-m", m, "-md", m, "--spec-policy", "fixed", "-c", "4096", "-np", "1",
                    "-ub", "16", "-b", "64", "-t", "1"]).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=300) as c:
            msgs = three_turns(c, user_len=60, n_answer=12, margin=8)
            regenerate(c, msgs, n_answer=280, margin=4)
            slot = c.get("/slots").json()[0]
    finally:
        assert s.stop() == 0
    out = s.output()
    assert "restored context checkpoint" in out and "draft acceptance = " in out
    ck = slot["ctx_checkpoints"]
    assert ck["n"] > 0 and ck["size"] > 0 and ck["size_draft"] > 0


def test_tiny_no_checkpoint_fits_forces_full_reprocessing(tiny_server):
    with httpx.Client(base_url=tiny_server.url, timeout=300) as c:
        long = user_text(5, 150)
        chat(c, [{"role": "user", "content": long}], max_tokens=4)
        r = chat(c, [{"role": "user", "content": long[:30] + " and now something else"}],
                 max_tokens=4)
    assert r["timings"]["cache_n"] == 0
    assert "forcing full prompt re-processing due to lack of cache data" in tiny_server.output()


def test_tiny_checkpoints_can_be_disabled(tiny_model_path):
    s = ServerProc(["-m", tiny_model_path("gemma3"), "-c", "2048", "-np", "1", "-ub", "16",
                    "-b", "64", "-t", "1", "-ctxcp", "0"]).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=300) as c:
            q = [{"role": "user", "content": user_text(1, 150)}]
            chat(c, q, max_tokens=280)
            r = chat(c, q, max_tokens=4)
            slot = c.get("/slots").json()[0]
    finally:
        assert s.stop() == 0
    assert r["timings"]["cache_n"] == 0 and slot["ctx_checkpoints"]["n"] == 0


@pytest.mark.realmodel
@pytest.mark.slow
def test_gemma_chat_reuses_cache_without_swa_full(gemma_path):
    s = ServerProc(["-m", gemma_path, "-c", "4096", "-np", "1", "-ub", "64", "-b", "256"]
                   ).wait_ready(300)
    try:
        with httpx.Client(base_url=s.url, timeout=900) as c:
            msgs = three_turns(c, user_len=150, n_answer=48, margin=8)
            assert n_prompt(c, msgs) > 768
            regenerate(c, msgs, n_answer=300, margin=4)
    finally:
        assert s.stop() == 0
    assert "restored context checkpoint" in s.output()
