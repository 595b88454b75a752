"""Teacher-forced logits of the bundled models vs llama.cpp's (recorded with llama.cpp 0c1e570,
tests/data): top-1 agreement and next-token log-probabilities, f16 KV, every reference prompt."""
import json
import os

import numpy as np
import pytest

import pyllama

DATA = os.path.join(os.path.dirname(__file__), "data")
pytestmark = pytest.mark.realmodel


def load_cases(model):
    with open(os.path.join(DATA, f"logits-{model}.json")) as f:
        return json.load(f)["cases"]


def _lse(x):
    m = x.max()
    return float(m + np.log(np.exp((x - m).astype(np.float64)).sum()))


def fidelity(path, model_name):
    model = pyllama.load_model(path)
    stats = {"n": 0, "top1": 0, "confident": 0, "confident_ok": 0, "dlp": []}
    worst = []
    for case in load_cases(model_name):
        ids = case["ids"]
        assert model.tokenize(case["text"], add_special=True, parse_special=True) == ids
        ctx = pyllama.Context(model, n_ctx=2048, n_batch=512, n_ubatch=512)
        logits = ctx.eval(ids, logits_all=True)
        for i, ref in enumerate(case["positions"]):
            row = logits[i]
            top = int(np.argmax(row))
            gap = ref["top_logits"][0] - ref["top_logits"][1]
            stats["n"] += 1
            stats["top1"] += top == ref["top_ids"][0]
            if gap >= 0.5:
                stats["confident"] += 1
                stats["confident_ok"] += top == ref["top_ids"][0]
                if top != ref["top_ids"][0]:
                    worst.append((case["id"], i, top, ref["top_ids"][0], gap))
            if i + 1 < len(ids):
                ours = float(row[ids[i + 1]]) - _lse(row)
                theirs = ref["next_logit"] - ref["lse"]
                stats["dlp"].append(abs(ours - theirs))
    return stats, worst


@pytest.mark.parametrize("fixture,name", [("gemma_path", "gemma-3-270m"),
                                          ("qwen_path", "qwen2.5-coder-0.5b")])
def test_teacher_forced_logits_match_llama_cpp(fixture, name, request):
    stats, worst = fidelity(request.getfixturevalue(fixture), name)
    top1 = stats["top1"] / stats["n"]
    mean_dlp = float(np.mean(stats["dlp"]))
    print(f"\n{name}: positions {stats['n']}, top-1 agreement {top1:.4f}, confident "
          f"{stats['confident_ok']}/{stats['confident']}, mean |dlogp| {mean_dlp:.4f}")
    assert not worst, f"top-1 differs where llama.cpp's gap >= 0.5: {worst[:5]}"
    assert top1 >= 0.98
    assert mean_dlp <= 0.05
