"""pyllama's `Llama` against llama-cpp-python 0.3.36 itself: every call of cases.py returns the
same text, tokens, finish_reason, usage and structure as the fixtures record_fixtures.py made
with llama-cpp-python (tests/data/llamacpp_python/<model>.json); logprobs within 1e-4. Ids and
timestamps are not compared. The arithmetic is llama.cpp's (Llama's default numerics)."""
import json
import math
import os

import pytest

import pyllama.llama_cpp as llama_cpp
from cases import CASES, factory, scrub

DATA = os.path.join(os.path.dirname(__file__), "..", "data", "llamacpp_python")
ALIASES = ("gemma-3-270m", "qwen2.5-coder-0.5b")
# cases whose oracle run costs more than the default suite's share: run with -m slow
SLOW = {("qwen2.5-coder-0.5b", n) for n in (
    "chat_tools", "seeded_params", "constructor_seed", "ram_cache", "state", "token_prompt",
    "seeded_mirostat", "stream_stop", "chat_stream", "greedy_stop", "logit_bias",
    "grammar_json_seeded", "chat_json")} | {("gemma-3-270m", "grammar_json_seeded")}


def _fixture(alias):
    with open(os.path.join(DATA, f"{alias}.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def llms():
    from pyllama.models import resolve
    made = {}

    def get(alias):
        if alias not in made:
            try:
                path = resolve(alias, progress=False)
            except Exception as e:          # the bundled model packages are not installed
                pytest.skip(f"bundled model {alias} unavailable: {e}")
            made[alias] = factory(llama_cpp.Llama, path)
        return made[alias]
    return get


def assert_same(got, want, where="", tol=1e-4):
    if isinstance(want, float) or isinstance(got, float):
        assert want is not None and got is not None, f"{where}: {got!r} != {want!r}"
        assert math.isclose(got, want, rel_tol=0, abs_tol=tol) or got == want, \
            f"{where}: {got!r} != {want!r}"
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), \
            f"{where}: keys {list(got) if isinstance(got, dict) else got!r} != {list(want)}"
        for k in want:
            assert_same(got[k], want[k], f"{where}.{k}", tol)
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), \
            f"{where}: {got!r} != {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{where}[{i}]", tol)
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


# llama-cpp-python 0.3.36 converts JSON schemas with an older port of llama.cpp's converter
# (one optional space between tokens and after values, other escapes); pyllama uses llama.cpp's
# current one: the same JSON value, whitespace may differ (docs/llama_cpp_python.md)
SAME_JSON = {"grammar_schema"}
PARAMS = [pytest.param(a, n, marks=[pytest.mark.realmodel] +
                       ([pytest.mark.slow] if (a, n) in SLOW else []))
          for a in ALIASES for n in CASES]


@pytest.mark.parametrize("alias,name", PARAMS)
def test_case_matches_llama_cpp_python(llms, alias, name):
    want = _fixture(alias)["cases"][name]
    llm = llms(alias)
    got = scrub(CASES[name](llm, llama_cpp.Llama, llama_cpp.LlamaPromptLookupDecoding,
                            llama_cpp.LlamaRAMCache))
    if name in SAME_JSON:
        g, w = got["choices"][0], want["choices"][0]
        assert json.loads(g["text"]) == json.loads(w["text"])
        assert g["finish_reason"] == w["finish_reason"]
        return
    assert_same(json.loads(json.dumps(got)), want, name)


@pytest.mark.realmodel
@pytest.mark.parametrize("alias", ALIASES)
def test_model_info_matches(llms, alias):
    want = _fixture(alias)["info"]
    m = llms(alias)()
    assert (m.n_vocab(), m.n_ctx(), m.token_bos(), m.token_eos(), m.token_nl()) == \
        (want["n_vocab"], want["n_ctx"], want["token_bos"], want["token_eos"], want["token_nl"])
    assert m.chat_format == want["chat_format"]
    assert sorted(m.metadata) == want["metadata_keys"]
    assert {k: m.metadata[k] for k in want["metadata"]} == want["metadata"]


@pytest.mark.realmodel
def test_state_round_trip_continues_identically(llms):
    """load_state after other work, then generation: the same tokens as straight on."""
    m = llms("gemma-3-270m")()
    m("The capital of France is", max_tokens=4, temperature=0)
    saved = m.save_state()
    straight = m.create_completion(list(m._input_ids), max_tokens=8, temperature=0)
    m("Something else entirely", max_tokens=4, temperature=0)
    m.load_state(saved)
    again = m.create_completion(list(saved.input_ids[:saved.n_tokens]), max_tokens=8,
                                temperature=0)
    assert again["choices"][0]["text"] == straight["choices"][0]["text"]
