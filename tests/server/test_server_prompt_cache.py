"""The host-memory prompt cache (`--cache-ram`, `--cache-idle-slots`,
pyllama/server/prompt_cache.py): the sequence of llama.cpp's own
tools/server/tests/unit/test_kv_keep_only_active.py (idle slot saved and cleared when another
slot starts, its prompt restored from RAM by the next matching request), and the restored state
gives the same greedy text as processing the prompt again."""
import httpx
import pytest

from pyllama.server.prompt_cache import PromptCache
from server_proc import ServerProc

LONG = ("Once upon a time in a land far away, there lived a brave knight who traveled across "
        "mountains and rivers to find the legendary golden sword hidden deep within the "
        "enchanted forest of whispers.")


def _complete(url, prompt, **kw):
    r = httpx.post(url + "/completion", json={"prompt": prompt, "n_predict": 4,
                                              "temperature": 0, "cache_prompt": True, **kw},
                   timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def servers(tiny_llama):
    common = ["-m", tiny_llama, "-c", "1024", "-np", "2", "--kv-unified", "-t", "1", "-v"]
    on = ServerProc(common + ["--cache-ram", "100"]).wait_ready()
    off = ServerProc(common + ["--cache-ram", "0"]).wait_ready()
    yield on, off
    assert on.stop() == 0
    assert off.stop() == 0


def test_idle_slot_saved_cleared_and_restored(servers):
    on, off = servers
    assert "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" in on.output()
    assert "__TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__" not in off.output()
    assert "--cache-idle-slots requires --cache-ram, disabling" in off.output()
    first = _complete(on.url, LONG, id_slot=0)
    n0 = len(on.output())
    _complete(on.url, "The quick brown fox", id_slot=1)
    assert "__TEST_TAG_CACHE_IDLE_SLOT__" in on.output()[n0:]
    n1 = len(on.output())
    again = _complete(on.url, LONG)
    log = on.output()[n1:]
    assert "updating prompt cache" in log
    assert again["timings"]["cache_n"] > 0
    assert again["timings"]["prompt_n"] < first["timings"]["prompt_n"]
    assert again["content"] == first["content"]
    # the same requests without the cache: slot 0 keeps its KV (nothing is cleared), same text
    ref = _complete(off.url, LONG, id_slot=0)
    n2 = len(off.output())
    _complete(off.url, "The quick brown fox", id_slot=1)
    assert "__TEST_TAG_CACHE_IDLE_SLOT__" not in off.output()[n2:]
    ref2 = _complete(off.url, LONG)
    assert ref["content"] == ref2["content"] == first["content"]


def test_cache_rules():
    """server_prompt_cache's alloc/load: contained prompts are skipped or replaced, f_keep < 0.25
    entries never win, the oldest goes first past the size limit."""
    c = PromptCache(1, 0)
    assert c.save([1, 2, 3], [], lambda: (b"x" * 10, b""))
    assert not c.save([1, 2], [], lambda: (b"y", b""))           # already contained
    assert c.save([1, 2, 3, 4], [], lambda: (b"z" * 10, b""))    # replaces [1, 2, 3]
    assert [e.tokens for e in c.states] == [[1, 2, 3, 4]]
    got = []
    ok, e = c.load([], [9, 9, 9], lambda d: got.append(d) or True)
    assert ok and e is None and not got                          # no common prefix
    ok, e = c.load([], [1, 2, 3, 4, 5], lambda d: got.append(d) or True)
    assert ok and e.tokens == [1, 2, 3, 4] and got == [(b"z" * 10, b"")] and not c.states
    big = PromptCache(1, 0)
    assert not big.save([1], [], lambda: (b"\0" * (2 << 20), b""))   # over the limit: skipped
    assert big.save([1], [], lambda: (b"\0" * (600 << 10), b""))
    assert big.save([2], [], lambda: (b"\0" * (600 << 10), b""))     # evicts [1]
    assert [e.tokens for e in big.states] == [[2]]
