"""The random-weight llama of test_quant_models.py and make_quant_model_fixture.py: its F32
base file, its rebuild in one type with pyllama's quantizers, and the decode both sides run."""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
DIMS = {"embedding_length": 256, "feed_forward_length": 256, "block_count": 1,
        "attention.head_count": 4, "attention.head_count_kv": 2}
TYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K", "Q5_K", "Q6_K",
         "IQ4_NL"]
N_PROMPT = 24
TOKENS = np.random.default_rng(3).integers(0, 276, N_PROMPT + 8).astype(np.int32)


def base_model(work: str) -> str:
    from tiny import write_tiny_gguf
    path = os.path.join(work, "base-f32.gguf")
    if not os.path.exists(path):
        write_tiny_gguf(path, "llama", seed=15, overrides=DIMS, all_f32=True, embd_std=0.5)
    return path


def next_logprobs(logits: np.ndarray) -> np.ndarray:
    z = logits[:-1].astype(np.float64)
    m = z.max(axis=1, keepdims=True)
    lp = z - m - np.log(np.exp(z - m).sum(axis=1, keepdims=True))
    return lp[np.arange(len(z)), TOKENS[1:]]


def quantized_model(work: str, name: str) -> str:
    """This model with every 2D tensor quantized to `name` by pyllama (llama.cpp's pure mode)."""
    from tiny import write_tiny_gguf

    from pyllama.gguf import GGMLType
    from pyllama.quant import quantize, quantize_iq4_nl
    t = GGMLType[name]

    def q(tensor, data):
        if data.ndim < 2:
            return None
        if t == GGMLType.IQ4_NL:      # llama-quantize's quantize_iq4_nl (scale search)
            raw = np.ascontiguousarray(quantize_iq4_nl(data, ntry=7)).view(np.uint8)
            return raw.reshape(data.shape[0], -1), t
        return quantize(data, t), t
    path = os.path.join(work, f"{name}.gguf")
    write_tiny_gguf(path, "llama", seed=15, overrides=DIMS, embd_std=0.5, quantizer=q)
    return path


def run(path: str, numerics: str) -> np.ndarray:
    import pyllama
    model = pyllama.load_model(path, n_threads=2)
    ctx = pyllama.Context(model, n_ctx=256, n_batch=256, n_ubatch=256, n_threads=2,
                          numerics=numerics)
    out = [ctx.eval(TOKENS[:N_PROMPT], logits_all=True)]
    out += [ctx.eval(TOKENS[i:i + 1]) for i in range(N_PROMPT, len(TOKENS))]
    return np.concatenate(out).astype(np.float32)


