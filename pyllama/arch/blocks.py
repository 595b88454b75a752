"""Building blocks shared by architecture files (they call only the Graph facade)."""
from __future__ import annotations

import numpy as np

from ..hparams import HParams


def self_attention(g, L, hp: HParams, il: int, h: np.ndarray, *, qk_norm: bool | str = False,
                   q_scale: float | None = None, kq_scale: float | None = None,
                   softcap: float = 0.0, rope: bool = True,
                   q_mul: np.ndarray | None = None, sinks=None,
                   kq_l2_norm: bool = False) -> np.ndarray:
    """Q/K/V projections (+bias), optional Q/K RMSNorm, RoPE, attention, output proj.
    h [n_tokens, n_embd] -> [n_tokens, n_embd].

    qk_norm: True per head (qwen3, gemma3), "full" over the whole Q / K projection (olmo2);
    q_scale: multiply Q after RoPE (Gemma's f_attention_scale, then kq_scale = 1);
    kq_scale: the attention scale (default 1/sqrt(head_dim)); rope: False for a layer without
    RoPE (smollm3); q_mul [n_tokens, 1, 1]: multiply Q after RoPE (mistral3's attention
    temperature); kq_l2_norm: Q and K RMS-normalised per head without a weight after RoPE
    (llama4's Llama4TextL2Norm, ggml_rms_norm).
    """
    n = h.shape[0]
    if L.attn_qkv is not None:          # fused [q | k | v] rows (phi3): one matmul, then views
        qkv = g.matmul(L.attn_qkv, h, L.attn_qkv_b)
        qd, kd = hp.n_head * hp.n_embd_head_k, hp.n_embd_k_gqa
        q, k = np.ascontiguousarray(qkv[:, :qd]), np.ascontiguousarray(qkv[:, qd:qd + kd])
        v = np.ascontiguousarray(qkv[:, qd + kd:])
    else:
        q, k, v = g.matmuls((L.attn_q, L.attn_k, L.attn_v), h, (L.attn_q_b, L.attn_k_b, L.attn_v_b))
    if qk_norm == "full":
        q = g.rms_norm(q, L.attn_q_norm)
        k = g.rms_norm(k, L.attn_k_norm)
    q = q.reshape(n, hp.n_head, hp.n_embd_head_k)
    k = k.reshape(n, hp.n_head_kv, hp.n_embd_head_k)
    v = v.reshape(n, hp.n_head_kv, hp.n_embd_head_v)
    if qk_norm is True:
        q = g.rms_norm(q, L.attn_q_norm)
        k = g.rms_norm(k, L.attn_k_norm)
    if rope:
        q = g.rope(q, il)
        k = g.rope(k, il)
    if kq_l2_norm:
        q = g.rms_norm(q, None)
        k = g.rms_norm(k, None)
    if q_mul is not None:
        q = g.mul(q, q_mul)
    if q_scale is not None:
        q = g.scale(q, q_scale)
    o = g.attention(il, q, k, v, scale=kq_scale, softcap=softcap, sinks=sinks)
    return g.matmul(L.attn_output, o, L.attn_output_b)


def ffn_swiglu(g, L, x: np.ndarray, sfx: str = "") -> np.ndarray:
    """down(silu(gate x) * up x) with L.ffn_{gate,up,down}<sfx> (sfx "_shexp": llama4's shared
    expert)."""
    gate, up, down = (getattr(L, f"ffn_{t}{sfx}") for t in ("gate", "up", "down"))
    return g.matmul(down, g.swiglu(*g.matmuls((gate, up), x)))


def ffn_geglu(g, L, x: np.ndarray) -> np.ndarray:
    return g.matmul(L.ffn_down, g.geglu(*g.matmuls((L.ffn_gate, L.ffn_up), x)))


def moe_ffn(g, L, hp: HParams, x: np.ndarray, *, norm_w: bool = True,
            shexp: bool = False) -> np.ndarray:
    """build_moe_ffn with softmax gating and SiLU experts (llama/Mixtral, qwen3moe): router
    logits -> softmax -> top n_expert_used -> weights (normalised when norm_w, times
    expert_weights_scale); each token's experts' SwiGLU FFNs weighted and summed; shexp: plus
    the gated shared expert (qwen2moe).
    x [n, n_embd] -> [n, n_embd]."""
    out = g.moe_softmax_swiglu(L.ffn_gate_inp, L.ffn_gate_exps, L.ffn_up_exps, L.ffn_down_exps,
                               x, hp.n_expert_used, norm_w, hp.expert_weights_scale)
    return g.add(out, shared_expert(g, L, x)) if shexp else out


