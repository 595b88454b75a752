"""Tiny random-weight GGUF models of every registered architecture, written with the `gguf` package.

The vocabulary is a real byte-level BPE vocab (256 byte tokens, a few merges, ChatML control tokens),
so tokenization, detokenization, chat templates and sampling all run for real.
"""
from __future__ import annotations

import os

import gguf
import numpy as np

from pyllama import arch as arch_registry

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "r e", "a t", "e n", "o r",
          "Ġ w", "Ġ o", "Ġ c", "i s", "a n", "e s", "Ġ b", "Ġ f"]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable unicode map (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    for m in MERGES:
        tokens.append(m.replace(" ", ""))
    types = [1] * len(tokens)
    tokens += SPECIAL
    types += [3] * len(SPECIAL)
    return tokens, types, MERGES


def _qtype_for(name: str, cols: int, i: int):
    T = gguf.GGMLQuantizationType
    if name.endswith("norm.weight") or name.endswith(".bias") or cols % 32:
        return T.F32
    return [T.Q8_0, T.Q5_0, T.Q4_0, T.F16][i % 4] if "token_embd" not in name else T.Q8_0


def write_tiny_gguf(path: str, arch: str = "llama", seed: int = 0, overrides: dict | None = None,
                    all_f32: bool = False, embd_std: float = 0.25, quantizer=None,
                    extra_tensors: dict | None = None) -> str:
    """Write a tiny random model of `arch`; overrides replace keys of the arch's tiny() config.
    embd_std: standard deviation of token_embd (smaller: less peaked next-token distributions).
    quantizer(name, f32 data) -> (raw uint8 rows, ggml type id) or None (keep F32): replaces the
    default type choice (e.g. pyllama's ggml reference quantizers in one type).
    extra_tensors: {GGUF name: float32 array (numpy order)} written as F32 after the arch's own
    (e.g. a classification head `cls.output.weight`)."""
    cls = arch_registry.get(arch)
    cfg = dict(cls.tiny())
    cfg.update(overrides or {})
    tokens, types, merges = tiny_vocab()
    w = gguf.GGUFWriter(path, arch)
    for k, v in cfg.items():
        _add(w, f"{arch}.{k}", v)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(len(tokens) - 3)
    w.add_eos_token_id(len(tokens) - 1)
    w.add_add_bos_token(False)
    md = {f"{arch}.{k}": v for k, v in cfg.items()}
    md["tokenizer.ggml.tokens"] = tokens
    hp = cls.load_hparams(md)
    hp.n_vocab = len(tokens)
    rng = np.random.default_rng(seed)
    extra = cls.tiny_optional(hp)
    for i, spec in enumerate(s for s in cls.tensor_specs(hp) if s.required or s.name in extra):
        data = _random_tensor(rng, spec.name, spec.shape, embd_std)
        if quantizer is not None:
            q = quantizer(spec.name, data)
            if q is None:
                w.add_tensor(spec.name, data)
            else:
                w.add_tensor(spec.name, q[0], raw_shape=q[0].shape,
                             raw_dtype=gguf.GGMLQuantizationType(int(q[1])))
            continue
        qt = gguf.GGMLQuantizationType.F32 if all_f32 else _qtype_for(spec.name, spec.shape[-1], i)
        if qt == gguf.GGMLQuantizationType.F32:
            w.add_tensor(spec.name, data)
        else:
            q = gguf.quants.quantize(data, qt)
            w.add_tensor(spec.name, q, raw_shape=q.shape, raw_dtype=qt)
    for name, data in (extra_tensors or {}).items():
        w.add_tensor(name, np.asarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _random_tensor(rng, name: str, shape, embd_std: float) -> np.ndarray:
    if name.endswith("norm.weight"):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    scale = embd_std if "token_embd" in name else 1.0 / np.sqrt(shape[-1])
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def _add(w, key: str, v) -> None:
    if isinstance(v, bool):
        w.add_bool(key, v)
    elif isinstance(v, int):
        w.add_uint32(key, v)
    elif isinstance(v, float):
        w.add_float32(key, v)
    elif isinstance(v, str):
        w.add_string(key, v)
    else:
        w.add_array(key, list(v))


def tiny_path(tmp_dir: str, arch: str, **kw) -> str:
    key = "-".join(f"{k}{v}" for k, v in sorted(kw.items()) if k != "overrides")
    ov = kw.get("overrides") or {}
    key += "-".join(f"{k}{v}" for k, v in sorted(ov.items()))
    path = os.path.join(tmp_dir, f"tiny-{arch}{('-' + key) if key else ''}.gguf")
    if not os.path.exists(path):
        write_tiny_gguf(path + ".tmp", arch, **kw)
        os.replace(path + ".tmp", path)
    return path


def random_tokens(n: int, seed: int = 0, n_vocab: int = 276) -> np.ndarray:
    """n random token ids of the tiny vocabulary (int32)."""
    return np.random.default_rng(seed).integers(0, n_vocab, n).astype(np.int32)
