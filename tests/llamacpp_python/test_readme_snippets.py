"""llama-cpp-python's README examples (high-level API, chat, JSON mode, JSON schema mode,
speculative decoding, embeddings, context window), unchanged except for the model path, run on
pyllama: `llama_cpp` is aliased to pyllama.llama_cpp (the README's one-line change), and each
snippet must run and give the documented shapes."""
import json
import sys

import pytest

import pyllama.llama_cpp

pytestmark = pytest.mark.realmodel

BASIC = '''
from llama_cpp import Llama

llm = Llama(
      model_path="./models/7B/llama-model.gguf",
      # n_gpu_layers=-1, # Uncomment to use GPU acceleration
      # seed=1337, # Uncomment to set a specific seed
      # n_ctx=2048, # Uncomment to increase the context window
)
output = llm(
      "Q: Name the planets in the solar system? A: ", # Prompt
      max_tokens=32, # Generate up to 32 tokens, set to None to generate up to the end of the context window
      stop=["Q:", "\\n"], # Stop generating just before the model would generate a new question
      echo=True # Echo the prompt back in the output
) # Generate a completion, can also call create_completion
print(output)
'''

CHAT = '''
from llama_cpp import Llama
llm = Llama(
      model_path="path/to/llama-2/llama-model.gguf",
      chat_format="llama-2"
)
result = llm.create_chat_completion(
      messages = [
          {"role": "system", "content": "You are an assistant who perfectly describes images."},
          {
              "role": "user",
              "content": "Describe this image in detail please."
          }
      ]
)
'''

JSON_MODE = '''
from llama_cpp import Llama
llm = Llama(model_path="path/to/model.gguf", chat_format="chatml")
result = llm.create_chat_completion(
    messages=[
        {
            "role": "system",
            "content": "You are a helpful assistant that outputs in JSON.",
        },
        {"role": "user", "content": "Who won the world series in 2020"},
    ],
    response_format={
        "type": "json_object",
    },
    temperature=0.7,
)
'''

JSON_SCHEMA = '''
from llama_cpp import Llama
llm = Llama(model_path="path/to/model.gguf", chat_format="chatml")
result = llm.create_chat_completion(
    messages=[
        {
            "role": "system",
            "content": "You are a helpful assistant that outputs in JSON.",
        },
        {"role": "user", "content": "Who won the world series in 2020"},
    ],
    response_format={
        "type": "json_object",
        "schema": {
            "type": "object",
            "properties": {"team_name": {"type": "string"}},
            "required": ["team_name"],
        },
    },
    temperature=0.7,
)
'''

SPECULATIVE = '''
from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

llama = Llama(
    model_path="path/to/model.gguf",
    draft_model=LlamaPromptLookupDecoding(num_pred_tokens=10) # num_pred_tokens is the number of tokens to predict 10 is the default and generally good for gpu, 2 performs better for cpu-only machines.
)
result = llama("a b c d a b c d a b", max_tokens=8, temperature=0)
'''

EMBEDDINGS = '''
import llama_cpp

llm = llama_cpp.Llama(model_path="path/to/model.gguf", embedding=True)

embeddings = llm.create_embedding("Hello, world!")

# or create multiple embeddings at once

embeddings = llm.create_embedding(["Hello, world!", "Goodbye, world!"])
'''

CONTEXT = '''
from llama_cpp import Llama
llm = Llama(model_path="./models/7B/llama-model.gguf", n_ctx=2048)
'''


@pytest.fixture
def run(gemma_path, capsys):
    """exec a README snippet with `llama_cpp` = pyllama.llama_cpp and the bundled Gemma as every
    model path; returns its globals."""
    saved = {k: v for k, v in sys.modules.items() if k == "llama_cpp" or k.startswith("llama_cpp.")}
    sys.modules["llama_cpp"] = pyllama.llama_cpp

    def go(src: str, **kw) -> dict:
        for p in ("./models/7B/llama-model.gguf", "path/to/llama-2/llama-model.gguf",
                  "path/to/model.gguf"):
            src = src.replace(f'"{p}"', f'"{gemma_path}", verbose=False')
        g: dict = {}
        exec(compile(src, "<README>", "exec"), g)
        return g
    yield go
    for k in [k for k in sys.modules if k == "llama_cpp" or k.startswith("llama_cpp.")]:
        del sys.modules[k]
    sys.modules.update(saved)


def test_basic_completion(run, capsys):
    g = run(BASIC)
    out = g["output"]
    assert out["object"] == "text_completion" and set(out) == {
        "id", "object", "created", "model", "choices", "usage"}
    text = out["choices"][0]["text"]
    assert text.startswith("Q: Name the planets in the solar system? A: ")     # echo
    assert "\n" not in text[len("Q: Name the planets in the solar system? A: "):]  # stop
    assert out["choices"][0]["finish_reason"] in ("stop", "length")
    assert "text_completion" in capsys.readouterr().out


@pytest.mark.slow      # max_tokens=None: Gemma writes until its 512-token context is full
def test_chat_completion(run):
    r = run(CHAT)["result"]
    assert r["object"] == "chat.completion"
    assert r["choices"][0]["message"]["role"] == "assistant"
    assert isinstance(r["choices"][0]["message"]["content"], str)


@pytest.mark.slow      # as above, the JSON grammar allows a never-ending object
def test_json_mode(run):
    r = run(JSON_MODE)["result"]
    assert r["choices"][0]["message"]["content"].lstrip()[:1] in ("{", "")


def test_json_schema_mode(run):
    r = run(JSON_SCHEMA)["result"]
    text = r["choices"][0]["message"]["content"]
    if r["choices"][0]["finish_reason"] == "stop":
        assert set(json.loads(text)) == {"team_name"}
    else:
        assert text.startswith('{"team_name"') or text.startswith("{")


def test_speculative_decoding(run, gemma_path):
    r = run(SPECULATIVE)["result"]
    plain = pyllama.llama_cpp.Llama(gemma_path, verbose=False)("a b c d a b c d a b",
                                                                max_tokens=8, temperature=0)
    assert r["choices"][0]["text"] == plain["choices"][0]["text"]


def test_embeddings(run, gemma_path):
    e = run(EMBEDDINGS)["embeddings"]
    assert e["object"] == "list" and [d["index"] for d in e["data"]] == [0, 1]
    n_embd = pyllama.llama_cpp.Llama(gemma_path, vocab_only=True, verbose=False).n_embd()
    # a generation model pools nothing: one vector per token
    assert all(len(row) == n_embd for d in e["data"] for row in d["embedding"])


def test_context_window(run):
    assert run(CONTEXT)["llm"].n_ctx() == 2048
