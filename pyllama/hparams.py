"""Hyper-parameters read from GGUF metadata, with llama.cpp's names and defaults.

Per-layer values (is_swa, n_ff) are lists indexed by layer. Architecture files fill the parts that are
specific to them (llama_model::load_hparams + the per-arch load_arch_hparams in llama.cpp).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from .errors import ModelError

SWA_NONE, SWA_STANDARD, SWA_CHUNKED, SWA_SYMMETRIC = 0, 1, 2, 3
# llama_expert_gating_func_type
GATING_NONE, GATING_SOFTMAX, GATING_SIGMOID, GATING_SOFTMAX_WEIGHT, GATING_SQRT_SOFTPLUS = 0, 1, 2, 3, 4
ROPE_NORM, ROPE_NEOX = 0, 2


@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_ctx_train: int
    n_embd: int
    n_layer: int
    n_ff: list[int]
    n_head: int
    n_head_kv: int
    n_embd_head_k: int
    n_embd_head_v: int
    n_rot: int
    f_norm_rms_eps: float
    rope_type: int = ROPE_NORM
    rope_freq_base_train: float = 10000.0
    rope_freq_scale_train: float = 1.0
    rope_freq_base_train_swa: float = 10000.0
    rope_freq_scale_train_swa: float = 1.0
    swa_type: int = SWA_NONE
    n_swa: int = 0
    is_swa: list[bool] = field(default_factory=list)
    f_attention_scale: float = 0.0           # 0 -> 1/sqrt(head_dim)
    f_attn_logit_softcapping: float = 0.0
    f_final_logit_softcapping: float = 0.0
    f_embedding_scale: float = 0.0           # 0 -> none (Gemma: sqrt(n_embd))
    f_logit_scale: float = 0.0               # 0 -> none (granite: logits / f_logit_scale)
    f_residual_scale: float = 0.0            # 0 -> none (granite)
    f_attn_temp_scale: float = 0.0           # 0 -> none (mistral3: Q times a per-position scale)
    n_attn_temp_floor_scale: int = 0
    f_attn_temp_offset: float = 0.0          # added to pos before the floor (llama4: 1)
    use_kq_norm: bool = False                # llama4: weightless RMSNorm of Q/K after RoPE
    n_moe_layer_step: int = 0                # llama4 interleave_moe_layer_step: (il+1) % step == 0
    # mixture of experts (llama_model_base::load_hparams: expert_count, expert_used_count)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int = 0                        # expert_feed_forward_length (0: n_ff)
    n_ff_shexp: int = 0                      # shared expert width (qwen2moe)
    expert_weights_scale: float = 0.0        # 0 or 1: none
    expert_weights_norm: bool = False        # deepseek2: normalise the selected weights
    expert_gating_func: int = 0              # GATING_* (deepseek2: softmax or sigmoid)
    n_expert_shared: int = 0                 # deepseek2: shared experts (width n_ff_exp each)
    n_expert_groups: int = 0                 # expert_group_count (DeepSeek V3 group routing)
    n_group_used: int = 0                    # expert_group_used_count
    n_layer_dense_lead: int = 0              # leading_dense_block_count (dense FFN layers)
    # multi-head latent attention (deepseek2): q/kv LoRA ranks and the per-head K/V sizes
    # after decompression (0: not MLA, i.e. key_length/value_length are the MHA head sizes)
    n_lora_q: int = 0
    n_lora_kv: int = 0
    n_embd_head_k_mla: int = 0
    n_embd_head_v_mla: int = 0
    # RoPE scaling (llama_model_base::load_hparams; resolved per context by with_rope_cparams)
    rope_scaling_type: str = "linear"        # none | linear | yarn | longrope
    n_ctx_orig_yarn: int = 0
    rope_attn_factor: float = 1.0
    rope_yarn_log_mul: float = 0.0
    yarn_ext_factor: float = -1.0            # < 0: not set (yarn -> 1, else 0)
    yarn_attn_factor: float = 1.0
    yarn_beta_fast: float = 32.0
    yarn_beta_slow: float = 1.0
    rope_factors: dict = field(default_factory=dict)   # rope_freqs / rope_factors_long|short
    rope_freq_factors: object = None         # the f32 [n_rot/2] factors this context uses
    rope_layers: list[bool] = field(default_factory=list)   # False: a layer without RoPE

    @property
    def is_mla(self) -> bool:
        """llama_hparams::is_mla: key_length_mla and value_length_mla set (deepseek2's absorbed
        MLA: the K cache holds the compressed KV, V is a view of it)."""
        return self.n_embd_head_k_mla != 0 and self.n_embd_head_v_mla != 0

    @property
    def n_embd_k_gqa(self) -> int:
        return self.n_embd_head_k * self.n_head_kv

    @property
    def n_embd_v_gqa(self) -> int:
        return self.n_embd_head_v * self.n_head_kv

    def is_swa_any(self) -> bool:
        return self.swa_type != SWA_NONE and any(self.is_swa)

    def set_swa_pattern(self, n_pattern: int, dense_first: bool = False) -> None:
        """llama_hparams::set_swa_pattern."""
        if n_pattern == 0:
            self.is_swa = [True] * self.n_layer
        elif dense_first:
            self.is_swa = [il % n_pattern != 0 for il in range(self.n_layer)]
        else:
            self.is_swa = [il % n_pattern < n_pattern - 1 for il in range(self.n_layer)]

    def rope_base(self, il: int) -> float:
        return self.rope_freq_base_train_swa if self.is_swa[il] else self.rope_freq_base_train

    def rope_scale(self, il: int) -> float:
        return self.rope_freq_scale_train_swa if self.is_swa[il] else self.rope_freq_scale_train

    def has_rope(self, il: int) -> bool:
        return not self.rope_layers or self.rope_layers[il]

    def rope_args(self, il: int) -> dict:
        """Keyword arguments of Backend.rope for layer il (ggml_rope_ext's as llama.cpp's graph
        passes them: llama_model::get_rope_freq_base/scale, get_rope_factors, cparams yarn_*)."""
        base, scale = self.rope_base(il), self.rope_scale(il)
        ext = max(self.yarn_ext_factor, 0.0)
        corr = (0.0, 0.0)
        if ext != 0.0:
            corr = yarn_corr_dims(self.n_rot, self.n_ctx_orig_yarn or self.n_ctx_train, base,
                                  self.yarn_beta_fast, self.yarn_beta_slow)
        return dict(n_rot=self.n_rot, base=base, freq_scale=scale, mode=self.rope_type,
                    freq_factors=self.rope_freq_factors, ext_factor=ext,
                    attn_factor=self.yarn_attn_factor, corr_dims=corr)


def _f32(x: float) -> float:
    return float(np.float32(x))


def yarn_corr_dims(n_dims: int, n_ctx_orig: int, base: float, beta_fast: float,
                   beta_slow: float) -> tuple[float, float]:
    """ggml_rope_yarn_corr_dims (ggml.c), in f32."""
    def corr_dim(n_rot):
        num = _f32(n_dims * _f32(math.log(_f32(n_ctx_orig / _f32(n_rot * _f32(2 * _f32(math.pi)))))))
        return _f32(num / _f32(2 * _f32(math.log(base))))
    start = math.floor(corr_dim(beta_fast))
    end = math.ceil(corr_dim(beta_slow))
    return float(max(0, start)), float(min(n_dims - 1, end))


ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")


def with_rope_cparams(hp: HParams, n_ctx_seq: int, rope_scaling_type: str | None = None,
                      rope_freq_base: float = 0.0, rope_freq_scale: float = 0.0,
                      yarn_ext_factor: float = -1.0, yarn_attn_factor: float = -1.0,
                      yarn_beta_fast: float = -1.0, yarn_beta_slow: float = -1.0,
                      yarn_orig_ctx: int = 0) -> HParams:
    """A copy of hp with llama_context's RoPE cparams resolved (src/llama-context.cpp): the
    context's freq base/scale (0: the model's), scaling type (None: the model's; none -> scale 1),
    YaRN ext factor (< 0: 1 for yarn else 0) and attention factor (YaRN's mscale, cancelled
    against ggml's own 1 + 0.1 ln(factor), times rope.scaling.attn_factor), and the frequency
    factors (rope_freqs, else LongRoPE's long set when n_ctx_seq > n_ctx_orig_yarn, else short)."""
    if rope_scaling_type is not None and rope_scaling_type not in ROPE_SCALING_TYPES:
        raise ModelError(f"unknown RoPE scaling type '{rope_scaling_type}' "
                         f"({', '.join(ROPE_SCALING_TYPES)})")
    c = replace(hp)
    if rope_freq_base:
        c.rope_freq_base_train = float(rope_freq_base)
        if not any(hp.is_swa):
            c.rope_freq_base_train_swa = c.rope_freq_base_train
    if rope_freq_scale:
        c.rope_freq_scale_train = float(rope_freq_scale)
    c.n_ctx_orig_yarn = yarn_orig_ctx or hp.n_ctx_orig_yarn or hp.n_ctx_train
    stype = rope_scaling_type or hp.rope_scaling_type
    c.rope_scaling_type = stype
    if stype == "none":
        c.rope_freq_scale_train = 1.0
    if not any(hp.is_swa):
        c.rope_freq_scale_train_swa = c.rope_freq_scale_train
    ext = yarn_ext_factor if yarn_ext_factor >= 0 else hp.yarn_ext_factor
    if ext < 0:
        ext = 1.0 if stype == "yarn" else 0.0
    c.yarn_ext_factor = ext
    attn = yarn_attn_factor if yarn_attn_factor >= 0 else hp.yarn_attn_factor
    if yarn_beta_fast >= 0:
        c.yarn_beta_fast = yarn_beta_fast
    if yarn_beta_slow >= 0:
        c.yarn_beta_slow = yarn_beta_slow
    if ext != 0:
        factor = _f32(1.0 / _f32(c.rope_freq_scale_train))

        def mscale(scale, m):
            return 1.0 if scale <= 1.0 else _f32(_f32(0.1 * m) * _f32(math.log(scale)) + 1.0)
        if hp.rope_yarn_log_mul != 0.0:
            m_all = hp.rope_yarn_log_mul
            m = m_all if hp.arch == "deepseek2" and m_all != 1.0 else 1.0
            attn = _f32(mscale(factor, m) / mscale(factor, m_all))
        else:
            attn = mscale(factor, 1.0)
        attn = _f32(attn * _f32(1.0 / _f32(1.0 + _f32(0.1 * _f32(math.log(factor))))))
    c.yarn_attn_factor = _f32(attn * hp.rope_attn_factor)
    f = hp.rope_factors
    c.rope_freq_factors = f.get("rope_freqs")
    if c.rope_freq_factors is None and ("rope_factors_long" in f or "rope_factors_short" in f):
        c.rope_freq_factors = f.get("rope_factors_long" if n_ctx_seq > c.n_ctx_orig_yarn
                                    else "rope_factors_short")
    return c


class MetaReader:
    """Typed access to `<arch>.*` keys with clear errors."""

    def __init__(self, metadata: dict, arch: str):
        self.md, self.arch = metadata, arch

    def key(self, suffix: str) -> str:
        return f"{self.arch}.{suffix}"

    def get(self, suffix: str, default=None, required: bool = False):
        k = self.key(suffix)
        if k not in self.md:
            if required:
                raise ModelError(f"key not found in model: {k}")
            return default
        return self.md[k]

    def per_layer(self, suffix: str, n_layer: int, default=None, required=False) -> list:
        v = self.get(suffix, default, required)
        if isinstance(v, np.ndarray) or isinstance(v, list):
            if len(v) != n_layer:
                raise ModelError(f"{self.key(suffix)}: expected {n_layer} values, got {len(v)}")
            return [int(x) for x in v]
        return [v] * n_layer


def load_common(metadata: dict, arch: str) -> HParams:
    """llama_model_base::load_hparams: the keys every architecture shares."""
    m = MetaReader(metadata, arch)
    n_layer = int(m.get("block_count", required=True))
    n_embd = int(m.get("embedding_length", required=True))
    n_head = int(m.per_layer("attention.head_count", n_layer, required=True)[0])
    n_head_kv = int(m.per_layer("attention.head_count_kv", n_layer, n_head)[0])
    head_k = int(m.get("attention.key_length", n_embd // n_head))
    head_v = int(m.get("attention.value_length", n_embd // n_head))
    tokens = metadata.get("tokenizer.ggml.tokens")
    n_vocab = int(m.get("vocab_size", len(tokens) if tokens is not None else 0))
    hp = HParams(
        arch=arch, n_vocab=n_vocab,
        n_ctx_train=int(m.get("context_length", required=True)),
        n_embd=n_embd, n_layer=n_layer,
        n_ff=m.per_layer("feed_forward_length", n_layer, 0),
        n_head=n_head, n_head_kv=n_head_kv, n_embd_head_k=head_k, n_embd_head_v=head_v,
        n_rot=int(m.get("rope.dimension_count", head_k)),
        f_norm_rms_eps=float(m.get("attention.layer_norm_rms_epsilon", 1e-5)),
        rope_freq_base_train=float(m.get("rope.freq_base", 10000.0)),
    )
    hp.n_expert = int(m.get("expert_count", 0))
    hp.n_expert_used = int(m.per_layer("expert_used_count", n_layer, 0)[0])
    if hp.n_expert and not 0 < hp.n_expert_used <= hp.n_expert:
        raise ModelError(f"{arch}: expert_used_count {hp.n_expert_used} for {hp.n_expert} "
                         "experts")
    stype = str(m.get("rope.scaling.type", "linear"))
    if stype not in ROPE_SCALING_TYPES:
        raise ModelError(f"{arch}: unknown rope scaling type '{stype}'")
    hp.rope_scaling_type = stype
    factor = m.get("rope.scaling.factor") or m.get("rope.scale_linear")
    hp.rope_freq_scale_train = 1.0 / float(factor) if factor else 1.0
    hp.n_ctx_orig_yarn = int(m.get("rope.scaling.original_context_length", hp.n_ctx_train))
    hp.rope_attn_factor = float(m.get("rope.scaling.attn_factor", 1.0))
    hp.rope_freq_base_train_swa = hp.rope_freq_base_train
    hp.rope_freq_scale_train_swa = hp.rope_freq_scale_train
    hp.is_swa = [False] * n_layer
    return hp


def load_moe_widths(hp: HParams, metadata: dict) -> None:
    """The Qwen MoE archs' checks and widths: experts required, expert FFN width
    expert_feed_forward_length (default n_ff / n_expert_used), shared expert width
    expert_shared_feed_forward_length (default n_ff; used by qwen2moe)."""
    if hp.n_expert == 0 or hp.n_expert_used == 0:
        raise ModelError(f"{hp.arch}: expert_count and expert_used_count must be > 0")
    m = MetaReader(metadata, hp.arch)
    n_ff_exp = m.get("expert_feed_forward_length", 0)
    hp.n_ff_exp = int(n_ff_exp) if n_ff_exp else hp.n_ff[0] // hp.n_expert_used
    hp.n_ff_shexp = int(m.get("expert_shared_feed_forward_length", 0)) or hp.n_ff[0]


def load_swa_pattern(hp: HParams, metadata: dict, default_n: int, dense_first: bool = False):
    """llama_model_base::load_swa_pattern: an array key is used verbatim, else an int pattern."""
    v = metadata.get(f"{hp.arch}.attention.sliding_window_pattern", default_n)
    if isinstance(v, (np.ndarray, list)):
        if len(v) != hp.n_layer:
            raise ModelError(f"sliding_window_pattern has {len(v)} entries for {hp.n_layer} layers")
        hp.is_swa = [bool(x) for x in v]
    else:
        hp.set_swa_pattern(int(v), dense_first)


def drop_nextn_layers(hp: HParams, metadata: dict) -> None:
    """llama_hparams::n_layer(): block_count less nextn_predict_layers. The NextN/MTP blocks are
    stored after the trunk (blk.<n_layer>...); llama.cpp's decoder graph runs the trunk only and
    so does pyllama (their tensors are not loaded)."""
    n = int(metadata.get(f"{hp.arch}.nextn_predict_layers", 0) or 0)
    if not n:
        return
    if n >= hp.n_layer:
        raise ModelError(f"{hp.arch}: nextn_predict_layers {n} leaves no trunk layers of "
                         f"{hp.n_layer}")
    hp.n_layer -= n
    hp.n_ff = hp.n_ff[:hp.n_layer]
    hp.is_swa = hp.is_swa[:hp.n_layer]
