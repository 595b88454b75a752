"""gemma2 (llama.cpp src/models/gemma2.cpp; hparams: src/llama-model.cpp `load_hparams`).

Like Gemma 3 without Q/K norms, with attention logit softcapping (default 50) and final logit
softcapping (default 30); SWA on even layers (pattern 2), window default 4096.
"""
import math

from ..hparams import ROPE_NEOX, SWA_STANDARD, load_common, load_swa_pattern
from . import register
from .base import SandwichArch


@register
class Gemma2(SandwichArch):
    name = "gemma2"

    @classmethod
    def load_hparams(cls, md):
        hp = load_common(md, cls.name)
        hp.rope_type = ROPE_NEOX
        hp.swa_type = SWA_STANDARD
        hp.n_swa = int(md.get("gemma2.attention.sliding_window", 4096))
        load_swa_pattern(hp, md, 2)
        hp.rope_freq_base_train_swa = float(md.get("gemma2.rope.freq_base_swa",
                                                   hp.rope_freq_base_train))
        hp.f_attn_logit_softcapping = float(md.get("gemma2.attn_logit_softcapping", 50.0))
        hp.f_final_logit_softcapping = float(md.get("gemma2.final_logit_softcapping", 30.0))
        head = hp.n_embd_head_k if hp.n_layer != 46 else hp.n_embd // hp.n_head
        hp.f_attention_scale = 1.0 / math.sqrt(head)
        hp.f_embedding_scale = math.sqrt(hp.n_embd)
        return hp

    @classmethod
    def tiny(cls):
        return {"context_length": 512, "embedding_length": 64, "block_count": 4,
                "feed_forward_length": 128, "attention.head_count": 4,
                "attention.head_count_kv": 2, "attention.key_length": 16,
                "attention.value_length": 16, "attention.layer_norm_rms_epsilon": 1e-6,
                "rope.freq_base": 10000.0, "attention.sliding_window": 16,
                "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
