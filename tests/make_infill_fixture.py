"""Write tests/data/infill-llamacpp.json: /infill prompts of llama.cpp 0c1e570's
format_prompt_infill (server-common.cpp) built from llama.cpp's own tokenizer and FIM token ids
(llama-cpp-python 0.3.36), and the greedy continuation llama.cpp computes for them on the bundled
Qwen2.5-Coder (prompt in one batch, then one token per decode, flash attention off).
The server settings are llama-server's defaults for `-c 2048 -np 1`: n_batch 2048, n_predict -1,
n_ctx_slot 2048; and a `-b 512` variant so the extra context and the prefix/suffix budgets bite.
Run: /work/oracle/bin/python tests/make_infill_fixture.py"""
import json
import os

import numpy as np
import llama_cpp as L

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.expanduser("~/.cache/pyllama/qwen2.5-coder-0.5b-instruct.gguf")
N_GEN = 16

CASES = [
    {"input_prefix": "def fibonacci(n):\n    ", "input_suffix": "\n    return result\n",
     "input_extra": [{"filename": "utils.py", "text": "import math\n"}], "prompt": "",
     "n_batch": 2048, "spm": False},
    {"input_prefix": "import os\n\ndef list_files(path):\n" + "    # walk the tree\n" * 40,
     "input_suffix": "\n\nif __name__ == '__main__':\n    print(list_files('.'))\n" * 30,
     "input_extra": [{"filename": "a.py", "text": "def helper():\n    return 1\n" * 20},
                     {"text": "X = 3\n"}], "prompt": "    files = ",
     "n_batch": 512, "spm": False},
    {"input_prefix": "class Point:\n    def __init__(self, x, y):\n        ",
     "input_suffix": "\n    def norm(self):\n        return (self.x ** 2 + self.y ** 2) ** 0.5\n",
     "input_extra": [], "prompt": "", "n_batch": 2048, "spm": True},
]


def tok(vocab, text, parse_special=False):
    b = text.encode()
    buf = (L.llama_token * (len(b) + 16))()
    n = L.llama_tokenize(vocab, b, len(b), buf, len(buf), False, parse_special)
    return list(buf[:n])


def format_infill(vocab, c, n_ctx, n_predict):
    pre, suf, mid = L.llama_vocab_fim_pre(vocab), L.llama_vocab_fim_suf(vocab), \
        L.llama_vocab_fim_mid(vocab)
    rep, sep = L.llama_vocab_fim_rep(vocab), L.llama_vocab_fim_sep(vocab)
    n_batch = c["n_batch"]
    prompt = tok(vocab, c["prompt"], True)
    extra = []
    if rep != -1:
        extra += [rep] + tok(vocab, "myproject\n")
    for ch in c["input_extra"]:
        if sep != -1:
            extra += [sep] + tok(vocab, ch.get("filename", "tmp") + "\n")
        else:
            extra += tok(vocab, "\n\n--- snippet ---\n\n")
        extra += tok(vocab, ch["text"])
    if sep != -1:
        extra += [sep] + tok(vocab, "filename\n")
    tp, ts = tok(vocab, c["input_prefix"]), tok(vocab, c["input_suffix"])
    n_pre = min(len(tp), 3 * (n_batch // 4))
    n_suf = min(len(ts), max(0, n_batch // 4 - (2 + len(prompt))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra))
    tp = [pre] + tp[len(tp) - n_pre:] + prompt
    ts = [suf] + ts[:n_suf]
    inp, end = (ts, tp) if c["spm"] else (tp, ts)
    if L.llama_vocab_get_add_bos(vocab):
        inp = [L.llama_vocab_bos(vocab)] + inp
    return (extra[len(extra) - n_extra:] if n_extra else []) + inp + end + [mid]


def greedy(llm, tokens):
    ctx = llm._ctx.ctx
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    n_vocab = L.llama_vocab_n_tokens(llm._model.vocab)
    eog = lambda t: L.llama_vocab_is_eog(llm._model.vocab, t)   # noqa: E731
    batch = L.llama_batch_init(len(tokens), 0, 1)
    out, pos, cur = [], 0, list(tokens)
    for _ in range(N_GEN):
        for i, t in enumerate(cur):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, pos + i, 1
            batch.seq_id[i][0], batch.logits[i] = 0, i == len(cur) - 1
        batch.n_tokens = len(cur)
        assert L.llama_decode(ctx, batch) == 0
        pos += len(cur)
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), (n_vocab,))
        t = int(np.argmax(logits))
        out.append(t)
        if eog(t):
            break
        cur = [t]
    L.llama_batch_free(batch)
    return out


def main():
    llm = L.Llama(model_path=MODEL, n_ctx=2048, n_batch=2048, n_ubatch=512, flash_attn=False,
                  verbose=False, n_threads=2)
    vocab = llm._model.vocab
    out = []
    for c in CASES:
        tokens = format_infill(vocab, c, 2048, -1)
        out.append({**c, "n_ctx": 2048, "n_predict": -1, "prompt_tokens": tokens,
                    "completion_tokens": greedy(llm, tokens)})
    with open(os.path.join(HERE, "data", "infill-llamacpp.json"), "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
