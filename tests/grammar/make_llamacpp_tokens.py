"""Record llama.cpp's tokens under a grammar: tests/data/grammar/llamacpp-tokens.json.

Run with the oracle venv (llama-cpp-python 0.3.36, llama.cpp 0c1e570's libllama):
    /work/oracle/bin/python tests/grammar/make_llamacpp_tokens.py

llama-completion's loop is rebuilt on the low-level API, with common_sampler_sample's order
(common/sampling.cpp): the chain (common_sampler_init's default samplers: penalties, dry,
top-n-sigma, top-k, typical, top-p, min-p, xtc, temperature, then dist(seed)) is applied to
every token's logit; the selected token is checked against the grammar sampler alone; only when
it is rejected are the logits reset, the grammar applied to all of them and the chain applied
again; then the grammar and the chain accept the token. (llama-cpp-python's own LlamaGrammar
puts the grammar inside its chain instead, which can differ when sampling.) The prompt is
decoded in one batch, then one token per decode, as llama-completion does.
"""
import ctypes
import json
import os
import sys

import llama_cpp as L
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "grammar", "llamacpp-tokens.json")
CASES_JSON = os.path.join(HERE, "..", "data", "grammar", "llamacpp-cases.json")
MODELS = {"gemma-3-270m": "gemma-3-270m-q4_k_m.gguf",
          "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct.gguf"}
N_PREDICT = 24

# the 10-property schema of the benchmarks (bench/grammar_side_by_side.py)
SCHEMA_10 = json.load(open(os.path.join(HERE, "..", "data", "grammar", "schema10.json")))


def grammars():
    """name -> (GBNF text, prompt)."""
    sys.path.insert(0, os.path.join(HERE, "..", ".."))
    from pyllama.grammar import json_schema_to_gbnf   # the same text llama.cpp converts to
    g = json.load(open(CASES_JSON, encoding="utf-8"))["grammars"]
    return {
        "json": (g["json.gbnf"], "Describe a book as a JSON object:"),
        "schema10": (json_schema_to_gbnf(SCHEMA_10), "A user record in JSON:"),
        "chess": (g["chess.gbnf"], "The moves of a famous chess game:"),
    }


MODES = {"greedy": dict(temp=0.0, seed=42), "seeded": dict(temp=0.8, seed=1234)}


def chain(vocab, temp, seed):
    c = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    n_vocab = L.llama_vocab_n_tokens(vocab)
    add = lambda s: L.llama_sampler_chain_add(c, s)
    add(L.llama_sampler_init_penalties(n_vocab, 64, 1.0, 0.0, 0.0))
    add(L.llama_sampler_init_top_n_sigma(-1.0))
    add(L.llama_sampler_init_top_k(40))
    add(L.llama_sampler_init_typical(1.0, 0))
    add(L.llama_sampler_init_top_p(0.95, 0))
    add(L.llama_sampler_init_min_p(0.05, 0))
    add(L.llama_sampler_init_xtc(0.0, 0.1, 0, seed))
    add(L.llama_sampler_init_temp_ext(temp, 0.0, 1.0))
    add(L.llama_sampler_init_dist(seed))
    del n_vocab
    return c


def run(model, ctx, vocab, text, gbnf, temp, seed):
    n_vocab = L.llama_vocab_n_tokens(vocab)
    buf = (L.llama_token * 512)()
    n = L.llama_tokenize(vocab, text.encode(), len(text.encode()), buf, 512, True, False)
    prompt = list(buf[:n])
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    arr = (L.llama_token * len(prompt))(*prompt)
    assert L.llama_decode(ctx, L.llama_batch_get_one(arr, len(prompt))) == 0
    smpl = chain(vocab, temp, seed)
    grmr = L.llama_sampler_init_grammar(vocab, gbnf.encode(), b"root")
    assert grmr, "grammar failed to parse"
    data = (L.llama_token_data * n_vocab)()
    view = np.ctypeslib.as_array(data)  # structured: id, logit, p
    ids = np.arange(n_vocab, dtype=np.int32)
    out = []

    def fill():
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        view["id"], view["logit"], view["p"] = ids, logits, 0.0
        return L.llama_token_data_array(data, n_vocab, -1, False)

    n_resampled = 0
    for _ in range(N_PREDICT):
        cur = fill()
        L.llama_sampler_apply(smpl, ctypes.byref(cur))
        tok = cur.data[cur.selected].id
        one = (L.llama_token_data * 1)()
        one[0].id, one[0].logit, one[0].p = tok, 1.0, 0.0
        single = L.llama_token_data_array(one, 1, -1, False)
        L.llama_sampler_apply(grmr, ctypes.byref(single))
        if one[0].logit == float("-inf"):
            n_resampled += 1
            cur = fill()
            L.llama_sampler_apply(grmr, ctypes.byref(cur))
            L.llama_sampler_apply(smpl, ctypes.byref(cur))
            tok = cur.data[cur.selected].id
        L.llama_sampler_accept(grmr, tok)
        L.llama_sampler_accept(smpl, tok)
        out.append(int(tok))
        if L.llama_vocab_is_eog(vocab, tok):
            break
        one_tok = (L.llama_token * 1)(tok)
        assert L.llama_decode(ctx, L.llama_batch_get_one(one_tok, 1)) == 0
    L.llama_sampler_free(smpl)
    L.llama_sampler_free(grmr)
    return prompt, out, n_resampled


def main():
    """Cases already in the output file are kept (a run can be resumed); the file is written
    after every case."""
    cache = os.path.expanduser("~/.cache/pyllama")
    L.llama_backend_init()
    gs = grammars()
    data = {"source": "llama.cpp 0c1e570 via llama-cpp-python 0.3.36 (AVX2), common_sampler order",
            "n_predict": N_PREDICT, "grammars": {k: v[0] for k, v in gs.items()}, "cases": []}
    if os.path.exists(OUT):
        old = json.load(open(OUT))
        if old.get("n_predict") == N_PREDICT and old.get("grammars") == data["grammars"]:
            data["cases"] = old["cases"]
    done = {(c["model"], c["grammar"], c["mode"]) for c in data["cases"]}
    for alias, fname in MODELS.items():
        todo = [(g, m) for g in gs for m in MODES if (alias, g, m) not in done]
        if not todo:
            continue
        mp = L.llama_model_default_params()
        model = L.llama_model_load_from_file(os.path.join(cache, fname).encode(), mp)
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_threads, cp.n_threads_batch = 512, 512, 512, 1, 1
        ctx = L.llama_init_from_model(model, cp)
        vocab = L.llama_model_get_vocab(model)
        for gname, mode in todo:
            gbnf, text = gs[gname]
            kw = MODES[mode]
            prompt, toks, n_res = run(model, ctx, vocab, text, gbnf, **kw)
            data["cases"].append({"model": alias, "grammar": gname, "mode": mode, **kw,
                                  "prompt": text, "prompt_ids": prompt, "tokens": toks,
                                  "n_resampled": n_res})
            with open(OUT, "w") as f:
                json.dump(data, f, indent=1)
            print(alias, gname, mode, len(toks), "tokens,", n_res, "resampled", flush=True)
        L.llama_free(ctx)
        L.llama_model_free(model)


if __name__ == "__main__":
    main()
