"""qwen3moe (src/models/qwen3moe.cpp): qwen3's attention (per-head Q/K RMSNorm, NEOX RoPE) with
build_moe_ffn: softmax router, top expert_used_count experts, weights normalised; expert FFN width
expert_feed_forward_length (default n_ff / n_expert_used)."""
from ..hparams import load_moe_widths
from . import register
from .qwen3 import Qwen3


@register
class Qwen3Moe(Qwen3):
    name = "qwen3moe"

    @classmethod
    def load_hparams(cls, md):
        hp = super().load_hparams(md)
        load_moe_widths(hp, md)
        return hp

    @classmethod
    def tiny(cls):
        return {"context_length": 256, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 96, "expert_feed_forward_length": 32,
                "expert_count": 8, "expert_used_count": 2, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.key_length": 32,
                "attention.value_length": 32, "attention.layer_norm_rms_epsilon": 1e-6,
                "rope.freq_base": 1000000.0}
