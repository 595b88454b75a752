"""qwen2 (src/models/qwen2.cpp): llama layout with Q/K/V biases and NEOX RoPE."""
from ..hparams import ROPE_NEOX, load_common
from . import register
from .base import Arch
from .blocks import pre_norm_decoder


@register
class Qwen2(Arch):
    name = "qwen2"

    @classmethod
    def load_hparams(cls, md):
        hp = load_common(md, cls.name)
        hp.rope_type = ROPE_NEOX
        return hp

    @classmethod
    def tensor_specs(cls, hp):
        specs = cls.io_specs(hp)
        for il in range(hp.n_layer):
            specs += cls.attn_specs(hp, il, bias=True) + cls.ffn_specs(hp, il)
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        return pre_norm_decoder(g, w, hp)

    @classmethod
    def tiny(cls):
        return {"context_length": 256, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 128, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-6,
                "rope.freq_base": 1000000.0}