def moe_ffn_oai(g, L, hp: HParams, x: np.ndarray) -> np.ndarray:
    """gpt-oss's build_moe_ffn: biased router logits, top n_expert_used by logit, their softmax
    as weights (SOFTMAX_WEIGHT, not normalised again), biased expert matmuls (ggml_add_id) and
    ggml_swiglu_oai (alpha 1.702, limit 7). x [n, n_embd] -> [n, n_embd]."""
    n = x.shape[0]
    logits = g.matmul(L.ffn_gate_inp, x, L.ffn_gate_inp_b)        # [n, n_expert]
    ids = g.top_k(logits, hp.n_expert_used)
    wts = g.softmax(np.take_along_axis(logits, ids, axis=-1))       # [n, k]
    if hp.expert_weights_scale not in (0.0, 1.0):
        wts = g.scale(wts, hp.expert_weights_scale)
    x3 = x.reshape(n, 1, x.shape[-1])
    up = g.add_id(g.mul_mat_id(L.ffn_up_exps, x3, ids), L.ffn_up_exps_b, ids)
    gate = g.add_id(g.mul_mat_id(L.ffn_gate_exps, x3, ids), L.ffn_gate_exps_b, ids)
    act = g.swiglu_oai(gate, up, 1.702, 7.0)
    down = g.add_id(g.mul_mat_id(L.ffn_down_exps, act, ids), L.ffn_down_exps_b, ids)
    return g.sum_experts(g.mul(down, wts[..., None]))


def oai_decoder(g, w, hp: HParams) -> np.ndarray:
    """gpt-oss (openai-moe.cpp): pre-norm attention with Q/K/V/O biases and sinks, alternating
    SWA; the post-attention norm feeds the MoE; the output rows are selected after the last
    layer (not before its FFN)."""
    x = g.embed(w.token_embd)
    for il, L in enumerate(w.layers):
        a = self_attention(g, L, hp, il, g.rms_norm(x, L.attn_norm), sinks=L.attn_sinks)
        x = g.add(a, x)
        x = g.add(moe_ffn_oai(g, L, hp, g.rms_norm(x, L.post_attention_norm)), x)
        x = g.cvec_add(x, il)
    return output(g, w, hp, g.select_outputs(x))


def shared_expert(g, L, x: np.ndarray) -> np.ndarray:
    """qwen2moe's shared expert: a SwiGLU FFN (ffn_*_shexp) times the gate silu(s) / s, s =
    ffn_gate_inp_shexp . x (one value per token). x [n, n_embd] -> [n, n_embd]."""
    s = g.matmul(L.ffn_gate_inp_shexp, x)                          # [n, 1]
    y = g.matmul(L.ffn_down_shexp, g.swiglu(g.matmul(L.ffn_gate_shexp, x),
                                             g.matmul(L.ffn_up_shexp, x)))
    return g.mul(y, g.div(g.silu(s), s))


def output(g, w, hp: HParams, x: np.ndarray, lora: bool = True) -> np.ndarray:
    """Final norm and the vocabulary projection (tied to token_embd when output is absent);
    lora=False: a plain ggml_mul_mat (deepseek2)."""
    x = g.rms_norm(x, w.output_norm)
    g.result_norm(x)          # llama.cpp's t_embd (the embeddings of Context(embeddings=True))
    if not g.want_logits:
        return None
    logits = g.matmul(w.output if w.output is not None else w.token_embd, x, w.output_b,
                      lora=lora)
    if hp.f_final_logit_softcapping > 0:
        logits = g.softcap(logits, hp.f_final_logit_softcapping)
    if hp.f_logit_scale:                                     # granite: logits / logit_scale
        logits = g.scale(logits, float(np.float32(1) / np.float32(hp.f_logit_scale)))
    return logits


def pre_norm_decoder(g, w, hp: HParams, *, qk_norm: bool = False, no_rope_step: int = 0,
                     residual_scale: float = 0.0, q_mul: np.ndarray | None = None,
                     moe_norm_w: bool = True, shexp: bool = False) -> np.ndarray:
    """The Llama-style stack: x += attn(norm(x)); x += ffn(norm(x)) (llama, qwen2, qwen3; the
    FFN is build_moe_ffn's when the model has experts: Mixtral-style llama, qwen3moe).
    no_rope_step: every no_rope_step-th layer has no RoPE (smollm3); residual_scale (granite):
    attention and FFN outputs scaled before their residual adds; f_embedding_scale (granite)
    scales the embeddings."""
    x = g.embed(w.token_embd)
    if hp.f_embedding_scale:
        x = g.scale(x, hp.f_embedding_scale)
    for il, L in enumerate(w.layers):
        rope = not no_rope_step or (il + 1) % no_rope_step != 0
        a = self_attention(g, L, hp, il, g.rms_norm(x, L.attn_norm), qk_norm=qk_norm,
                           kq_scale=hp.f_attention_scale or None, rope=rope, q_mul=q_mul)
        if il == hp.n_layer - 1:
            x, a = g.select_outputs(x), g.select_outputs(a)
        if residual_scale:
            a = g.scale(a, residual_scale)
        x = g.add(x, a)
        h = g.rms_norm(x, L.ffn_norm)
        f = (moe_ffn(g, L, hp, h, norm_w=moe_norm_w, shexp=shexp) if hp.n_expert
             else ffn_swiglu(g, L, h))
        if residual_scale:
            f = g.scale(f, residual_scale)
        x = g.cvec_add(g.add(x, f), il)
    return output(g, w, hp, x)


