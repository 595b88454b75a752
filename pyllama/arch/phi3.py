"""phi3 (src/models/phi3.cpp; Phi-3, Phi-3.5, Phi-4): fused QKV (attn_qkv, as
convert_hf_to_gguf writes every Phi-3/4), fused gate|up FFN, NEOX RoPE with LongRoPE
(rope_factors_long / rope_factors_short: the long set when the context's n_ctx_seq exceeds rope.scaling.original_context_length,
rope.scaling.attn_factor on cos/sin). llama.cpp disables Phi's sliding window (it warns and
attends over the whole context); so does pyllama."""
from ..hparams import ROPE_NEOX, SWA_NONE
from ..log import get_logger
from . import register
from .base import Arch, TensorSpec

log = get_logger("arch")


@register
class Phi3(Arch):
    name = "phi3"

    @classmethod
    def load_hparams(cls, md):
        from ..hparams import load_common
        hp = load_common(md, cls.name)
        hp.rope_type = ROPE_NEOX
        if int(md.get("phi3.attention.sliding_window", 0) or 0) > 0:
            log.warning("phi3: Phi SWA is currently disabled - results might be suboptimal "
                        "(as llama.cpp)")
        hp.swa_type, hp.n_swa = SWA_NONE, 0
        return hp

    @classmethod
    def tensor_specs(cls, hp):
        e, f = hp.n_embd, hp.n_ff[0]
        qd, kd = hp.n_head * hp.n_embd_head_k, hp.n_embd_k_gqa
        specs = cls.io_specs(hp)
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            specs += [TensorSpec(p + "attn_norm.weight", (e,)),
                      TensorSpec(p + "attn_qkv.weight", (qd + 2 * kd, e)),
                      TensorSpec(p + "attn_output.weight", (e, qd)),
                      TensorSpec(p + "ffn_norm.weight", (e,)),
                      TensorSpec(p + "ffn_down.weight", (e, f)),
                      TensorSpec(p + "ffn_up.weight", (2 * f, e))]
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import phi3_decoder
        return phi3_decoder(g, w, hp)

    @classmethod
    def tiny(cls):
        return {"context_length": 512, "embedding_length": 64, "block_count": 2,
                "feed_forward_length": 96, "attention.head_count": 4,
                "attention.head_count_kv": 4, "attention.layer_norm_rms_epsilon": 1e-5,
                "rope.freq_base": 10000.0}
