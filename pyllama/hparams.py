"""Hyper-parameters read from GGUF metadata, with llama.cpp's names and defaults.

Per-layer values (is_swa, n_ff) are lists indexed by layer. Architecture files fill the parts that are
specific to them (llama_model::load_hparams + the per-arch load_arch_hparams in llama.cpp).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import ModelError

SWA_NONE, SWA_STANDARD, SWA_CHUNKED, SWA_SYMMETRIC = 0, 1, 2, 3
ROPE_NORM, ROPE_NEOX = 0, 2


@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_ff: list[int]
    n_head: int
    n_head_kv: int
    n_embd_head_k: int
    n_embd_head_v: int
    n_rot: int
    f_norm_rms_eps: float
    rope_type: int = ROPE_NORM
    rope_freq_base_train: float = 10000.0
    rope_freq_scale_train: float = 1.0
    rope_freq_base_train_swa: float = 10000.0
    rope_freq_scale_train_swa: float = 1.0
    swa_type: int = SWA_NONE
    n_swa: int = 0
    is_swa: list[bool] = field(default_factory=list)
    f_attention_scale: float = 0.0           # 0 -> 1/sqrt(head_dim)
    f_attn_logit_softcapping: float = 0.0
    f_final_logit_softcapping: float = 0.0
    f_embedding_scale: float = 0.0           # 0 -> none (Gemma: sqrt(n_embd))

    @property
    def n_embd_k_gqa(self) -> int:
        return self.n_embd_head_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        return self.n_embd_head_v * self.n_head_kv

    def is_swa_any(self) -> bool:
        return self.swa_type != SWA_NONE and any(self.is_swa)

    def set_swa_pattern(self, n_pattern: int, dense_first: bool = False) -> None:
        """llama_hparams::set_swa_pattern."""
        if n_pattern == 0:
            self.is_swa = [True] * self.n_layer
        elif dense_first:
            self.is_swa = [il % n_pattern != 0 for il in range(self.n_layer)]
        else:
            self.is_swa = [il % n_pattern < n_pattern - 1 for il in range(self.n_layer)]

    def rope_base(self, il: int) -> float:
        return self.rope_freq_base_train_swa if self.is_swa[il] else self.rope_freq_base_train

    def rope_scale(self, il: int) -> float:
        return self.rope_freq_scale_train_swa if self.is_swa[il] else self.rope_freq_scale_train


class MetaReader:
    """Typed access to `<arch>.*` keys with clear errors."""

    def __init__(self, metadata: dict, arch: str):
        self.md, self.arch = metadata, arch

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def get(self, suffix: str, default=None, required: bool = False):
        k = self.key(suffix)
        if k not in self.md:
            if required:
                raise ModelError(f"key not found in model: {k}")
            return default
        return self.md[k]

    def per_layer(self, suffix: str, n_layer: int, default=None, required=False) -> list:
        v = self.get(suffix, default, required)
        if isinstance(v, np.ndarray) or isinstance(v, list):
            if len(v) != n_layer:
                raise ModelError(f"{self.key(suffix)}: expected {n_layer} values, got {len(v)}")
            return [int(x) for x in v]
        return [v] * n_layer


def load_common(metadata: dict, arch: str) -> HParams:
    """llama_model_base::load_hparams: the keys every architecture shares."""
    m = MetaReader(metadata, arch)
    n_layer = int(m.get("block_count", required=True))
    n_embd = int(m.get("embedding_length", required=True))
    n_head = int(m.per_layer("attention.head_count", n_layer, required=True)[0])
    n_head_kv = int(m.per_layer("attention.head_count_kv", n_layer, n_head)[0])
    head_k = int(m.get("attention.key_length", n_embd // n_head))
    head_v = int(m.get("attention.value_length", n_embd // n_head))
    tokens = metadata.get("tokenizer.ggml.tokens")
    n_vocab = int(m.get("vocab_size", len(tokens) if tokens is not None else 0))
    hp = HParams(
        arch=arch, n_vocab=n_vocab,
        n_ctx_train=int(m.get("context_length", required=True)),
        n_embd=n_embd, n_layer=n_layer,
        n_ff=m.per_layer("feed_forward_length", n_layer, 0),
        n_head=n_head, n_head_kv=n_head_kv, n_embd_head_k=head_k, n_embd_head_v=head_v,
        n_rot=int(m.get("rope.dimension_count", head_k)),
        f_norm_rms_eps=float(m.get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_freq_base_train=float(m.get("rope.freq_base", 10000.0)),
    )
    factor = m.get("rope.scaling.factor")
    stype = m.get("rope.scaling.type", "linear")
    if factor and stype not in ("none", "linear"):
        raise ModelError(f"{arch}: rope scaling type '{stype}' is not supported yet")
    hp.rope_freq_scale_train = 1.0 / float(factor) if factor else 1.0
    hp.rope_freq_base_train_swa = hp.rope_freq_base_train
    hp.rope_freq_scale_train_swa = hp.rope_freq_scale_train
    hp.is_swa = [False] * n_layer
    return hp


def load_swa_pattern(hp: HParams, metadata: dict, default_n: int, dense_first: bool = False):
    """llama_model_base::load_swa_pattern: an array key is used verbatim, else an int pattern."""
    v = metadata.get(f"{hp.arch}.attention.sliding_window_pattern", default_n)
    if isinstance(v, (np.ndarray, list)):
        if len(v) != hp.n_layer:
            raise ModelError(f"sliding_window_pattern has {len(v)} entries for {hp.n_layer} layers")
        hp.is_swa = [bool(x) for x in v]
    else:
        hp.set_swa_pattern(int(v), dense_first)
