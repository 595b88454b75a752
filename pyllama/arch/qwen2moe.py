"""qwen2moe (src/models/qwen2moe.cpp; Qwen1.5-MoE, Qwen2-57B-A14B): qwen2's attention (Q/K/V
biases, NEOX RoPE) with build_moe_ffn (softmax router, top expert_used_count, weights NOT
normalised) plus a shared expert: a SwiGLU FFN of width expert_shared_feed_forward_length
(default n_ff) times silu(s) / s, s = ffn_gate_inp_shexp . x."""
from ..hparams import load_moe_widths
from . import register
from .base import TensorSpec
from .qwen2 import Qwen2


@register
class Qwen2Moe(Qwen2):
    name = "qwen2moe"

    @classmethod
    def load_hparams(cls, md):
        hp = super().load_hparams(md)
        load_moe_widths(hp, md)
        return hp

    @classmethod
    def tensor_specs(cls, hp):
        specs = super().tensor_specs(hp)
        e, f = hp.n_embd, hp.n_ff_shexp
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            specs += [TensorSpec(p + "ffn_gate_inp_shexp.weight", (e,)),
                      TensorSpec(p + "ffn_gate_shexp.weight", (f, e)),
                      TensorSpec(p + "ffn_up_shexp.weight", (f, e)),
                      TensorSpec(p + "ffn_down_shexp.weight", (e, f))]
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import pre_norm_decoder
        return pre_norm_decoder(g, w, hp, moe_norm_w=False, shexp=True)

    @classmethod
    def tiny(cls):
        return {"context_length": 256, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 96, "expert_feed_forward_length": 32,
                "expert_shared_feed_forward_length": 64, "expert_count": 8,
                "expert_used_count": 2, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-6,
                "rope.freq_base": 1000000.0}
