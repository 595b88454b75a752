"""llama (src/models/llama.cpp): RMSNorm pre-norm, NORM RoPE, SwiGLU, no SWA."""
from ..hparams import ROPE_NORM
from . import register
from .base import PreNormArch


@register
class Llama(PreNormArch):
    name = "llama"
    rope_type = ROPE_NORM

    @classmethod
    def tiny(cls):
        return {"context_length": 256, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 96, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-5,
                "rope.freq_base": 10000.0}
