"""olmo2 (src/models/olmo2.cpp): no pre-norms; RMSNorm of the whole Q and K projections
(attn_q_norm [n_embd], attn_k_norm [n_embd_k_gqa]) before NEOX RoPE; post-attention and post-FFN
RMSNorms before the residual adds; untied output. With attention.sliding_window (OLMo 3) the
layers follow the SWA pattern (default 4: three SWA layers, then a full one), SWA layers with
the plain RoPE base (rope.freq_base_swa when present) and no frequency scaling."""
from ..hparams import ROPE_NEOX, SWA_NONE, SWA_STANDARD, load_common, load_swa_pattern
from . import register
from .base import Arch, TensorSpec


@register
class Olmo2(Arch):
    name = "olmo2"

    @classmethod
    def load_hparams(cls, md):
        hp = load_common(md, cls.name)
        hp.rope_type = ROPE_NEOX
        n_swa = int(md.get("olmo2.attention.sliding_window", 0) or 0)
        if n_swa > 0:
            hp.swa_type, hp.n_swa = SWA_STANDARD, n_swa
            load_swa_pattern(hp, md, 4)
            hp.rope_freq_base_train_swa = float(md.get("olmo2.rope.freq_base_swa",
                                                       hp.rope_freq_base_train))
            hp.rope_freq_scale_train_swa = 1.0
        else:
            hp.swa_type = SWA_NONE
        return hp

    @classmethod
    def tensor_specs(cls, hp):
        e, kd = hp.n_embd, hp.n_embd_k_gqa
        specs = [TensorSpec("token_embd.weight", (hp.n_vocab, e)),
                 TensorSpec("output_norm.weight", (e,)),
                 TensorSpec("output.weight", (hp.n_vocab, e))]
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            specs += [s for s in cls.attn_specs(hp, il) if s.name != p + "attn_norm.weight"]
            specs += [TensorSpec(p + "attn_q_norm.weight", (hp.n_head * hp.n_embd_head_k,)),
                      TensorSpec(p + "attn_k_norm.weight", (kd,)),
                      TensorSpec(p + "post_attention_norm.weight", (e,)),
                      TensorSpec(p + "post_ffw_norm.weight", (e,))]
            specs += [s for s in cls.ffn_specs(hp, il) if s.name != p + "ffn_norm.weight"]
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import post_norm_decoder
        return post_norm_decoder(g, w, hp)

    @classmethod
    def tiny(cls):
        # OLMo 3 style (sliding window, pattern 4), so the invariance suite runs its iSWA cache
        return {"context_length": 512, "embedding_length": 64, "block_count": 4,
                "feed_forward_length": 96, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-6,
                "rope.freq_base": 500000.0, "attention.sliding_window": 16}
