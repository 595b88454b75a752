"""Record llama.cpp 0c1e570's logits with random LoRA adapters and control vectors (llama-cpp-python
0.3.36's low-level API: llama_adapter_lora_init, llama_set_adapters_lora, llama_set_adapter_cvec;
flash attention off, f16 KV), for tests/test_lora.py.

Per bundled model, for each case: the logits of every token of a prompt batch, then of one
single-token decode (the prompt's greedy next token). Adapters and control vectors are the
deterministic random files of tests/lora_files.py; the control-vector data is summed in f32 as
common_control_vector_load does (llama-cpp-python does not bind common).

    /work/oracle/bin/python tests/make_lora_fixture.py GEMMA.gguf QWEN.gguf

writes tests/data/lora-llamacpp.npz (per row: the top TOPK token ids, their logits, and the
row's log-sum-exp).
"""
import ctypes
import os
import sys
import tempfile

import numpy as np
import llama_cpp as L

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from lora_files import cvec_data, write_cvec, write_lora  # noqa: E402

TOPK = 32
PROMPT = "The quick brown fox jumps over the lazy dog because"
# case -> ([(adapter, scale)], control vectors [(seed, strength)], layer range)
CASES = {
    "a0": ([("a", 0.0)], [], None),
    "a05": ([("a", 0.5)], [], None),
    "a1": ([("a", 1.0)], [], None),
    "ab": ([("a", 1.0), ("b", 0.5)], [], None),
    "cvec": ([], [(21, 1.0), (22, -0.5)], (3, 10)),
}
_QUIET = L.llama_log_callback(lambda lvl, txt, ud: None)


def top(logits: np.ndarray):
    ids = np.argsort(-logits, axis=-1, kind="stable")[:, :TOPK].astype(np.int32)
    vals = np.take_along_axis(logits, ids, axis=-1).astype(np.float32)
    x = logits.astype(np.float64)
    mx = x.max(axis=-1, keepdims=True)
    lse = (mx[:, 0] + np.log(np.exp(x - mx).sum(axis=-1)))
    return ids, vals, lse


def run(path: str, name: str, tmp: str) -> dict:
    L.llama_backend_init()
    L.llama_log_set(_QUIET, None)
    model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    buf = (L.llama_token * 256)()
    n = L.llama_tokenize(vocab, PROMPT.encode(), len(PROMPT.encode()), buf, 256, True, False)
    ids = list(buf[:n])
    files = {w: write_lora(os.path.join(tmp, f"{name}-{w}.gguf"), name, w) for w in ("a", "b")}
    adapters = {w: L.llama_adapter_lora_init(model, p.encode()) for w, p in files.items()}
    assert all(adapters.values()), "llama_adapter_lora_init failed"
    out = {"ids": np.array(ids, np.int32)}
    for case, (loras, cvecs, rng) in CASES.items():
        cp = L.llama_context_default_params()
        cp.n_ctx, cp.n_batch, cp.n_ubatch = 256, 256, 256
        cp.n_threads = cp.n_threads_batch = 2
        cp.flash_attn_type = 0                             # LLAMA_FLASH_ATTN_TYPE_DISABLED
        ctx = L.llama_init_from_model(model, cp)
        if loras:
            arr = (L.llama_adapter_lora_p_ctypes * len(loras))(*[adapters[w] for w, _ in loras])
            sc = (ctypes.c_float * len(loras))(*[s for _, s in loras])
            assert L.llama_set_adapters_lora(ctx, arr, len(loras), sc) == 0
        if cvecs:
            for seed, _ in cvecs:
                write_cvec(os.path.join(tmp, f"{name}-cvec{seed}.gguf"), name, seed)
            data = np.ascontiguousarray(cvec_data(name, cvecs).reshape(-1))
            n_embd = L.llama_model_n_embd(model)
            rc = L.llama_set_adapter_cvec(ctx, data.ctypes.data_as(ctypes.POINTER(ctypes.c_float)),
                                          data.size, n_embd, rng[0], rng[1])
            assert rc == 0
        batch = L.llama_batch_init(len(ids), 0, 1)

        def decode(tokens, p0):
            batch.n_tokens = len(tokens)
            for k, t in enumerate(tokens):
                batch.token[k], batch.pos[k], batch.n_seq_id[k] = t, p0 + k, 1
                batch.seq_id[k][0], batch.logits[k] = 0, 1
            assert L.llama_decode(ctx, batch) == 0
            return np.stack([np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, k),
                                                   shape=(n_vocab,)).copy()
                             for k in range(len(tokens))])
        pre = decode(ids, 0)
        nxt = int(np.argmax(pre[-1]))
        one = decode([nxt], len(ids))
        rows = np.concatenate([pre, one])
        i, v, s = top(rows)
        out[f"{case}_next"] = np.array([nxt], np.int32)
        out[f"{case}_ids"], out[f"{case}_vals"], out[f"{case}_lse"] = i, v, s
        L.llama_batch_free(batch)
        L.llama_free(ctx)
    for a in adapters.values():
        L.llama_adapter_lora_free(a)
    L.llama_model_free(model)
    return out


def main(paths):
    data = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in zip(("gemma-3-270m", "qwen2.5-coder-0.5b"), paths):
            for k, v in run(path, name, tmp).items():
                data[f"{name}/{k}"] = v
            print(name, "done", flush=True)
    np.savez_compressed(os.path.join(HERE, "data", "lora-llamacpp.npz"), **data)


if __name__ == "__main__":
    main(sys.argv[1:3])
