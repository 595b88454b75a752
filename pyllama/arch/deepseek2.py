"""deepseek2 (src/models/deepseek2.cpp; DeepSeek-V2 / V2-Lite / V2.5 / V3 / R1, Kimi K2, Mistral
Large 3, GigaChat 3 and the other files with general.architecture "deepseek2").

Multi-head latent attention (MLA): Q from attn_q, or the low-rank attn_q_a -> RMSNorm
(attn_q_a_norm) -> attn_q_b when attention.q_lora_rank > 0; attn_kv_a_mqa gives the compressed
KV (kv_lora_rank values, RMSNorm attn_kv_a_norm) and one shared RoPE key part (n_rot =
rope.dimension_count); each head's Q splits into a no-RoPE part and a RoPE part (NORM RoPE).

- MLA files (attention.key_length_mla / value_length_mla set; attn_k_b and attn_v_b): llama.cpp's
  absorbed form. q_nope goes through attn_k_b per head (into the kv_lora_rank space), the cache
  holds one "head" per token, K = [kv_cmpr | k_pe] (key_length = kv_lora_rank + n_rot) and V =
  kv_cmpr (value_length = kv_lora_rank); attention is MQA over it, and attn_v_b decompresses each
  head's output to value_length_mla before attn_output. As in llama.cpp the cache stores K
  only and V is a view of it (the first kv_lora_rank values of each K row; KVLayout.v_in_k): no
  V buffer, a V cache type other than K's refused (as llama.cpp), no V rows in state files, no
  Hadamard rotation of a quantized K (llama.cpp's K-only attention input has none), and the KV
  memory is llama.cpp's.
  With flash attention llama.cpp gives attn_v_b the permuted attention output, a non-contiguous
  src1 for more than one token (an F32 attn_v_b then takes ggml_vec_dot_f32, not tinyBLAS).
- legacy files (attn_kv_b, no *_mla keys): attn_kv_b decompresses K_nope and V for every head
  and attention is plain MHA with K = [k_nope | k_pe] (k_pe shared by the heads).

The attention scale is llama.cpp's YaRN pre-scaling: mscale = attn_factor_org * (1 + 0.1 *
yarn_log_multiplier * ln(1 / freq_scale)), kq_scale = mscale^2 / sqrt(key_length_mla), where
attn_factor_org undoes the context's cancellation of ggml's own YaRN factor and the file's
rope.scaling.yarn_log_multiplier (0.1 * mscale_all_dim) is divided by 0.1 on load. Optional
attention temperature tuning (Mistral Large 3: attention.temperature_scale / _length).

FFN: the first leading_dense_block_count layers are dense SwiGLU; the others are build_moe_ffn
with expert_gating_func softmax (V2) or sigmoid (V3) over the router logits, the selection
biased by exp_probs_b when present (V3), expert groups (expert_group_count /
expert_group_used_count: the best groups by the sum of their two largest scores), top
expert_used_count, weights from the unbiased probabilities, normalised when
expert_weights_norm, times expert_weights_scale; plus the shared experts (ffn_*_shexp, width
expert_feed_forward_length * expert_shared_count), added ungated.

LoRA adapters apply where llama.cpp's graph uses build_lora_mm (attn_output, the FFNs, the
router), not to the q / kv projections or the output (plain ggml_mul_mat there). A K-shift rotates
the last n_rot values of each cached K head (k_pe, after kv_cmpr or k_nope), as llama.cpp's
build_graph_shift does (its view starts at n_embd_head_k - n_rot when n_lora_kv > 0).

Experts as separate ffn_gate_exps / ffn_up_exps or fused ffn_gate_up_exps ([gate | up] rows, the
converter's --fuse-gate-up-exps). NextN/MTP blocks (nextn_predict_layers) are not run, as in
llama.cpp's decoder graph. Refused with an error: gating functions other than softmax / sigmoid,
per-layer expert widths that differ.
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import ModelError
from ..hparams import (GATING_NONE, GATING_SIGMOID, GATING_SOFTMAX, ROPE_NORM, MetaReader,
                       drop_nextn_layers, load_common)
from . import register
from .base import Arch, TensorSpec


def _f32(x) -> np.float32:
    return np.float32(x)


def is_mla(hp) -> bool:
    """llama_hparams::is_mla (the absorbed layout: attn_k_b / attn_v_b, the compressed KV
    cached, V a view of K)."""
    return hp.is_mla


def head_k(hp) -> int:
    """n_embd_head_k_mla(): the decompressed per-head K size (qk_nope + qk_rope)."""
    return hp.n_embd_head_k_mla if is_mla(hp) else hp.n_embd_head_k


def head_v(hp) -> int:
    return hp.n_embd_head_v_mla if is_mla(hp) else hp.n_embd_head_v


def kq_scale(hp) -> float:
    """llm_build_deepseek2's kq_scale, in f32 as the C++ computes it (hp: the context's)."""
    one, tenth = _f32(1.0), _f32(0.1)
    fs = _f32(hp.rope_freq_scale_train)
    ln = _f32(math.log(float(one / fs)))
    attn_factor_org = _f32(_f32(hp.yarn_attn_factor) * _f32(one + _f32(tenth * ln)))
    mscale = _f32(attn_factor_org * _f32(one + _f32(_f32(tenth * _f32(hp.rope_yarn_log_mul)) * ln)))
    return float(_f32(_f32(one * mscale) * mscale) / _f32(math.sqrt(float(head_k(hp)))))


@register
class Deepseek2(Arch):
    name = "deepseek2"

    @classmethod
    def load_hparams(cls, md):
        hp = load_common(md, cls.name)
        n_layer_all = hp.n_layer
        drop_nextn_layers(hp, md)
        hp.rope_type = ROPE_NORM
        m = MetaReader(md, cls.name)
        n_vocab = hp.n_vocab
        is_lite = hp.n_layer in (26, 27) or (hp.n_layer == 48 and n_vocab == 128256)
        hp.n_layer_dense_lead = int(m.get("leading_dense_block_count", 0))
        if not is_lite:
            hp.n_lora_q = int(m.get("attention.q_lora_rank", required=True))
        hp.n_lora_kv = int(m.get("attention.kv_lora_rank", required=True))
        k_mla = int(m.get("attention.key_length_mla", 0))
        v_mla = int(m.get("attention.value_length_mla", 0))
        if (k_mla == 0) != (v_mla == 0):
            raise ModelError("deepseek2: attention.key_length_mla and value_length_mla must be "
                             "both set or both absent")
        hp.n_embd_head_k_mla, hp.n_embd_head_v_mla = k_mla, v_mla       # 0: not MLA
        if head_k(hp) - hp.n_rot < 1:
            raise ModelError(f"deepseek2: key length {head_k(hp)} leaves no no-RoPE "
                             f"part beside rope.dimension_count {hp.n_rot}")
        ff = m.per_layer("expert_feed_forward_length", n_layer_all, required=True)[:hp.n_layer]
        moe_ff = {int(f) for il, f in enumerate(ff) if il >= hp.n_layer_dense_lead}
        if len(moe_ff) > 1:
            raise ModelError("deepseek2: per-layer expert_feed_forward_length values that differ "
                             "are not supported")
        hp.n_ff_exp = moe_ff.pop() if moe_ff else int(ff[0])
        hp.n_expert_shared = int(m.get("expert_shared_count", required=True))
        hp.n_ff_shexp = hp.n_ff_exp * hp.n_expert_shared
        hp.expert_weights_scale = float(m.get("expert_weights_scale", 0.0))
        hp.expert_weights_norm = bool(m.get("expert_weights_norm", False))
        gating = int(m.get("expert_gating_func", GATING_NONE))
        if gating == GATING_NONE:        # DeepSeek V2 / V2.5 files written before the key
            gating = (GATING_SIGMOID if hp.n_layer in (47, 48) and n_vocab == 154880
                      else GATING_SOFTMAX)
        if gating not in (GATING_SOFTMAX, GATING_SIGMOID):
            raise ModelError(f"deepseek2: expert_gating_func {gating} is not supported "
                             "(softmax = 1, sigmoid = 2)")
        hp.expert_gating_func = gating
        log_mul = m.get("rope.scaling.yarn_log_multiplier")
        if log_mul is not None:          # [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]: undo the 0.1 factor
            hp.rope_yarn_log_mul = float(_f32(log_mul) / _f32(0.1))
        hp.f_attn_temp_scale = float(m.get("attention.temperature_scale", 0.0))
        hp.n_attn_temp_floor_scale = int(m.get("attention.temperature_length", 0))
        if hp.f_attn_temp_scale != 0.0 and hp.n_attn_temp_floor_scale == 0:
            raise ModelError("deepseek2: attention.temperature_scale needs "
                             "attention.temperature_length")
        hp.n_expert_groups = int(m.get("expert_group_count", 0))
        hp.n_group_used = int(m.get("expert_group_used_count", 0))
        if hp.n_expert:
            if hp.n_expert_groups >= hp.n_expert:
                raise ModelError("deepseek2: expert_group_count must be below expert_count")
            if hp.n_expert_groups > 1 and (hp.n_expert % hp.n_expert_groups or
                                           not 0 < hp.n_group_used < hp.n_expert_groups):
                raise ModelError(f"deepseek2: bad expert groups ({hp.n_expert_groups} groups, "
                                 f"{hp.n_group_used} used, {hp.n_expert} experts)")
        if hp.n_layer_dense_lead < hp.n_layer and (hp.n_expert == 0 or hp.n_expert_used == 0):
            raise ModelError("deepseek2: n_expert and n_expert_used must be > 0")
        return hp

    @classmethod
    def tensor_specs(cls, hp):
        e, h = hp.n_embd, hp.n_head
        dk, dv, rot = head_k(hp), head_v(hp), hp.n_rot
        nope, r, qr = dk - rot, hp.n_lora_kv, hp.n_lora_q
        mla = is_mla(hp)
        specs = cls.io_specs(hp)
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            specs += [TensorSpec(p + "attn_norm.weight", (e,)),
                      TensorSpec(p + "attn_kv_a_norm.weight", (r,)),
                      TensorSpec(p + "attn_kv_a_mqa.weight", (r + rot, e)),
                      TensorSpec(p + "attn_output.weight", (e, h * dv)),
                      TensorSpec(p + "ffn_norm.weight", (e,))]
            if qr > 0:
                specs += [TensorSpec(p + "attn_q_a_norm.weight", (qr,)),
                          TensorSpec(p + "attn_q_a.weight", (qr, e)),
                          TensorSpec(p + "attn_q_b.weight", (h * dk, qr))]
            else:
                specs += [TensorSpec(p + "attn_q.weight", (h * dk, e))]
            if mla:
                specs += [TensorSpec(p + "attn_k_b.weight", (h, r, nope)),
                          TensorSpec(p + "attn_v_b.weight", (h, dv, r))]
            else:
                specs += [TensorSpec(p + "attn_kv_b.weight", (h * (nope + dv), r))]
            if il < hp.n_layer_dense_lead:
                f = hp.n_ff[il]
                specs += [TensorSpec(p + "ffn_gate.weight", (f, e)),
                          TensorSpec(p + "ffn_down.weight", (e, f)),
                          TensorSpec(p + "ffn_up.weight", (f, e))]
            else:
                x, f, fs = hp.n_expert, hp.n_ff_exp, hp.n_ff_shexp
                specs += [TensorSpec(p + "ffn_gate_inp.weight", (x, e)),
                          TensorSpec(p + "exp_probs_b.bias", (x,), required=False),
                          TensorSpec(p + "ffn_gate_up_exps.weight", (x, 2 * f, e),
                                     required=False),
                          TensorSpec(p + "ffn_gate_exps.weight", (x, f, e), required=False),
                          TensorSpec(p + "ffn_up_exps.weight", (x, f, e), required=False),
                          TensorSpec(p + "ffn_down_exps.weight", (x, e, f)),
                          TensorSpec(p + "ffn_gate_shexp.weight", (fs, e)),
                          TensorSpec(p + "ffn_down_shexp.weight", (e, fs)),
                          TensorSpec(p + "ffn_up_shexp.weight", (fs, e))]
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import ffn_swiglu, output
        scale = kq_scale(hp)
        mla = is_mla(hp)
        q_mul = None
        if hp.f_attn_temp_scale != 0.0:
            q_mul = g.attn_temperature(hp.f_attn_temp_scale, hp.n_attn_temp_floor_scale)
        x = g.embed(w.token_embd)
        for il, L in enumerate(w.layers):
            if il >= hp.n_layer_dense_lead and L.ffn_gate_up_exps is None and (
                    L.ffn_gate_exps is None or L.ffn_up_exps is None):
                raise ModelError(f"deepseek2: layer {il} has neither ffn_gate_up_exps nor "
                                 "ffn_gate_exps / ffn_up_exps")
            a = mla_attention(g, L, hp, il, g.rms_norm(x, L.attn_norm), scale, mla, q_mul)
            if il == hp.n_layer - 1:
                x, a = g.select_outputs(x), g.select_outputs(a)
            x = g.add(a, x)
            h = g.rms_norm(x, L.ffn_norm)
            if il < hp.n_layer_dense_lead:
                f = ffn_swiglu(g, L, h)
            else:
                f = g.add(routed_experts(g, L, hp, h), shared_experts(g, L, h))
            x = g.cvec_add(g.add(f, x), il)
        return output(g, w, hp, x, lora=False)          # lm_head: a plain ggml_mul_mat

    @classmethod
    def tiny_optional(cls, hp):
        """DeepSeek V3's expert selection bias (exp_probs_b), with its sigmoid router, and the
        separate gate / up experts (the converter's default)."""
        return {f"blk.{il}.{n}" for il in range(hp.n_layer_dense_lead, hp.n_layer)
                for n in ("exp_probs_b.bias", "ffn_gate_exps.weight", "ffn_up_exps.weight")}

    @classmethod
    def tiny(cls):
        """DeepSeek V3 shaped: q LoRA, absorbed MLA, a dense first layer, sigmoid routing with
        the selection bias and expert groups, YaRN with mscale_all_dim 1."""
        return {"context_length": 512, "embedding_length": 64, "block_count": 3,
                "leading_dense_block_count": 1, "feed_forward_length": 96,
                "expert_feed_forward_length": 32, "expert_count": 8, "expert_used_count": 2,
                "expert_shared_count": 1, "expert_weights_scale": 2.5,
                "expert_weights_norm": True, "expert_gating_func": 2, "expert_group_count": 4,
                "expert_group_used_count": 2, "attention.head_count": 4,
                "attention.head_count_kv": 1, "attention.q_lora_rank": 32,
                "attention.kv_lora_rank": 32, "attention.key_length": 48,
                "attention.value_length": 32, "attention.key_length_mla": 40,
                "attention.value_length_mla": 32, "rope.dimension_count": 16,
                "attention.layer_norm_rms_epsilon": 1e-6, "rope.freq_base": 10000.0,
                "rope.scaling.type": "yarn", "rope.scaling.factor": 4.0,
                "rope.scaling.original_context_length": 128,
                "rope.scaling.yarn_log_multiplier": 0.1}


def mla_attention(g, L, hp, il: int, h: np.ndarray, scale: float, mla: bool,
                  q_mul) -> np.ndarray:
    """llm_build_deepseek2's self-attention: h [n, n_embd] -> [n, n_embd]."""
    n, nh = h.shape[0], hp.n_head
    dk, rot, r = head_k(hp), hp.n_rot, hp.n_lora_kv
    nope = dk - rot
    # plain ggml_mul_mat (not build_lora_mm) for the q / kv projections, as llama.cpp
    if L.attn_q_a is not None:
        q = g.matmul(L.attn_q_b, g.rms_norm(g.matmul(L.attn_q_a, h, lora=False),
                                            L.attn_q_a_norm), lora=False)
    else:
        q = g.matmul(L.attn_q, h, lora=False)
    q = q.reshape(n, nh, dk)
    kv_pe = g.matmul(L.attn_kv_a_mqa, h, lora=False)                       # [n, r + rot]
    k_pe = g.rope(np.ascontiguousarray(kv_pe[:, r:]).reshape(n, 1, rot), il)
    kv = g.rms_norm(np.ascontiguousarray(kv_pe[:, :r]), L.attn_kv_a_norm)   # [n, r]
    q_pe = g.rope(np.ascontiguousarray(q[:, :, nope:]), il)                # [n, nh, rot]
    if mla:
        q_abs = g.matmul_heads(L.attn_k_b, q[:, :, :nope], src1_contiguous=False)  # [n, nh, r]
        qc = np.concatenate([q_abs, q_pe], axis=-1)
        kc = np.concatenate([kv.reshape(n, 1, r), k_pe], axis=-1)
        if q_mul is not None:
            qc = g.mul(qc, q_mul)
        o = g.attention(il, qc, kc, kv.reshape(n, 1, r), scale=scale)      # [n, nh * r]; V
        # = kv: the first r values of each K row, read from the K cache (KVLayout.v_in_k)
        # flash attention: llama.cpp permutes its output before attn_v_b, a non-contiguous
        # src1 when n > 1 (ggml_is_contiguous skips the size-1 dimension of one token; one_row:
        # each row as its own one-token decode)
        fa_perm = g.flash_attn and n > 1 and not g.one_row
        o = g.matmul_heads(L.attn_v_b, o.reshape(n, nh, r),
                           src1_contiguous=not fa_perm).reshape(n, -1)
    else:
        dv = head_v(hp)
        kvb = g.matmul(L.attn_kv_b, kv, lora=False).reshape(n, nh, nope + dv)
        qc = np.concatenate([q[:, :, :nope], q_pe], axis=-1)
        kc = np.concatenate([kvb[:, :, :nope], np.broadcast_to(k_pe, (n, nh, rot))], axis=-1)
        if q_mul is not None:
            qc = g.mul(qc, q_mul)
        o = g.attention(il, qc, kc, np.ascontiguousarray(kvb[:, :, nope:]), scale=scale)
    return g.matmul(L.attn_output, o)


def routed_experts(g, L, hp, x: np.ndarray) -> np.ndarray:
    """build_moe_ffn as llm_build_deepseek2 calls it (SiLU experts, the gating function,
    exp_probs_b, expert groups, norm, scale). x [n, n_embd] -> [n, n_embd]."""
    n = x.shape[0]
    plain = (hp.expert_gating_func == GATING_SOFTMAX and L.exp_probs_b_b is None
             and hp.n_expert_groups <= 1)
    if plain and L.ffn_gate_up_exps is None:
        return g.moe_softmax_swiglu(L.ffn_gate_inp, L.ffn_gate_exps, L.ffn_up_exps,
                                    L.ffn_down_exps, x, hp.n_expert_used,
                                    hp.expert_weights_norm, hp.expert_weights_scale)
    logits = g.matmul(L.ffn_gate_inp, x)                                   # [n, n_expert]
    if plain:
        ids, wts = g.moe_route(logits, hp.n_expert_used, hp.expert_weights_norm,
                               hp.expert_weights_scale)
    else:
        probs = g.softmax(logits) if hp.expert_gating_func == GATING_SOFTMAX else g.sigmoid(logits)
        sel = probs
        if L.exp_probs_b_b is not None:
            sel = g.add(probs, np.asarray(L.exp_probs_b_b.raw, np.float32).reshape(1, -1))
        if hp.n_expert_groups > 1 and n > 0:
            sel = g.moe_group_mask(sel, hp.n_expert_groups, hp.n_group_used)
        ids = g.top_k(sel, hp.n_expert_used)
        wts = g.expert_weights(probs, ids, hp.expert_weights_norm, hp.expert_weights_scale)
    if L.ffn_gate_up_exps is None:
        return g.moe_swiglu(L.ffn_gate_exps, L.ffn_up_exps, L.ffn_down_exps, x, ids, wts)
    x3 = x.reshape(n, 1, x.shape[-1])           # fused [gate | up] rows: one mul_mat_id, views
    gu = g.mul_mat_id(L.ffn_gate_up_exps, x3, ids)                          # [n, k, 2 n_ff_exp]
    f = gu.shape[-1] // 2
    gate, up = np.ascontiguousarray(gu[..., :f]), np.ascontiguousarray(gu[..., f:])
    down = g.mul_mat_id(L.ffn_down_exps, g.swiglu(gate, up), ids)           # [n, k, n_embd]
    return g.sum_experts(g.mul(down, wts[..., None]))


def shared_experts(g, L, x: np.ndarray) -> np.ndarray:
    """The shared experts: one SwiGLU FFN (ffn_*_shexp), not gated."""
    gate, up = g.matmuls((L.ffn_gate_shexp, L.ffn_up_shexp), x)
    return g.matmul(L.ffn_down_shexp, g.swiglu(gate, up))
