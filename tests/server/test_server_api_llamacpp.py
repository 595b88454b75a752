"""pyllama's llama-server against llama.cpp 0c1e570's own llama-server, field by field, on the
requests of server_api_cases.py (embeddings, infill, Anthropic Messages, Responses, rerank; their
errors): tests/data/server-api-llamacpp.json was recorded from llama.cpp's server by
tests/make_server_fixture.py. Ids, timestamps and timings are not compared; embedding values
to 1e-5 of the vector's largest value (float and base64); everything else exactly."""
import base64
import json
import os
import sys

import numpy as np
import pytest

from server_api_cases import CONFIGS, QWEN, run_config

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                    "server-api-llamacpp.json")
IGNORED = {"id", "created", "created_at", "completed_at", "timings", "system_fingerprint",
           "call_id", "item_id",
           # llama.cpp names the model by its -m path, pyllama by the file name (/v1/models)
           "model",
           # the native completion's settings object belongs to /completion (its own tests);
           # llama.cpp 0c1e570 lists fields there (backend_sampling, preserved_tokens, ...)
           # pyllama does not have
           "generation_settings",
           # llama.cpp's host-memory prompt cache (--cache-ram) restores earlier prompts into
           # the slot; pyllama reuses only the slot's own cache
           "cached_tokens"}
pytestmark = pytest.mark.realmodel


def _vec(v):
    if isinstance(v, str):
        return np.frombuffer(base64.b64decode(v), "<f4")
    return np.asarray(v, np.float32)


def compare(got, want, where="$"):
    if isinstance(want, dict):
        assert isinstance(got, dict), where
        keys = (set(want) | set(got)) - IGNORED
        assert set(want) - IGNORED == set(got) - IGNORED, (where, sorted(keys))
        for k in sorted(keys):
            if k == "embedding":
                g, w = _vec(got[k]), _vec(want[k])
                assert g.shape == w.shape, where
                assert np.max(np.abs(g - w)) <= 1e-5 * max(np.max(np.abs(w)), 1e-30), where
            else:
                compare(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (where, got, want)
        for i, (g, w) in enumerate(zip(got, want)):
            compare(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), where
    else:
        assert got == want, where


@pytest.fixture(scope="module")
def recorded():
    if not os.path.exists(QWEN):
        pytest.skip("bundled Qwen model unavailable")
    with open(DATA, encoding="utf-8") as f:
        return json.load(f)


@pytest.mark.parametrize("config", list(CONFIGS))
def test_same_answers_as_llama_cpp(config, recorded):
    args, cases = CONFIGS[config]
    got = run_config([sys.executable, "-m", "pyllama", "server"],
                     args + ["--numerics", "llama.cpp"], cases,
                     env={"PYTHONPATH": os.path.dirname(os.path.dirname(
                         os.path.dirname(os.path.abspath(__file__))))})
    want = recorded[config]
    failures = []
    for (method, path, body), g, w in zip(cases, got, want):
        try:
            compare(g, w)
        except AssertionError as e:
            failures.append(f"{path} {json.dumps(body)[:80]}: {e}")
    assert not failures, "\n".join(failures)
