"""glm4 (src/models/glm4.cpp; GLM-4-0414, GLM-Z1): fused QKV with bias (attn_qkv; separate
attn_q/k/v also load, as create_tensor_qkv), partial RoPE (rope.dimension_count, half the head
in the published files) of the NORM type, RMSNorm after attention and after the FFN
(post_attention_norm, post_ffw_norm) before each residual add, fused gate|up FFN (ffn_up [2 n_ff,
n_embd], ggml_swiglu). The multimodal M-RoPE variant (rope.dimension_sections set) and NextN/MTP
layers (nextn_predict_layers) are refused with an error."""
from ..errors import ModelError
from ..hparams import ROPE_NORM, load_common
from . import register
from .base import Arch, TensorSpec


@register
class Glm4(Arch):
    name = "glm4"

    @classmethod
    def load_hparams(cls, md):
        hp = load_common(md, cls.name)
        hp.rope_type = ROPE_NORM
        sec = md.get("glm4.rope.dimension_sections")
        if sec is not None and any(int(v) for v in list(sec)):
            raise ModelError("glm4: M-RoPE (rope.dimension_sections, the vision variant) is not "
                             "supported")
        if int(md.get("glm4.nextn_predict_layers", 0) or 0):
            raise ModelError("glm4: NextN/MTP layers (nextn_predict_layers > 0) are not supported")
        return hp

    @classmethod
    def tensor_specs(cls, hp):
        e, f = hp.n_embd, hp.n_ff[0]
        specs = cls.io_specs(hp)
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            specs += [TensorSpec(p + "attn_norm.weight", (e,)), *qkv_specs(p, hp),
                      TensorSpec(p + "attn_output.weight", (e, hp.n_head * hp.n_embd_head_v)),
                      TensorSpec(p + "post_attention_norm.weight", (e,)),
                      TensorSpec(p + "ffn_norm.weight", (e,)),
                      TensorSpec(p + "ffn_down.weight", (e, f)),
                      TensorSpec(p + "ffn_up.weight", (2 * f, e)),
                      TensorSpec(p + "post_ffw_norm.weight", (e,))]
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import glm4_decoder
        for il, L in enumerate(w.layers):
            if L.attn_qkv is None and (L.attn_q is None or L.attn_k is None or L.attn_v is None):
                raise ModelError(f"glm4: layer {il} has neither attn_qkv nor attn_q/k/v")
        return glm4_decoder(g, w, hp)

    @classmethod
    def tiny_optional(cls, hp):
        """GLM-4-0414's converted files: separate attn_q/k/v with biases (the archsupport model
        covers the fused attn_qkv layout)."""
        return {f"blk.{il}.attn_{x}.{s}" for il in range(hp.n_layer) for x in "qkv"
                for s in ("weight", "bias")}

    @classmethod
    def tiny(cls):
        return {"context_length": 512, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 96, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.layer_norm_rms_epsilon": 1e-5,
                "rope.freq_base": 10000.0, "rope.dimension_count": 8}


def qkv_specs(p: str, hp) -> list:
    """A GLM-4 layer's Q/K/V: fused attn_qkv or separate attn_q/k/v, each with optional biases
    (llama.cpp loads whichever the file has)."""
    e = hp.n_embd
    qd, kd, vd = hp.n_head * hp.n_embd_head_k, hp.n_embd_k_gqa, hp.n_embd_v_gqa
    return [TensorSpec(p + "attn_qkv.weight", (qd + kd + vd, e), required=False),
            TensorSpec(p + "attn_qkv.bias", (qd + kd + vd,), required=False),
            TensorSpec(p + "attn_q.weight", (qd, e), required=False),
            TensorSpec(p + "attn_k.weight", (kd, e), required=False),
            TensorSpec(p + "attn_v.weight", (vd, e), required=False),
            TensorSpec(p + "attn_q.bias", (qd,), required=False),
            TensorSpec(p + "attn_k.bias", (kd,), required=False),
            TensorSpec(p + "attn_v.bias", (vd,), required=False)]
