"""Record the llama.cpp figures of tests/test_headline_fast.py with llama.cpp 0c1e570 itself
(llama-cpp-python 0.3.36, AVX2 build: the reference arithmetic of docs/numerics.md):

- greedy tokens with flash attention on (flash_attn_type = enabled), one token per decode after a
  one-batch prompt, for one reference prompt per bundled model;
- llama-perplexity's estimate for -c 128 --chunks 1 of tests/data/tools/gpl3-head.txt with f16 and
  q8_0 K/V (tests/kvsupport/llamacpp_ppl.py, which reproduces llama-perplexity's chunking and
  its figures in tests/data/perplexity.json).

    /work/oracle/bin/python tests/make_fast_headline_fixture.py GEMMA.gguf QWEN.gguf

writes tests/data/headline-fast-llamacpp.json.
"""
import json
import os
import re
import subprocess
import sys

import numpy as np
import llama_cpp as L

HERE = os.path.dirname(os.path.abspath(__file__))
N_GREEDY = 16
CASES = {"gemma-3-270m": "short-en", "qwen2.5-coder-0.5b": "story"}


_QUIET = L.llama_log_callback(lambda lvl, txt, ud: None)   # kept alive: llama.cpp calls it


def greedy_fa(path: str, ids: list[int], n: int) -> list[int]:
    L.llama_backend_init()
    L.llama_log_set(_QUIET, None)
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch = 2048, 2048, 512
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = 1                                  # LLAMA_FLASH_ATTN_TYPE_ENABLED
    ctx = L.llama_init_from_model(model, cp)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    batch = L.llama_batch_init(len(ids), 0, 1)

    def decode(tokens, p0):
        batch.n_tokens = len(tokens)
        for k, t in enumerate(tokens):
            batch.token[k], batch.pos[k], batch.n_seq_id[k] = t, p0 + k, 1
            batch.seq_id[k][0], batch.logits[k] = 0, k == len(tokens) - 1
        assert L.llama_decode(ctx, batch) == 0
        return np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, len(tokens) - 1),
                                     shape=(n_vocab,))
    out, logits, pos = [], decode(ids, 0), len(ids)
    for _ in range(n):
        tok = int(np.argmax(logits))
        out.append(tok)
        logits = decode([tok], pos)
        pos += 1
    L.llama_free(ctx)
    L.llama_model_free(model)
    return out


def perplexity(path: str, *flags: str) -> str:
    r = subprocess.run([sys.executable, os.path.join(HERE, "kvsupport", "llamacpp_ppl.py"),
                        "-m", path, "-f", os.path.join(HERE, "data", "tools", "gpl3-head.txt"),
                        "-c", "128", "--chunks", "1", *flags],
                       capture_output=True, text=True, check=True)
    m = re.search(r"PPL ([\d.]+) \+/- ([\d.]+)", r.stdout)
    return f"{m.group(1)} +/- {m.group(2)}"


def main():
    paths = dict(zip(CASES, sys.argv[1:3]))
    out = {"llama.cpp": "0c1e570 (llama-cpp-python 0.3.36, AVX2)", "greedy_fa": {},
           "perplexity_c128": {}}
    for name, path in paths.items():
        with open(os.path.join(HERE, "data", f"logits-{name}.json"), encoding="utf-8") as f:
            case = next(c for c in json.load(f)["cases"] if c["id"] == CASES[name])
        out["greedy_fa"][name] = {"case": case["id"], "tokens": greedy_fa(path, case["ids"],
                                                                          N_GREEDY)}
        out["perplexity_c128"][name] = {"f16": perplexity(path),
                                        "q8_0": perplexity(path, "-ctk", "8", "-ctv", "8")}
    with open(os.path.join(HERE, "data", "headline-fast-llamacpp.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
