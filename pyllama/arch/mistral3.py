"""mistral3 (src/models/mistral3.cpp; Ministral 3, Mistral Small 3.x / Magistral in the new
converter): the llama stack (NORM RoPE with YaRN from the metadata, rope.scaling.yarn_beta_fast /
_slow / yarn_log_multiplier read here), optional attention temperature tuning: Q times
log(floor(pos / n_ctx_orig_yarn) + 1) * attention.temperature_scale + 1 after RoPE."""
from ..errors import ModelError
from ..hparams import ROPE_NORM, MetaReader
from . import register
from .base import PreNormArch


@register
class Mistral3(PreNormArch):
    name = "mistral3"
    rope_type = ROPE_NORM

    @classmethod
    def load_hparams(cls, md):
        hp = super().load_hparams(md)
        m = MetaReader(md, cls.name)
        hp.f_attn_temp_scale = float(m.get("attention.temperature_scale", 0.0))
        for key, attr in (("rope.scaling.yarn_beta_fast", "yarn_beta_fast"),
                          ("rope.scaling.yarn_beta_slow", "yarn_beta_slow"),
                          ("rope.scaling.yarn_log_multiplier", "rope_yarn_log_mul")):
            if m.get(key) is not None:
                setattr(hp, attr, float(m.get(key)))
        if hp.f_attn_temp_scale != 0.0:
            hp.n_attn_temp_floor_scale = hp.n_ctx_orig_yarn
            if hp.n_attn_temp_floor_scale == 0:
                raise ModelError("invalid n_ctx_orig_yarn for attention temperature scaling")
        return hp

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import pre_norm_decoder
        q_mul = None
        if hp.f_attn_temp_scale != 0.0:
            q_mul = g.attn_temperature(hp.f_attn_temp_scale, hp.n_attn_temp_floor_scale)
        return pre_norm_decoder(g, w, hp, q_mul=q_mul)

    @classmethod
    def tiny(cls):
        return {"context_length": 256, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 96, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-5,
                "rope.freq_base": 1000000.0, "attention.temperature_scale": 0.1,
                "rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                "rope.scaling.original_context_length": 16}
