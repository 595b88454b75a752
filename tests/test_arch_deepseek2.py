"""deepseek2 / glm4moe specifics beyond the llama.cpp fixtures (tests/test_archsupport.py): what
llama.cpp's loader refuses or derives, and the numpy references the MoE router uses."""
import math

import numpy as np
import pytest

import pyllama
from pyllama.arch.deepseek2 import kq_scale
from pyllama.backend.ref import ggml_sigmoid, moe_group_mask
from pyllama.errors import ModelError
from pyllama.hparams import with_rope_cparams


def test_sigmoid_reference():
    x = np.array([-80.0, -3.5, 0.0, 1e-3, 2.25, 40.0], np.float32)
    one = np.float32(1)          # op_sigmoid: 1.f / (1.f + expf(-x)), f32 arithmetic
    want = np.array([one / (one + np.float32(math.exp(-float(v)))) for v in x], np.float32)
    assert np.array_equal(ggml_sigmoid(x), want)


def test_group_mask_keeps_the_best_groups_by_their_two_largest():
    sel = np.array([[0.9, 0.0, 0.0, 0.0, 0.5, 0.5, 0.4, 0.1]], np.float32)   # groups of 2
    out = moe_group_mask(sel, 4, 2)
    # group scores 0.9, 0.0, 1.0, 0.5 -> groups 2 and 0 kept
    assert np.array_equal(out[0, [0, 1, 4, 5]], sel[0, [0, 1, 4, 5]])
    assert np.all(np.isneginf(out[0, [2, 3, 6, 7]]))


def test_yarn_kq_scale_is_mscale_squared(tiny_model_path):
    m = pyllama.load_model(tiny_model_path("deepseek2"))
    hp = with_rope_cparams(m.hparams, 256)
    # factor 4, mscale_all_dim 1: (1 + 0.1 ln 4)^2 / sqrt(qk_nope + qk_rope)
    want = (1 + 0.1 * math.log(4.0)) ** 2 / math.sqrt(40)
    assert abs(kq_scale(hp) - want) < 1e-6
    assert m.hparams.rope_yarn_log_mul == pytest.approx(1.0)


@pytest.mark.parametrize("arch,key,value,msg", [
    ("deepseek2", "expert_gating_func", 4, "expert_gating_func 4"),
    ("deepseek2", "expert_group_used_count", 4, "bad expert groups"),
    ("glm4moe", "expert_gating_func", 3, "expert_gating_func 3"),
])
def test_refusals(tiny_model_path, arch, key, value, msg):
    with pytest.raises(ModelError, match=msg):
        pyllama.load_model(tiny_model_path(arch, overrides={key: value}))


def test_nextn_blocks_are_not_run(tiny_model_path):
    """nextn_predict_layers: llama.cpp's trunk is block_count minus them; a file without the
    NextN tensors (trunk-only) loads and runs the first block_count - 1 layers, as a 2-layer file."""
    full = pyllama.load_model(tiny_model_path("glm4moe", overrides={"block_count": 2}))
    trunk = pyllama.load_model(tiny_model_path("glm4moe", overrides={"nextn_predict_layers": 1}))
    assert trunk.hparams.n_layer == 2
    toks = np.arange(3, 13, dtype=np.int32)
    a = pyllama.Context(full, n_ctx=64).eval(toks, logits_all=True)
    b = pyllama.Context(trunk, n_ctx=64).eval(toks, logits_all=True)
    assert np.array_equal(a, b)          # the same tensors (the writer draws the same specs)
