"""glm4moe (src/models/glm4-moe.cpp; GLM-4.5, GLM-4.5-Air, GLM-4.6, Solar Open): attention with
Q/K/V biases (separate attn_q/k/v as the converter writes them, or fused attn_qkv), optional
per-head Q/K RMSNorm (the 355B GLM-4.5), partial NEOX RoPE (rope.dimension_count, half the head),
scale 1/sqrt(head); x += attn(norm(x)); then post_attention_norm feeds the FFN: the first
leading_dense_block_count layers dense SwiGLU, the others build_moe_ffn (sigmoid gating by
default, exp_probs_b selection bias, expert groups when set, expert_weights_norm /
expert_weights_scale) plus the shared experts (ffn_*_shexp, ungated); x += ffn.

NextN/MTP blocks (nextn_predict_layers, stored after the trunk in the published files) are not
run, as in llama.cpp's decoder graph. The M-RoPE variant (rope.dimension_sections) is refused."""
from __future__ import annotations

from ..errors import ModelError
from ..hparams import (GATING_NONE, GATING_SIGMOID, GATING_SOFTMAX, ROPE_NEOX, MetaReader,
                       drop_nextn_layers, load_common)
from . import register
from .base import Arch, TensorSpec
from .glm4 import qkv_specs


@register
class Glm4Moe(Arch):
    name = "glm4moe"

    @classmethod
    def load_hparams(cls, md):
        hp = load_common(md, cls.name)
        n_layer_all = hp.n_layer
        drop_nextn_layers(hp, md)
        hp.rope_type = ROPE_NEOX
        m = MetaReader(md, cls.name)
        sec = m.get("rope.dimension_sections")
        if sec is not None and any(int(v) for v in list(sec)):
            raise ModelError("glm4moe: M-RoPE (rope.dimension_sections) is not supported")
        if hp.n_embd_head_k != hp.n_embd_head_v:
            raise ModelError("glm4moe: key_length and value_length must be equal")
        if hp.n_expert == 0 or hp.n_expert_used == 0:
            raise ModelError("glm4moe: n_expert and n_expert_used must be > 0")
        ff = m.per_layer("expert_feed_forward_length", n_layer_all, 0)[:hp.n_layer]
        hp.n_layer_dense_lead = int(m.get("leading_dense_block_count", 0))
        moe_ff = {int(f) for il, f in enumerate(ff) if il >= hp.n_layer_dense_lead}
        if len(moe_ff) > 1:
            raise ModelError("glm4moe: per-layer expert_feed_forward_length values that differ "
                             "are not supported")
        f = moe_ff.pop() if moe_ff else int(ff[0] or 0)
        hp.n_ff_exp = f if f else hp.n_ff[0] // hp.n_expert_used
        hp.n_expert_shared = int(m.get("expert_shared_count", required=True))
        hp.n_ff_shexp = hp.n_ff_exp * hp.n_expert_shared
        hp.expert_weights_scale = float(m.get("expert_weights_scale", 0.0))
        hp.expert_weights_norm = bool(m.get("expert_weights_norm", False))
        gating = int(m.get("expert_gating_func", GATING_NONE)) or GATING_SIGMOID
        if gating not in (GATING_SOFTMAX, GATING_SIGMOID):
            raise ModelError(f"glm4moe: expert_gating_func {gating} is not supported "
                             "(softmax = 1, sigmoid = 2)")
        hp.expert_gating_func = gating
        hp.n_expert_groups = int(m.get("expert_group_count", 0))
        hp.n_group_used = int(m.get("expert_group_used_count", 0))
        if hp.n_expert_groups >= hp.n_expert or (hp.n_expert_groups > 1 and (
                hp.n_expert % hp.n_expert_groups or
                not 0 < hp.n_group_used < hp.n_expert_groups)):
            raise ModelError(f"glm4moe: bad expert groups ({hp.n_expert_groups} groups, "
                             f"{hp.n_group_used} used, {hp.n_expert} experts)")
        return hp

    @classmethod
    def tensor_specs(cls, hp):
        e, hk = hp.n_embd, hp.n_embd_head_k
        qd = hp.n_head * hk
        specs = cls.io_specs(hp)
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            specs += [TensorSpec(p + "attn_norm.weight", (e,)), *qkv_specs(p, hp),
                      TensorSpec(p + "attn_output.weight", (e, qd)),
                      TensorSpec(p + "attn_q_norm.weight", (hk,), required=False),
                      TensorSpec(p + "attn_k_norm.weight", (hk,), required=False),
                      TensorSpec(p + "post_attention_norm.weight", (e,))]
            if il < hp.n_layer_dense_lead:
                f = hp.n_ff[il]
                specs += [TensorSpec(p + "ffn_gate.weight", (f, e)),
                          TensorSpec(p + "ffn_down.weight", (e, f)),
                          TensorSpec(p + "ffn_up.weight", (f, e))]
                continue
            x, f, fs = hp.n_expert, hp.n_ff_exp, hp.n_ff_shexp
            specs += [TensorSpec(p + "ffn_gate_inp.weight", (x, e)),
                      TensorSpec(p + "exp_probs_b.bias", (x,)),
                      TensorSpec(p + "ffn_gate_exps.weight", (x, f, e)),
                      TensorSpec(p + "ffn_down_exps.weight", (x, e, f)),
                      TensorSpec(p + "ffn_up_exps.weight", (x, f, e))]
            if hp.n_expert_shared:
                specs += [TensorSpec(p + "ffn_gate_shexp.weight", (fs, e)),
                          TensorSpec(p + "ffn_down_shexp.weight", (e, fs)),
                          TensorSpec(p + "ffn_up_shexp.weight", (fs, e))]
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import ffn_swiglu, output, self_attention
        from .deepseek2 import routed_experts, shared_experts
        x = g.embed(w.token_embd)
        for il, L in enumerate(w.layers):
            if L.attn_qkv is None and (L.attn_q is None or L.attn_k is None or L.attn_v is None):
                raise ModelError(f"glm4moe: layer {il} has neither attn_qkv nor attn_q/k/v")
            a = self_attention(g, L, hp, il, g.rms_norm(x, L.attn_norm),
                               qk_norm=L.attn_q_norm is not None and L.attn_k_norm is not None)
            if il == hp.n_layer - 1:
                x, a = g.select_outputs(x), g.select_outputs(a)
            x = g.add(a, x)
            h = g.rms_norm(x, L.post_attention_norm)
            if il < hp.n_layer_dense_lead:
                f = ffn_swiglu(g, L, h)
            else:
                f = routed_experts(g, L, hp, h)
                if L.ffn_gate_shexp is not None:
                    f = g.add(f, shared_experts(g, L, h))
            x = g.cvec_add(g.add(f, x), il)
        return output(g, w, hp, x)

    @classmethod
    def tiny_optional(cls, hp):
        """The converter's separate attn_q/k/v with biases, and the 355B model's Q/K norms."""
        return {f"blk.{il}.{n}" for il in range(hp.n_layer)
                for n in ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_q.bias",
                          "attn_k.bias", "attn_v.bias", "attn_q_norm.weight",
                          "attn_k_norm.weight")}

    @classmethod
    def tiny(cls):
        return {"context_length": 512, "embedding_length": 64, "block_count": 3,
                "leading_dense_block_count": 1, "feed_forward_length": 96,
                "expert_feed_forward_length": 32, "expert_count": 8, "expert_used_count": 2,
                "expert_shared_count": 1, "expert_weights_scale": 1.5,
                "expert_weights_norm": True, "expert_gating_func": 2,
                "attention.head_count": 4, "attention.head_count_kv": 2,
                "attention.key_length": 32, "attention.value_length": 32,
                "attention.layer_norm_rms_epsilon": 1e-5, "rope.freq_base": 1000000.0,
                "rope.dimension_count": 16}
