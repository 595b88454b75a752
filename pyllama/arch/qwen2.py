"""qwen2 (src/models/qwen2.cpp): llama layout with Q/K/V biases and NEOX RoPE."""
from ..hparams import ROPE_NEOX
from . import register
from .base import PreNormArch


@register
class Qwen2(PreNormArch):
    name = "qwen2"
    rope_type = ROPE_NEOX
    bias = True

    @classmethod
    def tiny(cls):
        return {"context_length": 256, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 128, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-6,
                "rope.freq_base": 1000000.0}
