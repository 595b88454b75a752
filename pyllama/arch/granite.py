"""granite (src/models/granite.cpp): the llama stack with IBM Granite's multipliers: embeddings
times embedding_scale, attention scale attention.scale, attention and FFN outputs times
residual_scale before their residual adds, logits divided by logit_scale (required)."""
from ..errors import ModelError
from ..hparams import ROPE_NORM, MetaReader
from . import register
from .base import PreNormArch


@register
class Granite(PreNormArch):
    name = "granite"
    rope_type = ROPE_NORM

    @classmethod
    def load_hparams(cls, md):
        hp = super().load_hparams(md)
        m = MetaReader(md, cls.name)
        hp.f_logit_scale = float(m.get("logit_scale", required=True))
        hp.f_residual_scale = float(m.get("residual_scale", 0.0))
        hp.f_embedding_scale = float(m.get("embedding_scale", 0.0))
        hp.f_attention_scale = float(m.get("attention.scale", 0.0))
        if m.get("expert_shared_feed_forward_length", 0):
            raise ModelError("granite: shared experts are not supported yet")
        return hp

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import pre_norm_decoder
        return pre_norm_decoder(g, w, hp, residual_scale=hp.f_residual_scale)

    @classmethod
    def tiny(cls):
        return {"context_length": 256, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 96, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-5,
                "rope.freq_base": 10000.0, "logit_scale": 8.0, "residual_scale": 0.22,
                "embedding_scale": 12.0, "attention.scale": 0.015625}
