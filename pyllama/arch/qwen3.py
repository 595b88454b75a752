"""qwen3 (src/models/qwen3.cpp): no biases, per-head Q/K RMSNorm before RoPE, NEOX RoPE."""
from ..hparams import ROPE_NEOX
from . import register
from .base import PreNormArch


@register
class Qwen3(PreNormArch):
    name = "qwen3"
    rope_type = ROPE_NEOX
    qk_norm = True

    @classmethod
    def tiny(cls):
        return {"context_length": 256, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 96, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.key_length": 32,
                "attention.value_length": 32, "attention.layer_norm_rms_epsilon": 1e-6,
                "rope.freq_base": 1000000.0}
