"""llama4 (src/models/llama4.cpp, build_moe_ffn in src/llama-graph.cpp; Llama 4 Scout / Maverick
text models).

- Chunked attention, iSWA: llama.cpp sets swa_type CHUNKED with a fixed chunk of 8192 whatever
  attention.sliding_window holds (a query at p sees the keys of its own chunk, p // 8192 * 8192
  and on); pattern 4 (sliding_window_pattern may override): layers il % 4 < 3 chunked, every 4th
  global. The chunked layers' RoPE base is rope.freq_base_swa when present.
- Every 4th layer ((il + 1) % 4 == 0, the global ones) has no RoPE; there Q is multiplied by the
  attention temperature log(floor((pos + 1) / 8192) + 1) * 0.1 + 1. On the RoPE layers Q and K
  get a weightless RMSNorm after RoPE (Llama4TextL2Norm) unless the model has 128 experts
  (Maverick, llama.cpp's LLM_TYPE_17B_128E: use_kq_norm false).
- NORM RoPE with rope_freqs (Llama 3 style factors) when the file has them.
- FFN: layer il is MoE when (il + 1) % interleave_moe_layer_step == 0, else a dense SwiGLU of
  feed_forward_length. MoE: top expert_used_count experts by router logit, weights sigmoid(logit)
  (not normalised), each expert's input multiplied by its weight BEFORE the expert FFN
  (weight_before_ffn), the experts' outputs summed in selection order, plus a shared SwiGLU expert
  of width expert_feed_forward_length.
- A file with attention.sliding_window = 0 (all layers global) is refused: llama.cpp 0c1e570
  builds it without RoPE on its last layer and an attention temperature it never set, and aborts
  at the first decode (GGML_ASSERT(f_attn_temp_scale != 0.0f) in llm_graph_input_attn_temp).
"""
from ..errors import ModelError
from ..hparams import ROPE_NORM, SWA_CHUNKED, MetaReader, load_common, load_swa_pattern
from . import register
from .base import Arch, TensorSpec
from .blocks import ffn_swiglu
from .glm4 import qkv_specs

CHUNK = 8192                 # llama.cpp's n_swa for llama4 (attention_chunk_size)
NO_ROPE_LAYER_STEP = 4       # llama_hparams default n_no_rope_layer_step
TEMP_SCALE, TEMP_FLOOR, TEMP_OFFSET = 0.1, 8192, 1.0


