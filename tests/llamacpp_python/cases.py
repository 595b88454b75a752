"""The llama-cpp-python calls whose results pyllama's `Llama` must reproduce.

Shared by record_fixtures.py (run on llama-cpp-python itself, the oracle) and the tests (run on
pyllama.llama_cpp): each case gets `llm(**ctor_args)` (a Llama for those constructor arguments,
reset to an empty context; fresh=True for a new instance) and the module's classes, and returns
plain JSON data. Imports nothing from pyllama: the oracle venv does not have it.
"""
import os

CACHE = os.environ.get("LLAMA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pyllama")
MODELS = {
    "gemma-3-270m": os.path.join(CACHE, "gemma-3-270m-q4_k_m.gguf"),
    "qwen2.5-coder-0.5b": os.path.join(CACHE, "qwen2.5-coder-0.5b-instruct.gguf"),
}

PROMPT = "The capital of France is"
CHAT = [{"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": "Name three colors."}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
TEXTS = ["Hello, world!", "  leading spaces and\ttabs\n", "<start_of_turn>user\nhi<end_of_turn>",
         "<|im_start|>user\nhi<|im_end|>", "naïve café 日本語 🤖", ""]


def factory(Llama, path, **common):
    """llm(**kw): one Llama per constructor arguments, reset before each use; fresh=True: a new
    one (for cases that depend on the instance's seed history or own a draft model)."""
    made = {}

    def llm(fresh=False, **kw):
        if fresh:
            return Llama(model_path=path, verbose=False, **common, **kw)
        key = repr(sorted(kw.items()))
        if key not in made:
            made[key] = Llama(model_path=path, verbose=False, **common, **kw)
        m = made[key]
        m.reset()
        return m
    return llm


def scrub(x):
    """JSON-able, without the per-call id and timestamp; the model path as its file name."""
    if isinstance(x, dict):
        return {k: (os.path.basename(v) if k == "model" and isinstance(v, str) else scrub(v))
                for k, v in x.items() if k not in ("id", "created")}
    if isinstance(x, (list, tuple)):
        return [scrub(v) for v in x]
    if isinstance(x, bytes):
        return {"bytes": x.hex()}
    if hasattr(x, "item") and not isinstance(x, (str, int, float)):
        return x.item()
    if hasattr(x, "tolist"):
        return x.tolist()
    return x


def tokenize(llm, *_):
    m = llm()
    out = []
    for t in TEXTS:
        for add_bos in (True, False):
            for special in (False, True):
                ids = m.tokenize(t.encode("utf-8"), add_bos=add_bos, special=special)
                out.append({"text": t, "add_bos": add_bos, "special": special, "ids": ids,
                            "detok": m.detokenize(ids), "detok_special":
                                m.detokenize(ids, special=True)})
    return out


def greedy(llm, *_):
    return llm()(PROMPT, max_tokens=24, temperature=0)


def greedy_stop(llm, *_):
    return llm()("Count with me: 1, 2, 3, 4,", max_tokens=24, temperature=0, stop=[" 7", "\n\n"])


def token_prompt(llm, *_):
    m = llm()
    ids = m.tokenize(PROMPT.encode("utf-8"))
    return m.create_completion(ids, max_tokens=12, temperature=0)


def seeded(llm, *_):
    return llm()("Once upon a time", max_tokens=24, temperature=0.8, seed=42)


def seeded_params(llm, *_):
    return llm()("Once upon a time", max_tokens=24, temperature=1.1, top_k=20, top_p=0.9,
                 min_p=0.02, repeat_penalty=1.2, frequency_penalty=0.3, presence_penalty=0.2,
                 seed=7)


def seeded_mirostat(llm, *_):
    return llm()("Once upon a time", max_tokens=16, temperature=0.8, mirostat_mode=2, seed=3)


def constructor_seed(llm, *_):
    """No per-call seed: llama-cpp-python draws each call's seed from the previous one."""
    m = llm(seed=1234, fresh=True)
    return [m("Once upon a time", max_tokens=12) for _ in range(2)]


def logit_bias(llm, *_):
    m = llm()
    tok = m.tokenize(b" Paris", add_bos=False)[0]
    return m(PROMPT, max_tokens=8, temperature=0, logit_bias={tok: -50.0})


def stream(llm, *_):
    return list(llm()(PROMPT, max_tokens=16, temperature=0, stream=True))


def stream_stop(llm, *_):
    return list(llm()("Count with me: 1, 2, 3, 4,", max_tokens=24, temperature=0,
                      stop=[" 7"], stream=True))


def logprobs(llm, *_):
    return llm(logits_all=True)(PROMPT, max_tokens=6, temperature=0, logprobs=3)


def echo_logprobs(llm, *_):
    return llm(logits_all=True)(PROMPT, max_tokens=4, temperature=0, logprobs=2, echo=True)


def stream_logprobs(llm, *_):
    return list(llm(logits_all=True)(PROMPT, max_tokens=6, temperature=0, logprobs=2,
                                     stream=True))


def chat(llm, *_):
    return llm().create_chat_completion(CHAT, temperature=0, max_tokens=40)


def chat_stream(llm, *_):
    return list(llm().create_chat_completion(CHAT, temperature=0, max_tokens=12, stream=True))


def chat_seeded(llm, *_):
    return llm().create_chat_completion(CHAT, max_tokens=24, seed=5)


def chat_tools(llm, *_):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    return llm().create_chat_completion(msgs, tools=TOOLS, tool_choice="auto", temperature=0,
                                        max_tokens=40)


def state(llm, *_):
    """save_state, other work, load_state: the continuation is the one without the detour."""
    m = llm()
    first = m(PROMPT, max_tokens=6, temperature=0)
    saved = m.save_state()
    other = m("Unrelated: the sky is", max_tokens=6, temperature=0)
    m.load_state(saved)
    n_loaded = m.n_tokens
    cont = m(PROMPT + first["choices"][0]["text"], max_tokens=8, temperature=0)
    return {"first": first, "other": other, "n_tokens_loaded": n_loaded, "cont": cont}


def prefix_reuse(llm, *_):
    """The second prompt extends the first: llama-cpp-python decodes only the new tokens."""
    m = llm()
    a = m(PROMPT, max_tokens=6, temperature=0)
    b = m(PROMPT + " Paris. The capital of Germany is", max_tokens=6, temperature=0)
    return [a, b]


def ram_cache(llm, _Llama, _Lookup, LlamaRAMCache):
    m = llm(fresh=True)
    m.set_cache(LlamaRAMCache())
    a = m(PROMPT, max_tokens=6, temperature=0)
    b = m("Unrelated: the sky is", max_tokens=6, temperature=0)
    c = m(PROMPT, max_tokens=6, temperature=0)
    m.set_cache(None)
    return [a, b, c]


def prompt_lookup(llm, _Llama, LlamaPromptLookupDecoding, _cache):
    m = llm(draft_model=LlamaPromptLookupDecoding(num_pred_tokens=4), fresh=True)
    return m("a b c d e f a b c d e f a b c", max_tokens=16, temperature=0)


def chat_unlimited(llm, *_):
    """max_tokens=None (create_chat_completion's default): until the end of the turn."""
    return llm().create_chat_completion([{"role": "user", "content": "Say hi."}], temperature=0)


CASES = {f.__name__: f for f in (
    tokenize, greedy, greedy_stop, token_prompt, seeded, seeded_params, seeded_mirostat,
    constructor_seed, logit_bias, stream, stream_stop, logprobs, echo_logprobs, stream_logprobs,
    chat, chat_stream, chat_seeded, chat_tools, state, prefix_reuse, ram_cache, prompt_lookup,
    chat_unlimited)}


def _short(v):
    """A vector as its first 16 values and its norm (keeps the fixtures small)."""
    if v and isinstance(v[0], list):
        return [_short(r) for r in v]
    return {"head": [float(x) for x in v[:16]], "norm": float(sum(x * x for x in v)) ** 0.5,
            "n": len(v)}


def embed_pooled(llm, *_):
    m = llm(embedding=True, pooling_type=1)          # LLAMA_POOLING_TYPE_MEAN
    many = m.create_embedding(["Hello, world!", "The capital of France is", "hi"])
    for d in many["data"]:
        d["embedding"] = _short(d["embedding"])
    return {"one": _short(m.embed("Hello, world!")), "many": many,
            "normalized": _short(m.embed(["naïve café"], normalize=True)),
            "pooling": m.pooling_type()}


def embed_tokens(llm, *_):
    m = llm(embedding=True)                         # the model's pooling (none here)
    return {"rows": _short(m.embed(["Hello", "The capital"])), "pooling": m.pooling_type()}


CASES.update({f.__name__: f for f in (embed_pooled, embed_tokens)})


def _pkg(Llama):
    """The package Llama comes from (llama_cpp, or pyllama.llama_cpp)."""
    import importlib
    return importlib.import_module(Llama.__module__.rsplit(".", 1)[0])


SCHEMA = {"type": "object", "properties": {"name": {"type": "string"},
                                           "age": {"type": "integer"}},
          "required": ["name", "age"]}


def grammar_choice(llm, Llama, *_):
    g = _pkg(Llama).LlamaGrammar.from_string('root ::= "yes" | "no" | "maybe, " [a-z]+')
    return llm()("Is Paris in France? Answer:", grammar=g, temperature=0, max_tokens=8)


def grammar_json_seeded(llm, Llama, *_):
    pkg = _pkg(Llama)
    g = pkg.LlamaGrammar.from_string(pkg.llama_grammar.JSON_GBNF)
    return llm()("A JSON object describing a cat:", grammar=g, temperature=0.7, seed=1,
                 max_tokens=24)


def chat_json(llm, *_):
    return llm().create_chat_completion([{"role": "user", "content": "Describe a cat in JSON."}],
                                        response_format={"type": "json_object"}, temperature=0,
                                        max_tokens=24)


def grammar_schema(llm, Llama, *_):
    import json
    g = _pkg(Llama).LlamaGrammar.from_json_schema(json.dumps(SCHEMA))
    return llm()("A person as JSON:", grammar=g, temperature=0, max_tokens=24)


def chat_tool_forced(llm, *_):
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    return llm().create_chat_completion(
        msgs, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}},
        temperature=0, max_tokens=24)


