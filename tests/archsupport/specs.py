"""Random-weight GGUF models of llama.cpp architectures, written from llama.cpp's OWN names.

Metadata keys come from gguf-py's `Keys` and tensor names from `TENSOR_NAMES` (the constants
llama.cpp's src/llama-arch.cpp mirrors); each architecture's tensor list and shapes follow its
`load_arch_tensors` in llama.cpp's src/models/<arch>.cpp (shapes below in numpy order, i.e. ggml's
ne reversed). Nothing here reads pyllama's architecture files, so a wrong name or shape in pyllama
shows up as a load failure or a logit difference against llama.cpp.

Weights are float32, drawn per tensor from a generator seeded by (seed, crc32(name)), so a tensor's
values do not depend on which other tensors an architecture has. `write_model(path, arch, types)`
stores each tensor in the type `types[name]` (F32 when absent) with pyllama's bit-exact ggml
reference quantizers, which are what llama_model_quantize runs without an imatrix; that is how a
default-suite test rebuilds a llama.cpp-quantized model without llama.cpp.
"""
from __future__ import annotations

import zlib

import gguf
import numpy as np
from gguf.constants import MODEL_TENSOR as T
from gguf.constants import TENSOR_NAMES

K = gguf.Keys
VT = gguf.GGUFValueType

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "r e", "a t"]

# the shared shape: head 64, n_embd and n_ff multiples of 256 so llama.cpp's Q4_K_M uses K-quants
BASE = dict(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, head=64, n_ff=512, n_ctx=1024,
            eps=1e-5, rope_base=10000.0)


def tn(t, il: int | None = None, suffix: str = "weight") -> str:
    name = TENSOR_NAMES[t]
    return (name.format(bid=il) if il is not None else name) + "." + suffix


