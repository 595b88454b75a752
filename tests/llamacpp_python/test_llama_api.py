"""pyllama.llama_cpp beyond the fixtures: local from_pretrained, the disk cache, logits
processors and stopping criteria, pickling, pyllama's numerics, and the one-line refusals."""
import os
import pickle

import numpy as np
import pytest

import pyllama
import pyllama.llama_cpp as llama_cpp
from pyllama.errors import GrammarError, PyllamaError

pytestmark = pytest.mark.realmodel
PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def llm(gemma_path):
    return llama_cpp.Llama(gemma_path, verbose=False)


def text(out):
    return out["choices"][0]["text"]


def test_top_level_names():
    assert pyllama.Llama is llama_cpp.Llama
    assert pyllama.LlamaGrammar is llama_cpp.LlamaGrammar
    assert pyllama.LlamaPromptLookupDecoding is llama_cpp.llama_speculative.LlamaPromptLookupDecoding


def test_from_pretrained_local_folder(gemma_path, tmp_path):
    repo = tmp_path / "org--model"
    (repo / "sub").mkdir(parents=True)
    os.symlink(gemma_path, repo / "sub" / "model-Q4_K_M.gguf")
    (repo / "README.md").write_text("x")
    m = llama_cpp.Llama.from_pretrained(str(repo), "*Q4_K_M.gguf", verbose=False)
    assert m.model_path.endswith("model-Q4_K_M.gguf") and m.n_vocab() == 262144
    hub = tmp_path / "hub" / "models--org--name" / "snapshots" / "abc"
    hub.mkdir(parents=True)
    os.symlink(gemma_path, hub / "m.gguf")
    m = llama_cpp.Llama.from_pretrained("org/name", "*.gguf", cache_dir=str(tmp_path / "hub"),
                                        vocab_only=True, verbose=False)
    assert m.model_path.endswith("m.gguf")
    with pytest.raises(ValueError, match="No file found"):
        llama_cpp.Llama.from_pretrained(str(repo), "*.bin", verbose=False)
    with pytest.raises(PyllamaError, match="does not download"):
        llama_cpp.Llama.from_pretrained("nobody/nothing-GGUF", "*.gguf",
                                        cache_dir=str(tmp_path / "empty"))


def test_disk_cache_restores_state(gemma_path, tmp_path):
    cache = llama_cpp.LlamaDiskCache(cache_dir=str(tmp_path / "c"))
    m = llama_cpp.Llama(gemma_path, verbose=False)
    first = text(m(PROMPT, max_tokens=6, temperature=0))
    m.set_cache(cache)
    m(PROMPT, max_tokens=6, temperature=0)
    key = m.tokenize(PROMPT.encode())
    assert key in cache and cache.cache_size > 0
    m("Unrelated text here", max_tokens=4, temperature=0)
    again = text(m(PROMPT, max_tokens=6, temperature=0))   # loads the cached state (a hit pops it)
    assert again == first
    m.set_cache(None)


def test_ram_cache_capacity():
    cache = llama_cpp.LlamaRAMCache(capacity_bytes=10)
    state = llama_cpp.LlamaState(np.zeros(4, np.intc), np.zeros((0, 4), np.single), 0,
                                 b"123456", 6, 1)
    cache[(1, 2, 3)] = state
    assert cache[(1, 2, 9)] is state and (1, 5) in cache and (7,) not in cache
    cache[(4, 5)] = state                       # 12 bytes > 10: the oldest entry goes
    assert (1, 2) not in cache and cache[(4,)] is state


def test_logits_processor_and_stopping_criteria(llm):
    banned = llm.tokenize(b" the", add_bos=False)[0]

    def ban(input_ids, scores):
        scores[banned] = -np.inf
        return scores
    out = llm(PROMPT, max_tokens=6, temperature=0,
              logits_processor=llama_cpp.LogitsProcessorList([ban]))
    assert banned not in llm.tokenize(text(out).encode(), add_bos=False)
    stops = llama_cpp.StoppingCriteriaList([lambda ids, logits: len(ids) >= 9])
    out = llm(PROMPT, max_tokens=20, temperature=0, stopping_criteria=stops)
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] < 20