CASES.update({f.__name__: f for f in (grammar_choice, grammar_json_seeded, chat_json,
                                      grammar_schema, chat_tool_forced)})


# what langchain_community.llms.LlamaCpp(model_path=..., temperature=0.7, max_tokens=24) passes
LANGCHAIN_CTOR = dict(rope_freq_scale=1.0, rope_freq_base=10000.0, lora_path=None, lora_base=None,
                      n_ctx=512, n_parts=-1, seed=-1, f16_kv=True, logits_all=False,
                      vocab_only=False, use_mlock=False, n_threads=None, n_batch=8,
                      use_mmap=True, last_n_tokens_size=64)
LANGCHAIN_CALL = dict(suffix=None, max_tokens=24, temperature=0.7, top_p=0.95, logprobs=None,
                      echo=False, repeat_penalty=1.1, top_k=40, stop=[])


def langchain_equiv(llm, *_):
    m = llm(fresh=True, **LANGCHAIN_CTOR)
    return [m(prompt=PROMPT, **LANGCHAIN_CALL), m(prompt="Once upon a time", **LANGCHAIN_CALL)]


CASES["langchain_equiv"] = langchain_equiv


def chat_formats(llm, Llama, *_):
    """The built-in chat formats' prompts and stop strings (no model needed)."""
    fmt = _pkg(Llama).llama_chat_format
    names = {"llama2": "llama-2", "llama3": "llama-3", "alpaca": "alpaca", "qwen": "qwen",
             "vicuna": "vicuna", "zephyr": "zephyr", "chatml": "chatml",
             "mistral_instruct": "mistral-instruct", "openchat": "openchat", "gemma": "gemma"}
    convo = CHAT + [{"role": "assistant", "content": "Red, green, blue."},
                    {"role": "user", "content": "Two more?"}]
    out = {}
    for fn, name in names.items():
        f = getattr(fmt, "format_" + fn, None) or getattr(fmt, "format")   # vicuna: `format`
        for i, msgs in enumerate((CHAT, convo, CHAT[1:])):
            r = f(messages=msgs)
            out[f"{name}/{i}"] = [r.prompt, r.stop, r.added_special]
    return out


CASES["chat_formats"] = chat_formats
