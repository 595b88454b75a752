"""Speculative decoding in llama-server: output equals the non-speculative server's token for token
(greedy and seeded sampling, 1 and 2 busy slots) on a tiny SWA model (n_swa 16, 256-cell SWA cache)
running past its SWA cache, with a draft model (the same model: everything accepted; another
model: rejections and rollbacks) and with n-gram lookup; statistics in timings, /metrics, /slots
and the log."""
import threading

import httpx
import pytest

from server_proc import ServerProc

TEXT = " ".join(f"item {i} is {'red' if i % 3 else 'blue'}," for i in range(60))
TEXTS = [TEXT[:700], TEXT[250:950]]
BASE = ["-c", "2048", "-np", "2", "-ub", "16", "-b", "64", "-t", "1", "--metrics"]
CASES = [dict(temperature=0), dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)]


def complete(url, prompt, id_slot=-1, **kw):
    body = {"prompt": prompt, "n_predict": 48, "id_slot": id_slot, "cache_prompt": False,
            "return_tokens": True, **kw}
    with httpx.Client(base_url=url, timeout=300) as c:
        r = c.post("/completion", json=body)
    assert r.status_code == 200, r.text
    return r.json()


def run_all(url) -> list[dict]:
    """Solo runs of every case, then both prompts at once in the two slots."""
    out = [complete(url, TEXT, **kw) for kw in CASES]
    both = [None, None]

    def go(i):
        both[i] = complete(url, TEXTS[i], id_slot=i, **CASES[i])
    threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out + both


@pytest.fixture(scope="module")
def models(tiny_model_path):
    """Target and another draft with flatter next-token distributions (embd_std 0.25), so that
    another model's drafts are really rejected, in greedy and in sampling."""
    return (tiny_model_path("gemma3", embd_std=0.25),
            tiny_model_path("gemma3", seed=1, embd_std=0.25))


@pytest.fixture(scope="module")
def reference(models):
    s = ServerProc(["-m", models[0], *BASE]).wait_ready()
    try:
        yield run_all(s.url)
    finally:
        assert s.stop() == 0


def spec_server(models, kind):
    # a draft model as large as the target never pays under the default cost-aware policy
    # (it would draft nothing): the draft-model cases use llama.cpp's fixed draft length
    extra = {"self": ["-md", models[0], "--spec-policy", "fixed"],
             "other": ["-md", models[1], "--spec-draft-n-max", "5", "--spec-policy", "fixed"],
             "ngram": ["--spec-type", "ngram-simple"],
             "ngram-fixed": ["--spec-type", "ngram-simple", "--spec-policy", "fixed"],
             # several types at once (llama.cpp's priority order), one drafter state per slot
             # and ngram-mod's pool shared by the slots
             "combined": ["--spec-type", "ngram-map-k4v,ngram-mod", "--spec-ngram-map-k4v-size-n",
                          "3", "--spec-ngram-map-k4v-size-m", "8", "--spec-ngram-map-k4v-min-hits",
                          "2", "--spec-ngram-mod-n-match", "4", "--spec-ngram-mod-n-min", "2"],
             # --spec-default: ngram-mod (its n_min 48 needs a long repeat; a shorter n_match here)
             "default": ["--spec-default", "--spec-ngram-mod-n-match", "3",
                         "--spec-ngram-mod-n-min", "4"]}[kind]
    return ServerProc(["-m", models[0], *BASE, *extra]).wait_ready()


@pytest.mark.parametrize("kind", ["self", "other", "ngram", "ngram-fixed", "combined", "default"])
def test_speculative_output_equals_plain(models, reference, kind):
    s = spec_server(models, kind)
    try:
        got = run_all(s.url)
        with httpx.Client(base_url=s.url, timeout=60) as c:
            metrics = c.get("/metrics").text
            slots = c.get("/slots").json()
    finally:
        assert s.stop() == 0
    for g, r in zip(got, reference):
        assert g["tokens"] == r["tokens"] and g["content"] == r["content"]
        assert len(g["tokens"]) == 48
    drafted = sum(g["timings"].get("draft_n", 0) for g in got)
    accepted = sum(g["timings"].get("draft_n_accepted", 0) for g in got)
    assert drafted > 0 and 0 < accepted <= drafted
    if kind == "self":   # the draft is the target: greedy drafts are always accepted
        assert got[0]["timings"]["draft_n_accepted"] == got[0]["timings"]["draft_n"]
    if kind == "other":
        assert accepted < drafted
    m = {ln.split()[0]: float(ln.split()[1]) for ln in metrics.splitlines()
         if ln.startswith("llamacpp:spec_decode")}
    assert m["llamacpp:spec_decode_num_draft_tokens_total"] == drafted
    assert m["llamacpp:spec_decode_num_accepted_tokens_total"] == accepted
    assert 0 < m["llamacpp:spec_decode_num_drafts_total"] <= drafted
    # the labeled counter of llama.cpp 0c1e570: accepted drafts per draft position, summing to
    # the accepted total and never growing with the position
    per_pos = [float(ln.split()[1]) for ln in metrics.splitlines() if ln.startswith(
        'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="')]
    assert "# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter" in metrics
    assert sum(per_pos) == accepted and per_pos == sorted(per_pos, reverse=True)
    assert all(sl["speculative"] for sl in slots)
    assert "draft acceptance = " in s.output()