def vocab():
    """A byte-level BPE vocabulary (256 byte tokens, a few merges, ChatML specials)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    b2u = dict(zip(bs, map(chr, cs)))
    tokens = [b2u[b] for b in range(256)] + [m.replace(" ", "") for m in MERGES]
    types = [1] * len(tokens) + [3] * len(SPECIAL)
    return tokens + SPECIAL, types


N_VOCAB = len(vocab()[0])


class Spec:
    """One random model: `md` [(key, value, GGUFValueType)], `tensors` [(name, numpy shape)]."""

    def __init__(self, arch: str, c: dict):
        self.arch, self.c = arch, c
        self.md: list = []
        self.tensors: list = []

    def kv(self, key: str, value, vt=None):
        key = key.format(arch=self.arch)
        if vt is None:
            vt = VT.FLOAT32 if isinstance(value, float) else \
                VT.BOOL if isinstance(value, bool) else \
                VT.STRING if isinstance(value, str) else VT.UINT32
        self.md.append((key, value, vt))

    def t(self, name: str, *shape: int):
        self.tensors.append((name, tuple(int(s) for s in shape)))

    # -- the parts most architectures share ----------------------------------------------------
    def common_kv(self):
        c = self.c
        self.kv(K.LLM.CONTEXT_LENGTH, c["n_ctx"])
        self.kv(K.LLM.EMBEDDING_LENGTH, c["n_embd"])
        self.kv(K.LLM.BLOCK_COUNT, c["n_layer"])
        self.kv(K.LLM.FEED_FORWARD_LENGTH, c["n_ff"])
        self.kv(K.Attention.HEAD_COUNT, c["n_head"])
        self.kv(K.Attention.HEAD_COUNT_KV, c["n_head_kv"])
        if c["head"] != c["n_embd"] // c["n_head"]:
            self.kv(K.Attention.KEY_LENGTH, c["head"])
            self.kv(K.Attention.VALUE_LENGTH, c["head"])
        self.kv(K.Attention.LAYERNORM_RMS_EPS, c["eps"])
        self.kv(K.Rope.FREQ_BASE, c["rope_base"])

    def io(self, output: bool = True):
        e = self.c["n_embd"]
        self.t(tn(T.TOKEN_EMBD), N_VOCAB, e)
        self.t(tn(T.OUTPUT_NORM), e)
        if output:
            self.t(tn(T.OUTPUT), N_VOCAB, e)

    def attn(self, il: int, norm: bool = True, bias: bool = False):
        c = self.c
        e, qd, kd = c["n_embd"], c["n_head"] * c["head"], c["n_head_kv"] * c["head"]
        if norm:
            self.t(tn(T.ATTN_NORM, il), e)
        self.t(tn(T.ATTN_Q, il), qd, e)
        self.t(tn(T.ATTN_K, il), kd, e)
        self.t(tn(T.ATTN_V, il), kd, e)
        if bias:
            self.t(tn(T.ATTN_Q, il, "bias"), qd)
            self.t(tn(T.ATTN_K, il, "bias"), kd)
            self.t(tn(T.ATTN_V, il, "bias"), kd)
        self.t(tn(T.ATTN_OUT, il), e, qd)

    def ffn(self, il: int, norm: bool = True):
        e, f = self.c["n_embd"], self.c["n_ff"]
        if norm:
            self.t(tn(T.FFN_NORM, il), e)
        self.t(tn(T.FFN_GATE, il), f, e)
        self.t(tn(T.FFN_DOWN, il), e, f)
        self.t(tn(T.FFN_UP, il), f, e)

    def moe(self, il: int, n_ff_exp: int):
        e, n_exp = self.c["n_embd"], self.c["n_expert"]
        self.t(tn(T.FFN_NORM, il), e)
        self.t(tn(T.FFN_GATE_INP, il), n_exp, e)
        self.t(tn(T.FFN_GATE_EXP, il), n_exp, n_ff_exp, e)
        self.t(tn(T.FFN_DOWN_EXP, il), n_exp, e, n_ff_exp)
        self.t(tn(T.FFN_UP_EXP, il), n_exp, n_ff_exp, e)

    def moe_kv(self):
        self.kv(K.LLM.EXPERT_COUNT, self.c["n_expert"])
        self.kv(K.LLM.EXPERT_USED_COUNT, self.c["n_expert_used"])


# -- the architectures (llama.cpp src/models/<file>.cpp) -------------------------------------------
def _llama(s: Spec):                      # llama.cpp: optional rope_freqs, optional experts
    c = s.c
    s.common_kv()
    s.kv(K.Rope.DIMENSION_COUNT, c["head"])
    if c.get("n_expert"):
        s.moe_kv()
    s.io()
    if c.get("rope_freqs"):
        s.t(tn(T.ROPE_FREQS), c["head"] // 2)
    for il in range(c["n_layer"]):
        s.attn(il)
        if c.get("n_expert"):
            s.moe(il, c["n_ff"])
        else:
            s.ffn(il)


def _llama_yarn(s: Spec):                 # a YaRN-extended llama (rope.scaling.type yarn)
    _llama(s)
    s.kv(K.Rope.SCALING_TYPE, "yarn")
    s.kv(K.Rope.SCALING_FACTOR, s.c["yarn_factor"])
    s.kv(K.Rope.SCALING_ORIG_CTX_LEN, s.c["orig_ctx"])


def _mistral3(s: Spec):                   # mistral3.cpp: YaRN, attention temperature tuning
    c = s.c
    _llama(s)
    s.kv(K.Rope.SCALING_TYPE, "yarn")
    s.kv(K.Rope.SCALING_FACTOR, c["yarn_factor"])
    s.kv(K.Rope.SCALING_ORIG_CTX_LEN, c["orig_ctx"])
    s.kv(K.Rope.SCALING_YARN_BETA_FAST, 32.0)
    s.kv(K.Rope.SCALING_YARN_BETA_SLOW, 1.0)
    s.kv(K.Rope.SCALING_YARN_LOG_MUL, 1.0)
    s.kv(K.Attention.TEMPERATURE_SCALE, c["temp_scale"])


def _qwen2(s: Spec):                      # qwen2.cpp
    s.common_kv()
    s.io()
    for il in range(s.c["n_layer"]):
        s.attn(il, bias=True)
        s.ffn(il)


def _qwen2moe(s: Spec):                   # qwen2moe.cpp: MoE + a gated shared expert
    c = s.c
    s.common_kv()
    s.moe_kv()
    s.kv(K.LLM.EXPERT_FEED_FORWARD_LENGTH, c["n_ff_exp"])
    s.kv(K.LLM.EXPERT_SHARED_FEED_FORWARD_LENGTH, c["n_ff_shexp"])
    s.io()
    e, f = c["n_embd"], c["n_ff_shexp"]
    for il in range(c["n_layer"]):
        s.attn(il, bias=True)
        s.moe(il, c["n_ff_exp"])
        s.t(tn(T.FFN_GATE_INP_SHEXP, il), e)
        s.t(tn(T.FFN_GATE_SHEXP, il), f, e)
        s.t(tn(T.FFN_DOWN_SHEXP, il), e, f)
        s.t(tn(T.FFN_UP_SHEXP, il), f, e)


def _qk_norm(s: Spec, il: int):
    h = s.c["head"]
    s.t(tn(T.ATTN_Q_NORM, il), h)
    s.t(tn(T.ATTN_K_NORM, il), h)


def _qwen3(s: Spec):                      # qwen3.cpp
    s.common_kv()
    s.io(output=not s.c.get("tied"))
    for il in range(s.c["n_layer"]):
        s.attn(il)
        _qk_norm(s, il)
        s.ffn(il)


def _qwen3moe(s: Spec):                   # qwen3moe.cpp
    c = s.c
    s.common_kv()
    s.moe_kv()
    s.kv(K.LLM.EXPERT_FEED_FORWARD_LENGTH, c["n_ff_exp"])
    s.io()
    for il in range(c["n_layer"]):
        s.attn(il)
        _qk_norm(s, il)
        s.moe(il, c["n_ff_exp"])


def _smollm3(s: Spec):                    # smollm3.cpp: every 4th layer without RoPE
    s.common_kv()
    s.io(output=False)
    for il in range(s.c["n_layer"]):
        s.attn(il)
        s.ffn(il)


def _olmo2(s: Spec):                      # olmo2.cpp: full-width Q/K norms, post norms only
    c = s.c
    s.common_kv()
    s.io()
    e, kd = c["n_embd"], c["n_head_kv"] * c["head"]
    for il in range(c["n_layer"]):
        s.attn(il, norm=False)
        s.t(tn(T.ATTN_Q_NORM, il), e)
        s.t(tn(T.ATTN_K_NORM, il), kd)
        s.t(tn(T.ATTN_POST_NORM, il), e)
        s.ffn(il, norm=False)
        s.t(tn(T.FFN_POST_NORM, il), e)


def _olmo3(s: Spec):                      # olmo2.cpp with a sliding window (OLMo 3)
    _olmo2(s)
    s.kv(K.Attention.SLIDING_WINDOW, s.c["n_swa"])


def _gpt_oss(s: Spec):                    # openai-moe.cpp
    c = s.c
    s.common_kv()
    s.moe_kv()
    s.kv(K.LLM.EXPERT_FEED_FORWARD_LENGTH, c["n_ff_exp"])
    s.kv(K.Attention.SLIDING_WINDOW, c["n_swa"])
    s.kv(K.Rope.SCALING_TYPE, "yarn")
    s.kv(K.Rope.SCALING_FACTOR, 32.0)
    s.kv(K.Rope.SCALING_ORIG_CTX_LEN, 64)
    s.io()
    e, x, f, h = c["n_embd"], c["n_expert"], c["n_ff_exp"], c["n_head"]
    for il in range(c["n_layer"]):
        s.attn(il, bias=True)
        s.t(tn(T.ATTN_OUT, il, "bias"), e)
        s.t(tn(T.ATTN_SINKS, il), h)
        s.t(tn(T.ATTN_POST_NORM, il), e)
        s.t(tn(T.FFN_GATE_INP, il), x, e)
        s.t(tn(T.FFN_GATE_INP, il, "bias"), x)
        for t, shape in ((T.FFN_GATE_EXP, (x, f, e)), (T.FFN_UP_EXP, (x, f, e)),
                         (T.FFN_DOWN_EXP, (x, e, f))):
            s.t(tn(t, il), *shape)
            s.t(tn(t, il, "bias"), *shape[:2])


def _granite(s: Spec):                    # granite.cpp: embedding/residual/attention/logit scales
    c = s.c
    s.common_kv()
    s.kv(K.LLM.LOGIT_SCALE, c["logit_scale"])
    s.kv(K.LLM.RESIDUAL_SCALE, c["residual_scale"])
    s.kv(K.LLM.EMBEDDING_SCALE, c["embedding_scale"])
    s.kv(K.Attention.SCALE, c["attention_scale"])
    s.io(output=False)
    for il in range(c["n_layer"]):
        s.attn(il)
        s.ffn(il)


def _phi3(s: Spec):                       # phi3.cpp: fused QKV and gate|up, LongRoPE factors
    c = s.c
    s.common_kv()
    s.kv(K.Rope.DIMENSION_COUNT, c["head"])
    s.kv(K.Rope.SCALING_ORIG_CTX_LEN, c["orig_ctx"])
    s.kv(K.Rope.SCALING_ATTN_FACTOR, c["rope_attn_factor"])
    s.io()
    s.t(tn(T.ROPE_FACTORS_LONG), c["head"] // 2)
    s.t(tn(T.ROPE_FACTORS_SHORT), c["head"] // 2)
    e, f, kd = c["n_embd"], c["n_ff"], c["n_head_kv"] * c["head"]
    for il in range(c["n_layer"]):
        s.t(tn(T.ATTN_NORM, il), e)
        s.t(tn(T.ATTN_QKV, il), e + 2 * kd, e)
        s.t(tn(T.ATTN_OUT, il), e, e)
        s.t(tn(T.FFN_NORM, il), e)
        s.t(tn(T.FFN_DOWN, il), e, f)
        s.t(tn(T.FFN_UP, il), 2 * f, e)


def _glm4(s: Spec):                       # glm4.cpp: fused QKV + bias, half RoPE, post norms
    c = s.c
    s.common_kv()
    s.kv(K.Rope.DIMENSION_COUNT, c["head"] // 2)
    s.io()
    e, f = c["n_embd"], c["n_ff"]
    qd, kd = c["n_head"] * c["head"], c["n_head_kv"] * c["head"]
    for il in range(c["n_layer"]):
        s.t(tn(T.ATTN_NORM, il), e)
        s.t(tn(T.ATTN_QKV, il), qd + 2 * kd, e)
        s.t(tn(T.ATTN_QKV, il, "bias"), qd + 2 * kd)
        s.t(tn(T.ATTN_OUT, il), e, qd)
        s.t(tn(T.ATTN_POST_NORM, il), e)
        s.t(tn(T.FFN_NORM, il), e)
        s.t(tn(T.FFN_DOWN, il), e, f)
        s.t(tn(T.FFN_UP, il), 2 * f, e)
        s.t(tn(T.FFN_POST_NORM, il), e)


def _deepseek2(s: Spec):                  # deepseek2.cpp: MLA, leading dense layers, MoE + shared
    c = s.c
    e, h, rot, nope, dv = c["n_embd"], c["n_head"], c["rope"], c["nope"], c["v_mla"]
    r, qr, mla = c["kv_lora"], c.get("q_lora", 0), c["mla"]
    s.kv(K.LLM.CONTEXT_LENGTH, c["n_ctx"])
    s.kv(K.LLM.EMBEDDING_LENGTH, e)
    s.kv(K.LLM.BLOCK_COUNT, c["n_layer"])
    s.kv(K.LLM.FEED_FORWARD_LENGTH, c["n_ff"])
    s.kv(K.Attention.HEAD_COUNT, h)
    s.kv(K.LLM.VOCAB_SIZE, N_VOCAB)
    s.kv(K.LLM.LEADING_DENSE_BLOCK_COUNT, c["n_dense"])
    s.kv(K.Attention.Q_LORA_RANK, qr)
    s.kv(K.Attention.KV_LORA_RANK, r)
    if mla:                               # the MLA converter: MQA over the compressed KV
        s.kv(K.Attention.HEAD_COUNT_KV, 1)
        s.kv(K.Attention.KEY_LENGTH, r + rot)
        s.kv(K.Attention.VALUE_LENGTH, r)
        s.kv(K.Attention.KEY_LENGTH_MLA, nope + rot)
        s.kv(K.Attention.VALUE_LENGTH_MLA, dv)
    else:                                 # legacy files: MHA with the decompressed heads
        s.kv(K.Attention.HEAD_COUNT_KV, h)
        s.kv(K.Attention.KEY_LENGTH, nope + rot)
        s.kv(K.Attention.VALUE_LENGTH, dv)
    s.kv(K.LLM.EXPERT_FEED_FORWARD_LENGTH, c["n_ff_exp"])
    s.moe_kv()
    s.kv(K.LLM.EXPERT_SHARED_COUNT, c["n_shared"])
    if c.get("w_scale"):
        s.kv(K.LLM.EXPERT_WEIGHTS_SCALE, c["w_scale"])
    if c.get("w_norm"):
        s.kv(K.LLM.EXPERT_WEIGHTS_NORM, True)
    if c.get("gating"):
        s.kv(K.LLM.EXPERT_GATING_FUNC, c["gating"])
    if c.get("n_group"):
        s.kv(K.LLM.EXPERT_GROUP_COUNT, c["n_group"])
        s.kv(K.LLM.EXPERT_GROUP_USED_COUNT, c["n_group_used"])
    if c.get("temp_scale"):              # Mistral Large 3: Llama 4 attention temperature
        s.kv(K.Attention.TEMPERATURE_SCALE, c["temp_scale"])
        s.kv(K.Attention.TEMPERATURE_LENGTH, c["temp_length"])
    s.kv(K.Attention.LAYERNORM_RMS_EPS, c["eps"])
    s.kv(K.Rope.FREQ_BASE, c["rope_base"])
    s.kv(K.Rope.DIMENSION_COUNT, rot)
    s.kv(K.Rope.SCALING_TYPE, "yarn")
    s.kv(K.Rope.SCALING_FACTOR, c["yarn_factor"])
    s.kv(K.Rope.SCALING_ORIG_CTX_LEN, c["orig_ctx"])
    s.kv(K.Rope.SCALING_YARN_LOG_MUL, 0.1 * c["mscale_all_dim"])
    s.io(output=not c.get("tied"))
    x, f, fs = c["n_expert"], c["n_ff_exp"], c["n_ff_exp"] * c["n_shared"]
    for il in range(c["n_layer"]):
        s.t(tn(T.ATTN_NORM, il), e)
        if qr:
            s.t(tn(T.ATTN_Q_A_NORM, il), qr)
            s.t(tn(T.ATTN_Q_A, il), qr, e)
            s.t(tn(T.ATTN_Q_B, il), h * (nope + rot), qr)
        else:
            s.t(tn(T.ATTN_Q, il), h * (nope + rot), e)
        s.t(tn(T.ATTN_KV_A_NORM, il), r)
        s.t(tn(T.ATTN_KV_A_MQA, il), r + rot, e)
        if mla:
            s.t(tn(T.ATTN_K_B, il), h, r, nope)
            s.t(tn(T.ATTN_V_B, il), h, dv, r)
        else:
            s.t(tn(T.ATTN_KV_B, il), h * (nope + dv), r)
        s.t(tn(T.ATTN_OUT, il), e, h * dv)
        if il < c["n_dense"]:
            s.ffn(il)
            continue
        s.t(tn(T.FFN_NORM, il), e)
        s.t(tn(T.FFN_GATE_INP, il), x, e)
        if c.get("probs_b"):
            s.t(tn(T.FFN_EXP_PROBS_B, il, "bias"), x)
        if c.get("fused"):                # convert_hf_to_gguf --fuse-gate-up-exps
            s.t(tn(T.FFN_GATE_UP_EXP, il), x, 2 * f, e)
        else:
            s.t(tn(T.FFN_GATE_EXP, il), x, f, e)
            s.t(tn(T.FFN_UP_EXP, il), x, f, e)
        s.t(tn(T.FFN_DOWN_EXP, il), x, e, f)
        s.t(tn(T.FFN_GATE_SHEXP, il), fs, e)
        s.t(tn(T.FFN_DOWN_SHEXP, il), e, fs)
        s.t(tn(T.FFN_UP_SHEXP, il), fs, e)


def _glm4moe(s: Spec):                    # glm4-moe.cpp: biased QKV, half NEOX RoPE, MoE + shared
    c = s.c
    s.common_kv()
    s.kv(K.Rope.DIMENSION_COUNT, c["head"] // 2)
    s.moe_kv()
    s.kv(K.LLM.EXPERT_FEED_FORWARD_LENGTH, c["n_ff_exp"])
    s.kv(K.LLM.EXPERT_SHARED_COUNT, c["n_shared"])
    s.kv(K.LLM.LEADING_DENSE_BLOCK_COUNT, c["n_dense"])
    s.kv(K.LLM.EXPERT_GATING_FUNC, 2)
    s.kv(K.LLM.EXPERT_WEIGHTS_SCALE, c["w_scale"])
    s.kv(K.LLM.EXPERT_WEIGHTS_NORM, True)
    s.kv(K.LLM.NEXTN_PREDICT_LAYERS, 1)
    s.io()
    e, x, f = c["n_embd"], c["n_expert"], c["n_ff_exp"]
    fs = f * c["n_shared"]
    for il in range(c["n_layer"]):       # the trunk, then the NextN block (a full MoE layer too)
        s.attn(il, bias=True)
        if c.get("qk_norm"):
            _qk_norm(s, il)
        s.t(tn(T.ATTN_POST_NORM, il), e)
        if il < c["n_dense"]:
            s.ffn(il, norm=False)
            continue
        s.t(tn(T.FFN_GATE_INP, il), x, e)
        s.t(tn(T.FFN_EXP_PROBS_B, il, "bias"), x)
        s.t(tn(T.FFN_GATE_EXP, il), x, f, e)
        s.t(tn(T.FFN_DOWN_EXP, il), x, e, f)
        s.t(tn(T.FFN_UP_EXP, il), x, f, e)
        s.t(tn(T.FFN_GATE_SHEXP, il), fs, e)
        s.t(tn(T.FFN_DOWN_SHEXP, il), e, fs)
        s.t(tn(T.FFN_UP_SHEXP, il), fs, e)
    il = c["n_layer"] - 1                # its NextN tensors (llama.cpp skips them, runs the trunk)
    s.t(tn(T.NEXTN_EH_PROJ, il), e, 2 * e)
    s.t(tn(T.NEXTN_ENORM, il), e)
    s.t(tn(T.NEXTN_HNORM, il), e)


def _llama4(s: Spec):                     # llama4.cpp: interleaved MoE + shared expert, chunked
    c = s.c                               # attention (no sliding_window key, as the converter)
    s.common_kv()
    s.kv(K.Rope.DIMENSION_COUNT, c["head"])
    s.moe_kv()
    s.kv(K.LLM.EXPERT_FEED_FORWARD_LENGTH, c["n_ff_exp"])
    s.kv(K.LLM.INTERLEAVE_MOE_LAYER_STEP, c["moe_step"])
    s.io()
    s.t(tn(T.ROPE_FREQS), c["head"] // 2)
    e, x, f = c["n_embd"], c["n_expert"], c["n_ff_exp"]
    for il in range(c["n_layer"]):
        s.attn(il)
        if (il + 1) % c["moe_step"]:
            s.ffn(il)
            continue
        s.t(tn(T.FFN_NORM, il), e)
        s.t(tn(T.FFN_GATE_INP, il), x, e)
        s.t(tn(T.FFN_GATE_EXP, il), x, f, e)
        s.t(tn(T.FFN_DOWN_EXP, il), x, e, f)
        s.t(tn(T.FFN_UP_EXP, il), x, f, e)
        s.t(tn(T.FFN_GATE_SHEXP, il), f, e)
        s.t(tn(T.FFN_DOWN_SHEXP, il), e, f)
        s.t(tn(T.FFN_UP_SHEXP, il), f, e)


ARCHS = {
    # name: (general.architecture, builder, config overrides)
    "llama": ("llama", _llama, {}),
    "llama3": ("llama", _llama, {"rope_freqs": True, "rope_base": 500000.0}),
    "llamayarn": ("llama", _llama_yarn, {"yarn_factor": 4.0, "orig_ctx": 256}),
    # original context 8: the attention temperature steps at positions 8 and 16
    "mistral3": ("mistral3", _mistral3, {"rope_base": 1000000.0, "yarn_factor": 16.0,
                                         "orig_ctx": 8, "temp_scale": 0.1}),
    "mixtral": ("llama", _llama, {"n_expert": 8, "n_expert_used": 2, "n_ff": 256}),
    "qwen2": ("qwen2", _qwen2, {"eps": 1e-6, "rope_base": 1000000.0}),
    "qwen2moe": ("qwen2moe", _qwen2moe, {"eps": 1e-6, "rope_base": 1000000.0, "n_expert": 8,
                                         "n_expert_used": 4, "n_ff_exp": 256, "n_ff_shexp": 512}),
    "qwen3": ("qwen3", _qwen3, {"eps": 1e-6, "rope_base": 1000000.0}),
    # Qwen3's own head size 128 with Q wider than n_embd (Qwen3 0.6B-8B: 2x)
    "qwen3h128": ("qwen3", _qwen3, {"eps": 1e-6, "rope_base": 1000000.0, "head": 128,
                                    "n_head": 8, "n_head_kv": 4, "n_ff": 768}),
    "qwen3moe": ("qwen3moe", _qwen3moe, {"eps": 1e-6, "rope_base": 1000000.0, "n_expert": 16,
                                         "n_expert_used": 4, "n_ff_exp": 256}),
    "smollm3": ("smollm3", _smollm3, {"n_layer": 4, "rope_base": 2000000.0}),
    "olmo2": ("olmo2", _olmo2, {"eps": 1e-6, "rope_base": 500000.0}),
    # n_ctx 512 > original_context_length 256: llama.cpp picks rope_factors_long
    "phi3": ("phi3", _phi3, {"n_head_kv": 4, "orig_ctx": 256, "rope_attn_factor": 1.1902380714238083}),
    # 4 layers, window 8 over 26 positions: SWA layers 0-2 mask, layer 3 is global
    "olmo3": ("olmo2", _olmo3, {"eps": 1e-6, "rope_base": 500000.0, "n_layer": 4, "n_swa": 8}),
    # layer 0 SWA (window 8), layer 1 full; 8 experts top 4; YaRN x32 from 64 positions
    "gpt-oss": ("gpt-oss", _gpt_oss, {"n_layer": 2, "n_swa": 8, "n_expert": 8,
                                      "n_expert_used": 4, "n_ff_exp": 256, "head": 64}),
    "granite": ("granite", _granite, {"logit_scale": 8.0, "residual_scale": 0.22,
                                      "embedding_scale": 12.0, "attention_scale": 0.015625}),
    "glm4": ("glm4", _glm4, {"eps": 1e-5, "rope_base": 10000.0}),
    # DeepSeek V3 / R1 / Kimi K2 shaped: q LoRA, absorbed MLA (attn_k_b / attn_v_b), one dense
    # layer then MoE with sigmoid routing, exp_probs_b, 4 expert groups (2 used), normalised
    # weights x 2.5, a shared expert; YaRN x4 from 256 positions, mscale_all_dim 1. Also an F32
    # fixture (record.py --archs deepseek2 --ftypes F32): attn_k_b's F32 mul_mat on a
    # non-contiguous src1 is ggml_vec_dot_f32 (no tinyBLAS)
    "deepseek2": ("deepseek2", _deepseek2, {
        "eps": 1e-6, "n_layer": 3, "n_dense": 1, "q_lora": 256, "kv_lora": 256, "rope": 32,
        "nope": 64, "v_mla": 64, "mla": True, "n_expert": 16, "n_expert_used": 4,
        "n_ff_exp": 256, "n_shared": 1, "w_scale": 2.5, "w_norm": True, "gating": 2,
        "probs_b": True, "n_group": 4, "n_group_used": 2, "yarn_factor": 4.0, "orig_ctx": 256,
        "mscale_all_dim": 1.0}),
    # GLM-4.5-Air shaped: one dense layer, then MoE (sigmoid, exp_probs_b, norm, x1.5, a shared
    # expert), separate biased Q/K/V, half NEOX RoPE, and a trailing NextN block (block_count 4,
    # nextn_predict_layers 1: a 3-layer trunk)
    "glm4moe": ("glm4moe", _glm4moe, {
        "eps": 1e-5, "rope_base": 1000000.0, "n_layer": 4, "n_dense": 1, "n_expert": 16,
        "n_expert_used": 4, "n_ff_exp": 256, "n_shared": 1, "w_scale": 1.5}),
    # GLM-4.5 (355B) shaped: the same with per-head Q/K norms
    "glm4moeqk": ("glm4moe", _glm4moe, {
        "eps": 1e-5, "rope_base": 1000000.0, "n_layer": 3, "n_dense": 1, "n_expert": 8,
        "n_expert_used": 2, "n_ff_exp": 256, "n_shared": 1, "w_scale": 2.5, "qk_norm": True,
        "head": 128, "n_head": 4, "n_head_kv": 2}),
    # Mistral Large 3 style: deepseek2 with the attention temperature (steps at positions 8 and
    # 16), softmax routing with normalised weights, fused gate|up experts, tied output
    "deepseek2mistral": ("deepseek2", _deepseek2, {
        "eps": 1e-5, "n_layer": 3, "n_dense": 1, "q_lora": 256, "kv_lora": 256, "rope": 32,
        "nope": 64, "v_mla": 64, "mla": True, "n_expert": 8, "n_expert_used": 2,
        "n_ff_exp": 256, "n_shared": 1, "w_norm": True, "gating": 1, "fused": True,
        "temp_scale": 0.1, "temp_length": 8, "yarn_factor": 4.0, "orig_ctx": 256,
        "mscale_all_dim": 1.0, "tied": True}),
    # DeepSeek V2-Lite shaped, legacy layout: no q LoRA (q_lora_rank 0), attn_kv_b (MHA), no
    # gating key (softmax), unnormalised weights, 2 shared experts; mscale_all_dim 0.707
    "deepseek2lite": ("deepseek2", _deepseek2, {
        "eps": 1e-6, "n_layer": 3, "n_dense": 1, "kv_lora": 256, "rope": 32, "nope": 64,
        "v_mla": 64, "mla": False, "n_expert": 8, "n_expert_used": 2, "n_ff_exp": 256,
        "n_shared": 2, "yarn_factor": 4.0, "orig_ctx": 256, "mscale_all_dim": 0.707}),
    # Llama 4 shaped: 4 layers (0-2 chunked with RoPE + L2 Q/K norm, 3 global NoPE with the
    # attention temperature), MoE on layers 1 and 3 (16 experts: llama.cpp's 17B-16E type, top 2,
    # sigmoid weights before the experts, a shared expert), Llama 3 rope_freqs. pos0: the tokens
    # are decoded from position 8180, so llama.cpp's fixed 8192-position chunk boundary and the
    # temperature step (pos + 1 = 8192) fall inside the prefill
    "llama4": ("llama4", _llama4, {"n_layer": 4, "rope_base": 500000.0, "n_expert": 16,
                                   "n_expert_used": 2, "n_ff_exp": 256, "moe_step": 2,
                                   "pos0": 8180}),
    # Maverick shaped: 128 experts (llama.cpp's 17B-128E type: no Q/K L2 norm), top 1, narrow
    # experts (256 x 32) to stay small
    "llama4maverick": ("llama4", _llama4, {"n_layer": 4, "rope_base": 500000.0, "n_expert": 128,
                                           "n_expert_used": 1, "n_ff_exp": 32, "moe_step": 2,
                                           "pos0": 8180}),
}


# benchmark shapes (no fixtures): Qwen3-30B-A3B scaled down, same expert count and top-k, the
# same q-width / n_embd ratio, expert FFN a multiple of 256 (K-quants, as 768), 2 layers
BENCH = {
    "qwen3moe-a3b-mini": ("qwen3moe", _qwen3moe, {
        "eps": 1e-6, "rope_base": 1000000.0, "n_embd": 768, "n_layer": 2, "n_head": 12,
        "n_head_kv": 1, "head": 128, "n_ff": 2048, "n_expert": 128, "n_expert_used": 8,
        "n_ff_exp": 256, "n_ctx": 4096}),
}


def spec(name: str) -> Spec:
    arch, build, over = ARCHS[name] if name in ARCHS else BENCH[name]
    c = dict(BASE)
    c.update(over)
    s = Spec(arch, c)
    build(s)
    return s


def tensor_data(name: str, shape, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    if name == tn(T.ROPE_FREQS):             # Llama 3 style: 1 for high, up to 8 for low freqs
        return np.geomspace(1.0, 8.0, shape[0]).astype(np.float32)
    if name in (tn(T.ROPE_FACTORS_LONG), tn(T.ROPE_FACTORS_SHORT)):     # LongRoPE style
        top = 16.0 if name == tn(T.ROPE_FACTORS_LONG) else 2.0
        return np.geomspace(1.0, top, shape[0]).astype(np.float32)
    if name.endswith("attn_sinks.weight"):
        return (1.0 * rng.standard_normal(shape)).astype(np.float32)
    if name.endswith(".bias"):
        return (0.1 * rng.standard_normal(shape)).astype(np.float32)
    if len(shape) == 1:
        if name.endswith(".bias"):
            return (0.1 * rng.standard_normal(shape)).astype(np.float32)
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    scale = 0.5 if "token_embd" in name else 1.0 / np.sqrt(shape[-1])
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def write_model(path: str, name: str, types: dict | None = None, seed: int = 0,
                default_type: str = "F32") -> dict:
    """Write the random model `name` to path; returns {tensor name: type name}. types maps
    tensor names to ggml type names (gguf.GGMLQuantizationType members)."""
    s = spec(name)
    types = types or {}
    w = gguf.GGUFWriter(path, s.arch)
    for key, value, vt in s.md:
        w.add_key_value(key, value, vt)
    tokens, ttypes = vocab()
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(ttypes)
    w.add_token_merges(MERGES)
    w.add_bos_token_id(len(tokens) - 3)
    w.add_eos_token_id(len(tokens) - 1)
    w.add_add_bos_token(False)
    used = {}
    for tname, shape in s.tensors:
        data = tensor_data(tname, shape, seed)
        qt = types.get(tname, default_type if len(shape) > 1 else "F32")
        used[tname] = qt
        if qt == "F32":
            w.add_tensor(tname, data)
        elif qt == "F16":
            w.add_tensor(tname, data.astype(np.float16))
        else:
            from pyllama.gguf import GGMLType
            from pyllama.quant import quantize
            gt = gguf.GGMLQuantizationType[qt]
            q = quantize(data, GGMLType[qt])
            w.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=gt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return used
