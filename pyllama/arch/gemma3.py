"""gemma3 (llama.cpp src/models/gemma3.cpp; hparams: src/llama-model.cpp `load_hparams`).

Scaled embeddings, Q/K per-head RMSNorm, sandwich norms, GELU-tanh gate, tied output, NEOX RoPE;
interleaved SWA (pattern 6: layer il is global iff il % 6 == 5) with the local RoPE base on SWA
layers; Q pre-scaled by f_attention_scale with kq_scale 1. GGUF norm weights already include +1.
"""
import math

from ..hparams import ROPE_NEOX, SWA_NONE, SWA_STANDARD, load_common, load_swa_pattern
from . import register
from .base import SandwichArch


@register
class Gemma3(SandwichArch):
    name = "gemma3"
    qk_norm = True

    @classmethod
    def load_hparams(cls, md):
        hp = load_common(md, cls.name)
        hp.rope_type = ROPE_NEOX
        n_swa = int(md.get("gemma3.attention.sliding_window", 0) or 0)
        if n_swa > 0:
            hp.swa_type, hp.n_swa = SWA_STANDARD, n_swa
            load_swa_pattern(hp, md, 6)
            hp.rope_freq_base_train_swa = float(md.get("gemma3.rope.freq_base_swa", 10000.0))
            hp.rope_freq_scale_train_swa = 1.0
        else:
            hp.swa_type = SWA_NONE
        hp.f_final_logit_softcapping = float(md.get("gemma3.final_logit_softcapping", 0.0))
        head = hp.n_embd_head_k if hp.n_layer != 62 else hp.n_embd // hp.n_head
        hp.f_attention_scale = 1.0 / math.sqrt(head)
        hp.f_embedding_scale = math.sqrt(hp.n_embd)
        return hp

    @classmethod
    def tiny(cls):
        return {"context_length": 512, "embedding_length": 64, "block_count": 6,
                "feed_forward_length": 128, "attention.head_count": 4,
                "attention.head_count_kv": 1, "attention.key_length": 32,
                "attention.value_length": 32, "attention.layer_norm_rms_epsilon": 1e-6,
                "rope.freq_base": 1000000.0, "attention.sliding_window": 16}
