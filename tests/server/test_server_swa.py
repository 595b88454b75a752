"""Prompt-cache reuse on a sliding-window model with a small SWA cache: reusing a prefix never
changes the result (docs/architecture.md); a rollback past the window re-processes."""
import httpx
import pytest

from server_proc import ServerProc

TEXT = " ".join(f"item {i} is {'red' if i % 3 else 'blue'}," for i in range(60))


@pytest.fixture(scope="module")
def swa_server(tiny_model_path):
    # n_swa 16, -ub 16: the SWA cache keeps 256 cells, far fewer than the prompts below
    s = ServerProc(["-m", tiny_model_path("gemma3"), "-c", "2048", "-np", "2", "-ub", "16",
                    "-b", "64"]).wait_ready()
    yield s
    assert s.stop() == 0


def run(c, prompt, **kw):
    body = {"prompt": prompt, "n_predict": 8, "temperature": 0, "id_slot": 0, **kw}
    r = c.post("/completion", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_reuse_is_exact_and_deep_rollback_reprocesses(swa_server):
    with httpx.Client(base_url=swa_server.url, timeout=120) as c:
        n = len(c.post("/tokenize", json={"content": TEXT}).json()["tokens"])
        assert n > 300
        fresh = run(c, TEXT, cache_prompt=False)
        again = run(c, TEXT)
        assert again["timings"]["cache_n"] == n - 1 and again["content"] == fresh["content"]
        longer = TEXT + fresh["content"] + " and more"
        cont = run(c, longer)
        assert cont["timings"]["cache_n"] > n - 1
        assert cont["content"] == run(c, longer, cache_prompt=False)["content"]
        early = TEXT[:40] + " something else entirely"
        deep = run(c, TEXT)  # fill the cache again, then diverge near the start
        deep = run(c, early)
        assert deep["timings"]["cache_n"] == 0  # the window of position ~10 is gone
        assert deep["content"] == run(c, early, cache_prompt=False)["content"]


def test_slots_sharing_the_small_swa_cache_stay_exact(swa_server):
    """Two slots generate at once in one unified cache whose SWA part is far smaller than
    their contexts; each result equals the solo one."""
    import threading
    texts = [TEXT[:600], TEXT[300:900]]
    with httpx.Client(base_url=swa_server.url, timeout=120) as c:
        ref = [run(c, t, n_predict=40, cache_prompt=False, id_slot=-1)["content"] for t in texts]
    out = [None, None]

    def go(i):
        with httpx.Client(base_url=swa_server.url, timeout=120) as c:
            out[i] = run(c, texts[i], n_predict=40, cache_prompt=False, id_slot=i)["content"]
    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == ref
