"""RoPE / YaRN context parameters and --override-kv as llama.cpp applies them
(src/llama-context.cpp cparams, src/llama-model-loader.cpp overrides, common/arg.cpp flags).
YaRN's arithmetic itself is checked against llama.cpp by tests/data/arch/llamayarn-*.npz
(tests/test_archsupport.py); here each flag must equal the model metadata it stands for."""
import io

import numpy as np
import pytest

import pyllama
from pyllama.errors import ModelError
from pyllama.tools._args import ArgError, parse
from tiny import random_tokens

TOKS = random_tokens(24, seed=3)


def logits(path_or_model, **ctx_kw):
    m = pyllama.load_model(path_or_model) if isinstance(path_or_model, str) else path_or_model
    return pyllama.Context(m, n_ctx=256, **ctx_kw).eval(TOKS, logits_all=True)


def test_rope_freq_base_equals_the_model_key(tiny_model_path):
    base = tiny_model_path("llama")
    other = tiny_model_path("llama", overrides={"rope.freq_base": 50000.0})
    want = logits(other)
    assert not np.array_equal(want, logits(base))
    assert np.array_equal(logits(base, rope={"rope_freq_base": 50000.0}), want)


def test_rope_freq_scale_equals_linear_scaling_factor_and_none_turns_it_off(tiny_model_path):
    base = tiny_model_path("llama")
    scaled = tiny_model_path("llama", overrides={"rope.scaling.factor": 4.0})
    want = logits(scaled)
    assert np.array_equal(logits(base, rope={"rope_freq_scale": 0.25}), want)
    # --rope-scaling none: freq_scale forced to 1 (llama_context), whatever the model says
    assert np.array_equal(logits(scaled, rope={"rope_scaling_type": "none"}), logits(base))


def test_yarn_flags_change_the_rotation(tiny_model_path):
    base = tiny_model_path("llama")
    plain = logits(base, rope={"rope_freq_scale": 0.25})
    yarn = logits(base, rope={"rope_freq_scale": 0.25, "rope_scaling_type": "yarn",
                              "yarn_orig_ctx": 64})
    assert not np.array_equal(plain, yarn)
    # ext factor 0 is plain interpolation; the attention factor is then only rope.scaling's
    assert np.array_equal(logits(base, rope={"rope_freq_scale": 0.25, "rope_scaling_type": "yarn",
                                             "yarn_ext_factor": 0.0, "yarn_attn_factor": 1.0}),
                          plain)


def test_override_kv_equals_the_rewritten_file(tiny_model_path):
    base = tiny_model_path("llama")
    other = tiny_model_path("llama", overrides={"rope.freq_base": 50000.0})
    m = pyllama.load_model(base, kv_overrides={"llama.rope.freq_base": 50000.0})
    assert m.hparams.rope_freq_base_train == 50000.0
    assert np.array_equal(logits(m), logits(other))
    with pytest.raises(ModelError, match="Bad metadata override type for key 'llama.block_count'"):
        pyllama.load_model(base, kv_overrides={"llama.block_count": 1.5})


def P(*argv):
    return parse("completion", list(argv), env={}, stream=io.StringIO())


def test_flags_parse_as_llamacpp():
    p = P("--rope-scale", "4", "--rope-freq-base", "5e5", "--rope-scaling", "yarn",
          "--yarn-orig-ctx", "4096", "--yarn-beta-fast", "16")
    assert p.rope_freq_scale == 0.25 and p.rope_freq_base == 5e5
    kw = p.context_kwargs(512)["rope"]
    assert kw["rope_scaling_type"] == "yarn" and kw["yarn_orig_ctx"] == 4096
    assert kw["yarn_beta_fast"] == 16.0 and kw["yarn_beta_slow"] == -1.0
    p = P("--override-kv", "a.b=int:7,c=bool:false", "--override-kv", "d=str:x,e=float:0.5")
    assert p.kv_overrides == [("a.b", 7), ("c", False), ("d", "x"), ("e", 0.5)]
    assert p.model_kwargs()["kv_overrides"] == {"a.b": 7, "c": False, "d": "x", "e": 0.5}
    for bad in ("a=bool:yes", "a=list:1", "noequals"):
        with pytest.raises(ArgError, match="Invalid type for KV override"):
            P("--override-kv", bad)


def test_unknown_architecture_is_one_line_naming_it_and_the_supported_ones():
    from pyllama import arch
    with pytest.raises(ModelError) as e:
        arch.get("mamba")
    msg = str(e.value)
    assert "\n" not in msg and "'mamba'" in msg
    for name in ("llama", "qwen3moe", "phi3", "granite", "olmo2", "smollm3"):
        assert name in msg
