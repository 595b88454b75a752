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


def _lse(x):
    m = x.max()
    return float(m + np.log(np.exp((x - m).astype(np.float64)).sum()))


@pytest.mark.realmodel
@pytest.mark.parametrize("fixture,name", [("gemma_path", "gemma-3-270m"),
                                          ("qwen_path", "qwen2.5-coder-0.5b")])
def test_real_model_matches_llama_cpp(cuda, request, fixture, name):
    """Teacher-forced logits on the GPU vs llama.cpp's reference (tests/data), the same bars as
    tests/test_fidelity.py sets for the CPU backend."""
    import json
    import os
    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                           f"logits-{name}.json")) as f:
        cases = json.load(f)["cases"]
    model = load_model(request.getfixturevalue(fixture), backend="cuda")
    n = top1 = 0
    dlp, worst = [], []
    for case in cases:
        ids = case["ids"]
        logits = Context(model, n_ctx=2048, n_batch=512, n_ubatch=512).eval(ids, logits_all=True)
        for i, ref in enumerate(case["positions"]):
            top = int(np.argmax(logits[i]))
            n += 1
            top1 += top == ref["top_ids"][0]
            if ref["top_logits"][0] - ref["top_logits"][1] >= 0.5 and top != ref["top_ids"][0]:
                worst.append((case["id"], i, top, ref["top_ids"][0]))
            if i + 1 < len(ids):
                ours = float(logits[i][ids[i + 1]]) - _lse(logits[i])
                dlp.append(abs(ours - (ref["next_logit"] - ref["lse"])))
    print(f"\n{name} cuda: top-1 {top1 / n:.4f}, mean |dlogp| {np.mean(dlp):.4f}")
    assert not worst, worst[:5]
    assert top1 / n >= 0.98
    assert float(np.mean(dlp)) <= 0.05
