"""Building blocks shared by architecture files (they call only the Graph facade)."""
from __future__ import annotations

import numpy as np

from ..hparams import HParams


def self_attention(g, L, hp: HParams, il: int, h: np.ndarray, *, qk_norm: bool = False,
                   q_scale: float | None = None, kq_scale: float | None = None,
                   softcap: float = 0.0) -> np.ndarray:
    """Q/K/V projections (+bias), optional per-head Q/K RMSNorm, RoPE, attention, output proj.
    h [n_tokens, n_embd] -> [n_tokens, n_embd].

    q_scale: multiply Q after RoPE (Gemma's f_attention_scale, then kq_scale = 1);
    kq_scale: the attention scale (default 1/sqrt(head_dim)).
    """
    n = h.shape[0]
    q = g.matmul(L.attn_q, h, L.attn_q_b).reshape(n, hp.n_head, hp.n_embd_head_k)
    k = g.matmul(L.attn_k, h, L.attn_k_b).reshape(n, hp.n_head_kv, hp.n_embd_head_k)
    v = g.matmul(L.attn_v, h, L.attn_v_b).reshape(n, hp.n_head_kv, hp.n_embd_head_v)
    if qk_norm:
        q = g.rms_norm(q, L.attn_q_norm)
        k = g.rms_norm(k, L.attn_k_norm)
    q = g.rope(q, il)
    k = g.rope(k, il)
    if q_scale is not None:
        q = g.scale(q, q_scale)
    o = g.attention(il, q, k, v, scale=kq_scale, softcap=softcap)
    return g.matmul(L.attn_output, o, L.attn_output_b)


def ffn_swiglu(g, L, x: np.ndarray) -> np.ndarray:
    return g.matmul(L.ffn_down, g.swiglu(g.matmul(L.ffn_gate, x), g.matmul(L.ffn_up, x)))


def ffn_geglu(g, L, x: np.ndarray) -> np.ndarray:
    return g.matmul(L.ffn_down, g.geglu(g.matmul(L.ffn_gate, x), g.matmul(L.ffn_up, x)))


def output(g, w, hp: HParams, x: np.ndarray) -> np.ndarray:
    """Final norm and the vocabulary projection (tied to token_embd when output is absent)."""
    x = g.rms_norm(x, w.output_norm)
    g.result_norm(x)          # llama.cpp's t_embd (the embeddings of Context(embeddings=True))
    if not g.want_logits:
        return None
    logits = g.matmul(w.output if w.output is not None else w.token_embd, x)
    if hp.f_final_logit_softcapping > 0:
        logits = g.softcap(logits, hp.f_final_logit_softcapping)
    return logits


def pre_norm_decoder(g, w, hp: HParams, *, qk_norm: bool = False) -> np.ndarray:
    """The Llama-style stack: x += attn(norm(x)); x += ffn(norm(x)) (llama, qwen2, qwen3)."""
    x = g.embed(w.token_embd)
    for il, L in enumerate(w.layers):
        a = self_attention(g, L, hp, il, g.rms_norm(x, L.attn_norm), qk_norm=qk_norm,
                           kq_scale=hp.f_attention_scale or None)
        if il == hp.n_layer - 1:
            x, a = g.select_outputs(x), g.select_outputs(a)
        x = g.add(x, a)
        x = g.add(x, ffn_swiglu(g, L, g.rms_norm(x, L.ffn_norm)))
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
        x = g.add(x, g.rms_norm(y, L.post_ffw_norm))
    return output(g, w, hp, x)