@register
class Llama4(Arch):
    name = "llama4"

    @classmethod
    def load_hparams(cls, md):
        hp = load_common(md, cls.name)
        hp.rope_type = ROPE_NORM
        m = MetaReader(md, cls.name)
        ff_exp = m.per_layer("expert_feed_forward_length", hp.n_layer, required=True)
        hp.n_ff_exp = hp.n_ff_shexp = int(ff_exp[0])
        hp.n_moe_layer_step = int(m.get("interleave_moe_layer_step", required=True))
        if m.get("attention.sliding_window") is not None and \
                int(m.get("attention.sliding_window")) == 0:
            raise ModelError("llama4: attention.sliding_window 0 (no chunked attention) is not "
                             "supported (llama.cpp 0c1e570 aborts on such a model: its global "
                             "last layer needs an attention temperature that is never set)")
        if hp.n_expert == 0:
            raise ModelError("llama4 model cannot have zero experts")
        if hp.n_embd_head_k != hp.n_embd_head_v or hp.n_rot != hp.n_embd_head_k:
            raise ModelError("llama4: key, value and RoPE head sizes must be equal")
        hp.swa_type, hp.n_swa = SWA_CHUNKED, CHUNK
        hp.f_attn_temp_scale, hp.n_attn_temp_floor_scale = TEMP_SCALE, TEMP_FLOOR
        hp.f_attn_temp_offset = TEMP_OFFSET
        load_swa_pattern(hp, md, 4)
        hp.rope_freq_base_train_swa = float(m.get("rope.freq_base_swa", hp.rope_freq_base_train))
        hp.rope_freq_scale_train_swa = hp.rope_freq_scale_train
        hp.use_kq_norm = hp.n_expert != 128
        return hp

    @classmethod
    def is_moe_layer(cls, hp, il: int) -> bool:
        return hp.n_moe_layer_step > 0 and (il + 1) % hp.n_moe_layer_step == 0

    @classmethod
    def tensor_specs(cls, hp):
        e, x, f = hp.n_embd, hp.n_expert, hp.n_ff_exp
        specs = cls.io_specs(hp) + [TensorSpec("rope_freqs.weight", (hp.n_rot // 2,),
                                               required=False)]
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            specs += [TensorSpec(p + "attn_norm.weight", (e,)), *qkv_specs(p, hp),
                      TensorSpec(p + "attn_output.weight", (e, hp.n_head * hp.n_embd_head_k)),
                      TensorSpec(p + "ffn_norm.weight", (e,))]
            if cls.is_moe_layer(hp, il):
                specs += [TensorSpec(p + "ffn_gate_inp.weight", (x, e)),
                          TensorSpec(p + "ffn_gate_exps.weight", (x, f, e)),
                          TensorSpec(p + "ffn_down_exps.weight", (x, e, f)),
                          TensorSpec(p + "ffn_up_exps.weight", (x, f, e)),
                          TensorSpec(p + "ffn_gate_shexp.weight", (f, e)),
                          TensorSpec(p + "ffn_down_shexp.weight", (e, f)),
                          TensorSpec(p + "ffn_up_shexp.weight", (f, e))]
            else:
                specs += cls.ffn_specs(hp, il)[1:]
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        for il, L in enumerate(w.layers):
            if L.attn_qkv is None and (L.attn_q is None or L.attn_k is None or L.attn_v is None):
                raise ModelError(f"llama4: layer {il} has neither attn_qkv nor attn_q/k/v")
        return llama4_decoder(g, w, hp, cls.is_moe_layer)

    @classmethod
    def tiny_optional(cls, hp):
        """Separate attn_q/k/v, as convert_hf_to_gguf writes Llama 4 (no biases)."""
        return {f"blk.{il}.attn_{x}.weight" for il in range(hp.n_layer) for x in "qkv"}

    @classmethod
    def tiny(cls):
        """4 layers: 0-2 chunked with RoPE and the Q/K norm, 3 global without RoPE; layers 1
        and 3 MoE (8 experts, top 2), 0 and 2 dense."""
        return {"context_length": 512, "embedding_length": 64, "block_count": 4,
                "feed_forward_length": 96, "expert_feed_forward_length": 32,
                "expert_count": 8, "expert_used_count": 2, "interleave_moe_layer_step": 2,
                "attention.head_count": 4, "attention.head_count_kv": 2,
                "attention.layer_norm_rms_epsilon": 1e-5, "rope.freq_base": 500000.0}


def llama4_decoder(g, w, hp, is_moe_layer):
    """The llama4 graph (llama_model_llama4::graph): pre-norm attention and FFN as above."""
    from .blocks import output, self_attention
    temp = g.attn_temperature(hp.f_attn_temp_scale, hp.n_attn_temp_floor_scale,
                              hp.f_attn_temp_offset)
    x = g.embed(w.token_embd)
    for il, L in enumerate(w.layers):
        rope = (il + 1) % NO_ROPE_LAYER_STEP != 0
        a = self_attention(g, L, hp, il, g.rms_norm(x, L.attn_norm), rope=rope,
                           kq_l2_norm=rope and hp.use_kq_norm, q_mul=None if rope else temp,
                           kq_scale=hp.f_attention_scale or None)
        if il == hp.n_layer - 1:
            x, a = g.select_outputs(x), g.select_outputs(a)
        x = g.add(a, x)
        h = g.rms_norm(x, L.ffn_norm)
        f = moe_weighted_input(g, L, hp, h) if is_moe_layer(hp, il) else ffn_swiglu(g, L, h)
        x = g.cvec_add(g.add(f, x), il)
    return output(g, w, hp, x)


def moe_weighted_input(g, L, hp, x):
    """build_moe_ffn for llama4 plus the shared expert: ids = top-k of the router logits,
    weights = sigmoid(logits)[ids]; each selected expert's SwiGLU FFN runs on x * weight; the
    expert outputs are summed in slot order, then the shared expert's FFN(x) is added.
    x [n, n_embd] -> [n, n_embd]."""
    n = x.shape[0]
    logits = g.matmul(L.ffn_gate_inp, x)                              # [n, n_expert]
    ids = g.top_k(logits, hp.n_expert_used)                           # [n, k]
    wts = g.expert_weights(g.sigmoid(logits), ids, False, hp.expert_weights_scale)
    xw = g.mul(x.reshape(n, 1, x.shape[-1]), wts[..., None])          # [n, k, n_embd]
    up = g.mul_mat_id(L.ffn_up_exps, xw, ids)
    gate = g.mul_mat_id(L.ffn_gate_exps, xw, ids)
    down = g.mul_mat_id(L.ffn_down_exps, g.swiglu(gate, up), ids)    # [n, k, n_embd]
    moe = g.sum_experts(down)
    return g.add(moe, ffn_swiglu(g, L, x, "_shexp"))
