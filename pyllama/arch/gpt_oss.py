"""gpt-oss (general.architecture "gpt-oss"; src/models/openai-moe.cpp): attention with Q/K/V/O
biases and per-head attention sinks, sliding-window attention on every other layer (pattern 2:
even layers SWA, window attention.sliding_window), NEOX RoPE with the model's YaRN scaling, MoE
with biased router and experts, softmax over the selected experts' logits, ggml_swiglu_oai.
Attention sinks run llama.cpp's non-flash arithmetic (numpy; with -fa the attention arithmetic
is not llama.cpp's flash kernel)."""
from ..errors import ModelError
from ..hparams import ROPE_NEOX, SWA_STANDARD, MetaReader, load_common, load_swa_pattern
from . import register
from .base import Arch, TensorSpec


@register
class GptOss(Arch):
    name = "gpt-oss"

    @classmethod
    def load_hparams(cls, md):
        hp = load_common(md, cls.name)
        hp.rope_type = ROPE_NEOX
        m = MetaReader(md, cls.name)
        hp.n_ff_exp = int(m.get("expert_feed_forward_length", required=True))
        hp.n_swa = int(m.get("attention.sliding_window", required=True))
        hp.swa_type = SWA_STANDARD
        load_swa_pattern(hp, md, 2)
        hp.rope_freq_base_train_swa = float(m.get("rope.freq_base_swa", hp.rope_freq_base_train))
        hp.rope_freq_scale_train_swa = hp.rope_freq_scale_train
        if hp.n_expert == 0 or hp.n_expert_used == 0:
            raise ModelError("gpt-oss: expert_count and expert_used_count must be > 0")
        return hp

    @classmethod
    def tensor_specs(cls, hp):
        e, x, f = hp.n_embd, hp.n_expert, hp.n_ff_exp
        qd, kd = hp.n_head * hp.n_rot, hp.n_head_kv * hp.n_rot
        specs = [TensorSpec("token_embd.weight", (hp.n_vocab, e)),
                 TensorSpec("output_norm.weight", (e,)),
                 TensorSpec("output.weight", (hp.n_vocab, e))]
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            specs += [TensorSpec(p + "attn_norm.weight", (e,)),
                      TensorSpec(p + "post_attention_norm.weight", (e,)),
                      TensorSpec(p + "attn_q.weight", (qd, e)),
                      TensorSpec(p + "attn_k.weight", (kd, e)),
                      TensorSpec(p + "attn_v.weight", (kd, e)),
                      TensorSpec(p + "attn_q.bias", (qd,), required=False),
                      TensorSpec(p + "attn_k.bias", (kd,), required=False),
                      TensorSpec(p + "attn_v.bias", (kd,), required=False),
                      TensorSpec(p + "attn_output.weight", (e, qd)),
                      TensorSpec(p + "attn_output.bias", (e,)),
                      TensorSpec(p + "attn_sinks.weight", (hp.n_head,)),
                      TensorSpec(p + "ffn_gate_inp.weight", (x, e)),
                      TensorSpec(p + "ffn_gate_inp.bias", (x,)),
                      TensorSpec(p + "ffn_gate_exps.weight", (x, f, e)),
                      TensorSpec(p + "ffn_up_exps.weight", (x, f, e)),
                      TensorSpec(p + "ffn_down_exps.weight", (x, e, f)),
                      TensorSpec(p + "ffn_gate_exps.bias", (x, f)),
                      TensorSpec(p + "ffn_up_exps.bias", (x, f)),
                      TensorSpec(p + "ffn_down_exps.bias", (x, e))]
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import oai_decoder
        return oai_decoder(g, w, hp)

    @classmethod
    def tiny(cls):
        return {"context_length": 512, "embedding_length": 64, "block_count": 4,
                "feed_forward_length": 96, "expert_feed_forward_length": 32,
                "expert_count": 8, "expert_used_count": 2, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.key_length": 32,
                "attention.value_length": 32, "attention.layer_norm_rms_epsilon": 1e-5,
                "rope.freq_base": 150000.0, "attention.sliding_window": 16}