def phi3_decoder(g, w, hp: HParams) -> np.ndarray:
    """Phi-3/4: the pre-norm stack with fused QKV (attn_qkv) and fused gate|up (ffn_up [2 n_ff,
    n_embd], ggml_swiglu: SiLU of the first half times the second), Q scaled by 1/sqrt(head_dim)
    with kq_scale 1, RoPE with the LongRoPE factors the context picked (hparams)."""
    q_scale = float(np.float32(1) / np.sqrt(np.float32(hp.n_embd_head_k)))
    x = g.embed(w.token_embd)
    for il, L in enumerate(w.layers):
        a = self_attention(g, L, hp, il, g.rms_norm(x, L.attn_norm), q_scale=q_scale,
                           kq_scale=1.0)
        if il == hp.n_layer - 1:
            x, a = g.select_outputs(x), g.select_outputs(a)
        x = g.add(a, x)
        up = g.matmul(L.ffn_up, g.rms_norm(x, L.ffn_norm))
        f = up.shape[1] // 2
        act = g.swiglu(np.ascontiguousarray(up[:, :f]), np.ascontiguousarray(up[:, f:]))
        x = g.cvec_add(g.add(x, g.matmul(L.ffn_down, act)), il)
    return output(g, w, hp, x)


def glm4_decoder(g, w, hp: HParams) -> np.ndarray:
    """GLM-4 (glm4.cpp): x += norm(attn(norm(x))) with the post-attention RMSNorm, then
    x += norm(ffn(norm(x))) with the post-FFN RMSNorm; fused QKV (+bias) and fused gate|up
    (ggml_swiglu: SiLU of the first half times the second); partial NORM RoPE (hparams)."""
    x = g.embed(w.token_embd)
    for il, L in enumerate(w.layers):
        a = self_attention(g, L, hp, il, g.rms_norm(x, L.attn_norm))
        if il == hp.n_layer - 1:
            x, a = g.select_outputs(x), g.select_outputs(a)
        x = g.add(g.rms_norm(a, L.post_attention_norm), x)
        up = g.matmul(L.ffn_up, g.rms_norm(x, L.ffn_norm))
        f = up.shape[1] // 2
        act = g.swiglu(np.ascontiguousarray(up[:, :f]), np.ascontiguousarray(up[:, f:]))
        x = g.add(g.rms_norm(g.matmul(L.ffn_down, act), L.post_ffw_norm), x)
    return output(g, w, hp, x)


def post_norm_decoder(g, w, hp: HParams) -> np.ndarray:
    """OLMo 2: no pre-norms; x += norm(attn(x)) with full-width Q/K norms; x += norm(ffn(x))."""
    x = g.embed(w.token_embd)
    for il, L in enumerate(w.layers):
        a = self_attention(g, L, hp, il, x, qk_norm="full")
        if il == hp.n_layer - 1:
            x, a = g.select_outputs(x), g.select_outputs(a)
        x = g.add(x, g.rms_norm(a, L.post_attention_norm))
        x = g.cvec_add(g.add(g.rms_norm(ffn_swiglu(g, L, x), L.post_ffw_norm), x), il)
    return output(g, w, hp, x)


def sandwich_decoder(g, w, hp: HParams, *, qk_norm: bool, attn_softcap: float) -> np.ndarray:
    """Gemma 2/3: scaled embeddings, pre and post norms around attention and the GELU FFN."""
    x = g.scale(g.embed(w.token_embd), hp.f_embedding_scale)
    for il, L in enumerate(w.layers):
        a = self_attention(g, L, hp, il, g.rms_norm(x, L.attn_norm), qk_norm=qk_norm,
                           q_scale=hp.f_attention_scale, kq_scale=1.0, softcap=attn_softcap)
        if il == hp.n_layer - 1:
            x, a = g.select_outputs(x), g.select_outputs(a)
        x = g.add(x, g.rms_norm(a, L.post_attention_norm))
        y = ffn_geglu(g, L, g.rms_norm(x, L.ffn_norm))
        x = g.cvec_add(g.add(x, g.rms_norm(y, L.post_ffw_norm)), il)
    return output(g, w, hp, x)
