"""LangChain on pyllama: its own llama.cpp integration (langchain_community.llms.LlamaCpp, which
imports llama_cpp) with the documented one-line alias, and ChatOpenAI pointed at llama-server.
Needs `pip install "pyllama[integrations]"` (langchain-community, langchain-openai); skipped
without them. LlamaCpp's output is llama-cpp-python's for the same arguments: the fixture
case langchain_equiv (cases.py) recorded llama-cpp-python with exactly what LlamaCpp passes."""
import json
import os
import sys
import warnings

import pytest

import pyllama.llama_cpp
from cases import LANGCHAIN_CALL, PROMPT

pytestmark = pytest.mark.realmodel
DATA = os.path.join(os.path.dirname(__file__), "..", "data", "llamacpp_python")


@pytest.fixture
def llama_cpp_alias():
    """sys.modules["llama_cpp"] = pyllama.llama_cpp for the test, as the README says."""
    saved = {k: v for k, v in sys.modules.items() if k == "llama_cpp" or k.startswith("llama_cpp.")}
    sys.modules["llama_cpp"] = pyllama.llama_cpp
    yield
    for k in [k for k in sys.modules if k == "llama_cpp" or k.startswith("llama_cpp.")]:
        del sys.modules[k]
    sys.modules.update(saved)


@pytest.mark.parametrize("alias", ["gemma-3-270m", "qwen2.5-coder-0.5b"])
def test_langchain_llamacpp_runs_on_pyllama(llama_cpp_alias, alias, request):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        llms = pytest.importorskip("langchain_community.llms",
                                   reason="langchain-community not installed")
    path = request.getfixturevalue("gemma_path" if alias.startswith("gemma") else "qwen_path")
    llm = llms.LlamaCpp(model_path=path, temperature=LANGCHAIN_CALL["temperature"],
                        max_tokens=LANGCHAIN_CALL["max_tokens"], verbose=False)
    assert isinstance(llm.client, pyllama.llama_cpp.Llama)
    with open(os.path.join(DATA, f"{alias}.json")) as f:
        want = json.load(f)["cases"]["langchain_equiv"]
    assert llm.invoke(PROMPT) == want[0]["choices"][0]["text"]
    assert "".join(llm.stream("Once upon a time")) == want[1]["choices"][0]["text"]
    assert llm.get_num_tokens(PROMPT) == want[0]["usage"]["prompt_tokens"]


def test_import_llama_cpp_submodules_after_alias(llama_cpp_alias):
    import llama_cpp
    import llama_cpp.llama_chat_format as fmt
    from llama_cpp.llama import Llama
    from llama_cpp.llama_speculative import LlamaPromptLookupDecoding
    assert llama_cpp is pyllama.llama_cpp
    assert fmt is pyllama.llama_cpp.llama_chat_format
    assert Llama is pyllama.llama_cpp.Llama
    assert LlamaPromptLookupDecoding is pyllama.llama_cpp.LlamaPromptLookupDecoding


def test_chat_openai_against_llama_server(gemma_path):
    openai_chat = pytest.importorskip("langchain_openai", reason="langchain-openai not installed")
    import httpx
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
    from server_proc import ServerProc
    srv = ServerProc(["-m", gemma_path, "-c", "1024", "-np", "1"]).wait_ready()
    try:
        chat = openai_chat.ChatOpenAI(base_url=srv.url + "/v1", api_key="none",
                                      model="gemma-3-270m", temperature=0, max_tokens=16)
        got = chat.invoke("Name three colors.")
        direct = httpx.post(srv.url + "/v1/chat/completions", timeout=60, json={
            "model": "gemma-3-270m", "temperature": 0, "max_tokens": 16,
            "messages": [{"role": "user", "content": "Name three colors."}]}).json()
        assert got.content == direct["choices"][0]["message"]["content"]
        assert got.content
        streamed = "".join(c.content for c in chat.stream("Name three colors."))
        assert streamed == got.content
    finally:
        srv.stop()
