"""llama.cpp side of bench/quant_sweep.py (run with llama-cpp-python's interpreter, not a test).

    python bench/quant_sweep_llamacpp.py BASE.gguf OUT_DIR TYPE[,TYPE...] TOKENS(comma list) N_PROMPT

For each TYPE: llama_model_quantize (pure: every 2D tensor in TYPE; the IQ1/IQ2 types with an
importance matrix of ones-plus-noise given through the imatrix parameter; llama-quant.cpp
(tensor_requires_imatrix) also wants one for IQ3_XXS) BASE -> OUT_DIR/TYPE.gguf,
then llama.cpp (2 threads, flash attention off, one sequence) decodes the first N_PROMPT tokens as
one batch (logits for every position) and the rest one token at a time; the logits go to
OUT_DIR/TYPE.npz (key "logits" [n_tokens, n_vocab]), or "error" when llama.cpp refuses the type.
"""
import ctypes
import os
import sys

import numpy as np
import llama_cpp as L

FTYPE = {"F16": 1, "BF16": 32, "Q4_0": 2, "Q4_1": 3, "Q5_0": 8, "Q5_1": 9, "Q8_0": 7, "Q2_K": 10,
         "Q3_K": 12, "Q4_K": 15, "Q5_K": 17, "Q6_K": 18, "IQ2_XXS": 19, "IQ2_XS": 20,
         "IQ3_XXS": 23, "IQ1_S": 24, "IQ4_NL": 25, "IQ3_S": 26, "IQ2_S": 28, "IQ4_XS": 30,
         "IQ1_M": 31, "TQ1_0": 36, "TQ2_0": 37, "MXFP4": 38}
NEEDS_IMATRIX = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ1_S", "IQ1_M"}
GGML_TYPE = {"F16": 1, "BF16": 30, "MXFP4": 39}
_QUIET = L.llama_log_callback(lambda level, text, user_data: None)


def imatrix(base: str):
    """{name: float32[n_per_row]} for every 2D tensor of BASE (a positive, uneven importance)."""
    import gguf
    rd = gguf.GGUFReader(base)
    rng = np.random.default_rng(7)
    out = {}
    for t in rd.tensors:
        if len(t.shape) == 2:
            out[t.name] = (1.0 + rng.random(int(t.shape[0]))).astype(np.float32)
    return out


def quantize(base: str, dst: str, t: str) -> None:
    p = L.llama_model_quantize_default_params()
    p.nthread = 2
    p.ftype = FTYPE[t]
    p.pure = True
    if t in GGML_TYPE:     # pure + MXFP4_MOE would keep dense tensors: name the type
        p.output_tensor_type = p.token_embedding_type = GGML_TYPE[t]
    keep = []
    if t in NEEDS_IMATRIX:
        im = imatrix(base)
        arr = (L.llama_model_imatrix_data * (len(im) + 1))()
        for i, (name, v) in enumerate(im.items()):
            nb = name.encode()
            keep += [nb, v]
            arr[i].name = nb
            arr[i].data = v.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
            arr[i].size = v.size
        arr[len(im)].name = None
        p.imatrix = ctypes.cast(arr, ctypes.POINTER(L.llama_model_imatrix_data))
        keep.append(arr)
    rc = L.llama_model_quantize(base.encode(), dst.encode(), ctypes.byref(p))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize {t}: rc {rc}")


def logits(path: str, tokens, n_prompt: int) -> np.ndarray:
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise RuntimeError("llama.cpp could not load the model")
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = 256
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = 0          # LLAMA_FLASH_ATTN_TYPE_DISABLED
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(256, 0, 1)
    out = []

    def run(toks, pos0, want_all):
        batch.n_tokens = len(toks)
        for j, tok in enumerate(toks):
            batch.token[j], batch.pos[j], batch.n_seq_id[j] = int(tok), pos0 + j, 1
            batch.seq_id[j][0], batch.logits[j] = 0, bool(want_all or j == len(toks) - 1)
        assert L.llama_decode(ctx, batch) == 0
        ptr = L.llama_get_logits(ctx)
        n = len(toks) if want_all else 1
        out.append(np.ctypeslib.as_array(ptr, shape=(n, n_vocab)).copy())
    run(tokens[:n_prompt], 0, True)
    for i in range(n_prompt, len(tokens)):
        run(tokens[i:i + 1], i, False)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return np.concatenate(out)


def main() -> None:
    base, out_dir, types, toks, n_prompt = sys.argv[1:6]
    tokens = [int(v) for v in toks.split(",")]
    L.llama_backend_init()
    L.llama_log_set(_QUIET, ctypes.c_void_p())
    for t in types.split(","):
        dst = os.path.join(out_dir, f"{t}.gguf")
        try:
            quantize(base, dst, t)
            np.savez(os.path.join(out_dir, f"{t}.npz"), logits=logits(dst, tokens, int(n_prompt)))
        except Exception as e:     # recorded, the sweep reports it
            np.savez(os.path.join(out_dir, f"{t}.npz"), error=str(e))
        print(t, "done", flush=True)


if __name__ == "__main__":
    main()
