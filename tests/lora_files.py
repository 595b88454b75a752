"""Random LoRA adapters and control vectors for the bundled models, written with the `gguf`
package as llama.cpp's convert_lora_to_gguf.py writes them (general.type = adapter,
adapter.type = lora, adapter.lora.alpha, `<base tensor>.lora_a` [rank, cols] and `.lora_b`
[rows, rank] in numpy order, token_embd's lora_a transposed to [n_vocab, rank]) and as
llama.cpp's cvector-generator writes control vectors (`direction.N`, f32 [n_embd]).

Deterministic from the seed: tests/make_lora_fixture.py (the llama.cpp oracle) and
tests/test_lora.py write the same files. Used by both; needs numpy and gguf only.
"""
from __future__ import annotations

import numpy as np

# per bundled model: architecture, n_embd, n_layer, the base tensors' (rows, cols)
MODELS = {
    "gemma-3-270m": dict(arch="gemma3", n_embd=640, n_layer=18, n_vocab=262144, tied=True,
                         shapes={"attn_q": (1024, 640), "attn_k": (256, 640),
                                 "attn_v": (256, 640), "attn_output": (640, 1024),
                                 "ffn_gate": (2048, 640), "ffn_up": (2048, 640),
                                 "ffn_down": (640, 2048)}),
    "qwen2.5-coder-0.5b": dict(arch="qwen2", n_embd=896, n_layer=24, n_vocab=151936, tied=False,
                               shapes={"attn_q": (896, 896), "attn_k": (128, 896),
                                       "attn_v": (128, 896), "attn_output": (896, 896),
                                       "ffn_gate": (4864, 896), "ffn_up": (4864, 896),
                                       "ffn_down": (896, 4864)}),
}

# adapter "a": F32 (the converter's default), rank 8, alpha 16, every projection of every layer
# (plus token_embd and output where the model has its own output); adapter "b": F16 (--outtype
# f16), rank 16, no alpha (scale = user scale), attn_q / attn_v / ffn_down of every third layer.
ADAPTERS = {
    "a": dict(seed=11, rank=8, alpha=16.0, dtype=np.float32, layers=None,
              names=("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                     "ffn_down"), io=True),
    "b": dict(seed=12, rank=16, alpha=0.0, dtype=np.float16, layers=3,
              names=("attn_q", "attn_v", "ffn_down"), io=False),
}


def write_lora(path: str, model: str, which: str) -> str:
    import gguf
    m, spec = MODELS[model], ADAPTERS[which]
    rng = np.random.default_rng(spec["seed"])
    r, dt = spec["rank"], spec["dtype"]
    w = gguf.GGUFWriter(path, m["arch"])
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    if spec["alpha"]:
        w.add_float32(gguf.Keys.Adapter.LORA_ALPHA, spec["alpha"])
    w.add_name(f"random LoRA {which} for {model}")

    def pair(name, rows, cols, embd=False):
        a = (rng.standard_normal((r, cols)) / np.sqrt(cols)).astype(np.float32)
        b = (rng.standard_normal((rows, r)) * (0.5 / np.sqrt(r))).astype(np.float32)
        if embd:          # the converter stores token_embd's lora_a transposed [n_vocab, rank]
            a = np.ascontiguousarray((rng.standard_normal((rows, r)) * 0.5).astype(np.float32))
            b = (rng.standard_normal((cols, r)) * (0.5 / np.sqrt(r))).astype(np.float32)
        w.add_tensor(name + ".lora_a", a.astype(dt))
        w.add_tensor(name + ".lora_b", b.astype(dt))

    step = spec["layers"] or 1
    for il in range(0, m["n_layer"], step):
        for n in spec["names"]:
            rows, cols = m["shapes"][n]
            pair(f"blk.{il}.{n}.weight", rows, cols)
    if spec["io"] and not m["tied"]:
        pair("token_embd.weight", m["n_vocab"], m["n_embd"], embd=True)
        pair("output.weight", m["n_vocab"], m["n_embd"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_cvec(path: str, model: str, seed: int, scale: float = 0.5) -> str:
    """A control vector with a direction for every layer 1..n_layer-1."""
    import gguf
    m = MODELS[model]
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "controlvector")
    w.add_string("controlvector.model_hint", m["arch"])
    w.add_int32("controlvector.layer_count", m["n_layer"] - 1)
    for il in range(1, m["n_layer"]):
        w.add_tensor(f"direction.{il}",
                     (rng.standard_normal(m["n_embd"]) * scale).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def cvec_data(model: str, items) -> np.ndarray:
    """common_control_vector_load of [(seed, strength)] written by write_cvec: [n_layer - 1,
    n_embd] f32 (layer il at row il - 1), each file's directions times its strength, summed."""
    m = MODELS[model]
    out = None
    for seed, strength in items:
        rng = np.random.default_rng(seed)
        d = np.stack([(rng.standard_normal(m["n_embd"]) * 0.5).astype(np.float32)
                      for _ in range(1, m["n_layer"])])
        d = (np.zeros_like(d) + (d * np.float32(strength)).astype(np.float32)).astype(np.float32)
        out = d if out is None else (out + d).astype(np.float32)
    return out