def test_generate_eval_sample(llm):
    toks = llm.tokenize(PROMPT.encode())
    got = []
    for t in llm.generate(toks, temp=0):
        got.append(t)
        if len(got) == 4:
            break
    llm.reset()
    llm.eval(toks)
    first = llm.sample(temp=0)
    assert first == got[0]
    assert llm.n_tokens == len(toks)


def test_pickle_round_trip(gemma_path):
    m = llama_cpp.Llama(gemma_path, n_ctx=256, seed=11, verbose=False)
    m2 = pickle.loads(pickle.dumps(m))
    assert (m2.n_ctx(), m2._seed, m2.model_path) == (256, 11, gemma_path)


def test_pyllama_numerics_and_kv_types(gemma_path):
    inv = llama_cpp.Llama(gemma_path, numerics="invariant", verbose=False)
    assert text(inv(PROMPT, max_tokens=4, temperature=0))
    q8 = llama_cpp.Llama(gemma_path, type_k=llama_cpp.GGML_TYPE_Q8_0,
                         type_v=llama_cpp.GGML_TYPE_Q8_0, flash_attn=True, verbose=False)
    assert text(q8(PROMPT, max_tokens=4, temperature=0))


def test_refusals_are_one_clear_error(gemma_path, llm):
    with pytest.raises(RuntimeError, match="Failed to initialize LoRA adapter from lora path"):
        llama_cpp.Llama(gemma_path, lora_path="adapter.gguf", verbose=False)
    with pytest.raises(PyllamaError, match="kv_overrides"):
        llama_cpp.Llama(gemma_path, kv_overrides={"a": 1}, verbose=False)
    with pytest.raises(ValueError, match="does not exist"):
        llama_cpp.Llama("/nonexistent/model.gguf", verbose=False)
    with pytest.raises(RuntimeError, match="embedding=True"):
        llm.embed("hi")
    with pytest.raises(ValueError, match="logits_all"):
        llm(PROMPT, logprobs=2)
    fmt = llama_cpp.llama_chat_format
    with pytest.raises(fmt.LlamaChatCompletionHandlerNotFoundException, match="not provided"):
        llama_cpp.Llama(gemma_path, chat_format="functionary-v2", verbose=False) \
            .create_chat_completion([{"role": "user", "content": "hi"}])
    with pytest.raises(GrammarError):
        llama_cpp.LlamaGrammar.from_string("root ::= undefined-rule")


def test_vocab_only(gemma_path):
    m = llama_cpp.Llama(gemma_path, vocab_only=True, verbose=False)
    ids = m.tokenize(b"Hello")
    assert m.detokenize(ids) == b"Hello"
    with pytest.raises(RuntimeError, match="vocab_only"):
        m.eval(ids)


def test_named_chat_formats(gemma_path):
    m = llama_cpp.Llama(gemma_path, chat_format="gemma", verbose=False)
    r = m.create_chat_completion([{"role": "user", "content": "Say hi."}], max_tokens=8,
                                 temperature=0)
    assert r["choices"][0]["message"]["role"] == "assistant"
    f = llama_cpp.llama_chat_format.format_chatml(
        messages=[{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert f.prompt == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n" \
                       "<|im_start|>assistant\n"


def test_pyllama_drafters_as_draft_model(gemma_path):
    """pyllama's n-gram and draft-model drafters through draft_model=: with the invariant
    numerics the verified output is plain decoding's, token for token."""
    from pyllama.context import Context
    from pyllama.llama_cpp.llama_speculative import PyllamaDraft
    from pyllama.speculative import DraftModelDrafter, NgramDrafter
    prompt = "a b c d e f a b c d e f a b c"
    plain = llama_cpp.Llama(gemma_path, numerics="invariant", verbose=False)
    want = text(plain(prompt, max_tokens=12, temperature=0))
    ngram = llama_cpp.Llama(gemma_path, numerics="invariant", verbose=False,
                            draft_model=PyllamaDraft(NgramDrafter(size_n=3, min_n=1), 4))
    assert text(ngram(prompt, max_tokens=12, temperature=0)) == want
    dctx = Context(plain.model, n_ctx=512)
    drafted = llama_cpp.Llama(gemma_path, numerics="invariant", verbose=False,
                              draft_model=PyllamaDraft(DraftModelDrafter(dctx), 3))
    assert text(drafted(prompt, max_tokens=12, temperature=0)) == want
