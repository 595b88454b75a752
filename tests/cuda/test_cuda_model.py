"""End to end on the GPU: tiny models of every architecture, CudaBackend vs RefBackend, and the
batch-invariance contract (prefill == token by token, bit-identical). Skipped without a GPU."""
import numpy as np
import pytest

from pyllama import Context, load_model

pytestmark = pytest.mark.cuda

ARCHS = ["llama", "qwen2", "qwen3", "gemma2", "gemma3"]


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_match_ref(cuda, tiny_model_path, arch):
    path = tiny_model_path(arch)
    toks = [1, 5, 9, 260, 33, 2, 7, 100]
    want = Context(load_model(path, backend="ref"), n_ctx=128).eval(toks, logits_all=True)
    got = Context(load_model(path, backend="cuda"), n_ctx=128).eval(toks, logits_all=True)
    # ref quantizes activations to q8 for quantized weights; the GPU keeps them f32
    np.testing.assert_allclose(got, want, atol=0.05 * np.abs(want).max())
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.75


@pytest.mark.parametrize("arch", ["qwen2", "gemma3"])
def test_prefill_equals_token_by_token(cuda, tiny_model_path, arch):
    model = load_model(tiny_model_path(arch), backend="cuda")
    toks = list(range(3, 40))
    a = Context(model, n_ctx=128).eval(toks, logits_all=True)
    ctx = Context(model, n_ctx=128)
    b = np.concatenate([ctx.eval([t]) for t in toks])
    np.testing.assert_array_equal(a, b)
    c = Context(model, n_ctx=128, n_ubatch=5).eval(toks, logits_all=True)
    np.testing.assert_array_equal(a, c)
