"""What the memory needs to know about a model's layers (filled from hparams by the Context)."""
from __future__ import annotations

from dataclasses import dataclass, field

from .swa import SWA_NONE


@dataclass
class KVLayout:
    """n_layer layers; is_swa[il]; n_embd_k_gqa[il] / n_embd_v_gqa[il] = n_head_kv * head_dim;
    n_head_kv[il]; swa_type (0 none, 1 standard, 2 chunked, 3 symmetric) and n_swa.
    k_center: optional {il: f32[n_embd_k_gqa]} subtracted from K rows before a quantized K cache
    stores them (KVCache, `kv_k_center`: not llama.cpp's bytes).
    v_in_k (llama_hparams::is_mla, deepseek2's absorbed MLA): V is the first n_embd_v_gqa values
    of each K row, no V buffer is allocated and the state has no V rows (llama.cpp's
    `has_v = !is_mla`, V read as a view of K); v_trans then is the V transposition flag
    llama.cpp's cache carries all the same (not flash attention), written in the state.
    rope_offset: where the n_rot RoPE values of each K head start, for the K-shift (llama.cpp's
    build_graph_shift: n_embd_head_k - n_rot when n_lora_kv > 0, else 0)."""
    n_embd_k_gqa: list[int]
    n_embd_v_gqa: list[int]
    n_head_kv: list[int]
    is_swa: list[bool] = field(default_factory=list)
    swa_type: int = SWA_NONE
    n_swa: int = 0
    k_center: dict = field(default_factory=dict)
    v_in_k: bool = False
    v_trans: bool = False
    rope_offset: int = 0

    def __post_init__(self):
        if not self.is_swa:
            self.is_swa = [False] * len(self.n_embd_k_gqa)

    @property
    def n_layer(self) -> int:
        return len(self.n_embd_k_gqa)

    @property
    def has_swa(self) -> bool:
        return self.swa_type != SWA_NONE and self.n_swa > 0 and any(self.is_swa)

    def layers(self, swa: bool) -> list[int]:
        return [il for il in range(self.n_layer) if bool(self.is_swa[il]) == swa]

    def cache_kwargs(self, layers: list[int]) -> dict:
        return {"layers": layers,
                "n_embd_k": [self.n_embd_k_gqa[il] for il in layers],
                "n_embd_v": [self.n_embd_v_gqa[il] for il in layers],
                "n_head_kv": [self.n_head_kv[il] for il in layers],
                "k_center": [self.k_center.get(il) for il in layers],
                "v_in_k": self.v_in_k, "v_trans": self.v_trans, "rope_offset": self.rope_offset}
