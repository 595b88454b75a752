"""What an architecture file provides, and the weight namespaces its forward pass reads."""
from __future__ import annotations

from dataclasses import dataclass

from ..backend.base import Weight
from ..errors import ModelError
from ..hparams import HParams


class LayerWeights:
    """blk.N.<name>.weight -> attribute <name>; blk.N.<name>.bias -> <name>_b."""

    def __init__(self, tensors: dict[str, Weight]):
        self.__dict__.update(tensors)

    def __getattr__(self, name: str):  # only reached for absent optional tensors
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class ModelWeights(LayerWeights):
    layers: list[LayerWeights]


@dataclass(frozen=True)
class TensorSpec:
    name: str                 # GGUF name, e.g. "blk.3.attn_q.weight"
    shape: tuple[int, ...]    # numpy order
    required: bool = True


class Arch:
    """One architecture. Subclasses set `name` and implement the three hooks + tiny()."""
    name = ""

    @classmethod
    def load_hparams(cls, metadata: dict) -> HParams:
        raise NotImplementedError

    @classmethod
    def tensor_specs(cls, hp: HParams) -> list[TensorSpec]:
        raise NotImplementedError

    @classmethod
    def forward(cls, g, w: ModelWeights, hp: HParams):
        """Logits [n_outputs, n_vocab] for the ubatch in graph g."""
        raise NotImplementedError

    @classmethod
    def tiny(cls) -> dict:
        """Metadata (without the `<arch>.` prefix) of a tiny random model for the test suite."""
        raise NotImplementedError

    @classmethod
    def tiny_optional(cls, hp: HParams) -> set[str]:
        """Optional tensors (required=False specs) a tiny random model carries besides the
        required ones: where an architecture loads one of two layouts (glm4: attn_qkv or
        attn_q/k/v), the one its tiny model uses."""
        return set()

    # shared by the files
    @staticmethod
    def attn_specs(hp: HParams, il: int, bias: bool = False, qk_norm: bool = False,
                   post_norms: bool = False) -> list[TensorSpec]:
        p, e = f"blk.{il}.", hp.n_embd
        qd, kd = hp.n_head * hp.n_embd_head_k, hp.n_embd_k_gqa
        specs = [TensorSpec(p + "attn_norm.weight", (e,)),
                 TensorSpec(p + "attn_q.weight", (qd, e)),
                 TensorSpec(p + "attn_k.weight", (kd, e)),
                 TensorSpec(p + "attn_v.weight", (hp.n_embd_v_gqa, e)),
                 TensorSpec(p + "attn_output.weight", (e, hp.n_head * hp.n_embd_head_v))]
        if bias:
            specs += [TensorSpec(p + "attn_q.bias", (qd,)), TensorSpec(p + "attn_k.bias", (kd,)),
                      TensorSpec(p + "attn_v.bias", (hp.n_embd_v_gqa,))]
        if qk_norm:
            specs += [TensorSpec(p + "attn_q_norm.weight", (hp.n_embd_head_k,)),
                      TensorSpec(p + "attn_k_norm.weight", (hp.n_embd_head_k,))]
        if post_norms:
            specs += [TensorSpec(p + "post_attention_norm.weight", (e,)),
                      TensorSpec(p + "post_ffw_norm.weight", (e,))]
        return specs

    @staticmethod
    def ffn_specs(hp: HParams, il: int) -> list[TensorSpec]:
        p, e, f = f"blk.{il}.", hp.n_embd, hp.n_ff[il]
        return [TensorSpec(p + "ffn_norm.weight", (e,)), TensorSpec(p + "ffn_gate.weight", (f, e)),
                TensorSpec(p + "ffn_up.weight", (f, e)), TensorSpec(p + "ffn_down.weight", (e, f))]

    @staticmethod
    def moe_specs(hp: HParams, il: int) -> list[TensorSpec]:
        p, e, f, x = f"blk.{il}.", hp.n_embd, hp.n_ff_exp or hp.n_ff[il], hp.n_expert
        return [TensorSpec(p + "ffn_norm.weight", (e,)),
                TensorSpec(p + "ffn_gate_inp.weight", (x, e)),
                TensorSpec(p + "ffn_gate_exps.weight", (x, f, e)),
                TensorSpec(p + "ffn_up_exps.weight", (x, f, e)),
                TensorSpec(p + "ffn_down_exps.weight", (x, e, f))]

    @staticmethod
    def io_specs(hp: HParams) -> list[TensorSpec]:
        v, e = hp.n_vocab, hp.n_embd
        return [TensorSpec("token_embd.weight", (v, e)), TensorSpec("output_norm.weight", (e,)),
                TensorSpec("output.weight", (v, e), required=False)]


def check_hparams(hp: HParams) -> None:
    if hp.n_head % hp.n_head_kv:
        raise ModelError(f"n_head {hp.n_head} is not a multiple of n_head_kv {hp.n_head_kv}")
    if hp.n_rot > hp.n_embd_head_k or hp.n_rot % 2:
        raise ModelError(f"bad rope dimension count {hp.n_rot} for head size {hp.n_embd_head_k}")


class PreNormArch(Arch):
    """The Llama-style stack (llama, qwen2, qwen3): subclasses set the rope type and whether the
    attention has Q/K/V biases or per-head Q/K norms."""
    rope_type = 0
    bias = False
    qk_norm = False

    @classmethod
    def load_hparams(cls, md):
        from ..hparams import load_common
        hp = load_common(md, cls.name)
        hp.rope_type = cls.rope_type
        return hp

    @classmethod
    def tensor_specs(cls, hp):
        specs = cls.io_specs(hp)
        for il in range(hp.n_layer):
            specs += cls.attn_specs(hp, il, bias=cls.bias, qk_norm=cls.qk_norm)
            specs += cls.moe_specs(hp, il) if hp.n_expert else cls.ffn_specs(hp, il)
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import pre_norm_decoder
        return pre_norm_decoder(g, w, hp, qk_norm=cls.qk_norm)


class SandwichArch(Arch):
    """Gemma 2/3: pre and post norms around attention and the GELU FFN; subclasses set qk_norm and
    load their own hyper-parameters (attention softcap comes from hp)."""
    qk_norm = False

    @classmethod
    def tensor_specs(cls, hp):
        specs = cls.io_specs(hp)
        for il in range(hp.n_layer):
            specs += cls.attn_specs(hp, il, qk_norm=cls.qk_norm, post_norms=True)
            specs += cls.ffn_specs(hp, il)
        return specs

    @classmethod
    def forward(cls, g, w, hp):
        from .blocks import sandwich_decoder
        return sandwich_decoder(g, w, hp, qk_norm=cls.qk_norm,
                                attn_softcap=hp.f_attn_logit_softcapping)
