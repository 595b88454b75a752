"""smollm3 (src/models/smollm3.cpp): the llama stack (NORM RoPE, SwiGLU) where every 4th layer
(il + 1) % 4 == 0 has no RoPE (n_no_rope_layer_step 4); tied output by default."""
from ..hparams import ROPE_NORM
from . import register
from .base import PreNormArch

NO_ROPE_LAYER_STEP = 4


@register
class SmolLM3(PreNormArch):
    name = "smollm3"
    rope_type = ROPE_NORM

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import pre_norm_decoder
        return pre_norm_decoder(g, w, hp, no_rope_step=NO_ROPE_LAYER_STEP)

    @classmethod
    def tiny(cls):
        return {"context_length": 256, "embedding_length": 64, "block_count": 4,
                "feed_forward_length": 96, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-6,
                "rope.freq_base": 2000000.0}