def test_plain_server_reports_no_drafts(reference):
    assert all("draft_n" not in r["timings"] for r in reference)


def test_draft_budget_respects_n_predict_and_ubatch(models):
    """n_predict 1 leaves no room for a draft; --spec-draft-n-max above n_ubatch - 1 is capped
    (N + 1 <= n_ubatch) and still exact."""
    s = ServerProc(["-m", models[0], *BASE, "-md", models[0], "--spec-policy", "fixed",
                    "--spec-draft-n-max", "40"]).wait_ready()
    try:
        one = complete(s.url, TEXT, n_predict=1, temperature=0)
        many = complete(s.url, TEXT, n_predict=40, temperature=0)
    finally:
        assert s.stop() == 0
    assert "draft_n" not in one["timings"] and len(one["tokens"]) == 1
    t = many["timings"]
    assert t["draft_n"] == t["draft_n_accepted"] and t["draft_n"] <= 39


@pytest.mark.realmodel
@pytest.mark.slow
def test_incompatible_draft_runs_without_speculation(models, gemma_path):
    """A draft whose vocabulary does not match (Gemma's SPM vs the tiny BPE) is logged and the
    server runs without speculation, as llama.cpp's does."""
    s = ServerProc(["-m", models[0], *BASE, "-md", gemma_path]).wait_ready(300)
    try:
        r = complete(s.url, TEXT, n_predict=8, temperature=0)
        with httpx.Client(base_url=s.url, timeout=60) as c:
            slots = c.get("/slots").json()
    finally:
        assert s.stop() == 0
    assert "failed to initialize speculative decoding context" in s.output()
    assert "draft_n" not in r["timings"] and len(r["tokens"]) == 8
    assert not any(sl["speculative"] for sl in slots)


def test_flags_map_to_the_config(tiny_model_path):
    """-md alone enables draft-simple (as older llama.cpp; docs/architecture.md); --spec-type none turns it off;
    ngram-simple needs no draft model; -ctxcp/-cms reach the config."""
    import importlib

    from pyllama.__main__ import tools_package
    tools_package()
    srv = importlib.import_module("pyllama.tools.server")
    args = importlib.import_module("pyllama.tools._args")
    m = tiny_model_path("gemma3")

    def cfg(*argv):
        return srv.to_config(args.parse("server", ["-m", m, *argv]))
    c = cfg("-md", m, "--spec-draft-n-max", "6", "--draft-p-min", "0.5")
    assert c.spec_draft and not c.spec_ngram and c.spec_n_max == 6 and c.spec_p_min == 0.5
    assert not cfg("-md", m, "--spec-type", "none").spec_draft
    c = cfg("--spec-type", "ngram-simple")
    assert c.spec_ngram and not c.spec_draft
    c = cfg("--spec-default", "--spec-ngram-map-k4v-min-hits", "3")
    assert c.spec_ngram and c.spec_types == ["ngram-mod"] and c.spec_n_max_all == 64
    assert c.spec_settings["ngram_map_k4v_min_hits"] == 3
    assert not cfg().spec_draft and not cfg().spec_ngram
    assert cfg().spec_policy == "cost" and cfg("--spec-policy", "fixed").spec_policy == "fixed"
    c = cfg("--spec-type", "ngram-cache", "-lcs", "st.bin", "-lcd", "dy.bin")
    assert c.spec_ngram and c.spec_n_max_all == 8
    assert (c.spec_settings["lookup_cache_static"], c.spec_settings["lookup_cache_dynamic"]) == \
        ("st.bin", "dy.bin")
    c = cfg("-ctxcp", "3", "-cms", "100")
    assert (c.n_ctx_checkpoints, c.checkpoint_min_step) == (3, 100)
    assert (cfg().n_ctx_checkpoints, cfg().checkpoint_min_step) == (32, 8192)
