"""llama-embedding against llama.cpp 0c1e570's embeddings (tests/data/embeddings-llamacpp.npz) and
its output formats (examples/embedding/embedding.cpp)."""
import json
import os

import numpy as np
import pytest

from toolsupport import REPO, real_model_path_or_skip, run_tool

from pyllama.embedding import normalize

FIXTURE = os.path.join(REPO, "tests", "data", "embeddings-llamacpp.npz")
BATCH = os.path.join(REPO, "tests", "data", "embeddings-batch-llamacpp.npz")
NAME = "qwen2.5-coder-0.5b"


@pytest.fixture(scope="module")
def fixture():
    z = np.load(FIXTURE)
    return z, json.loads(bytes(z["meta"]).decode())


@pytest.mark.realmodel
def test_json_output_equals_llama_cpp(fixture):
    """Both lines in one batch, as llama.cpp's llama-embedding decodes them (its batch fixture)."""
    z, meta = fixture
    batch = np.load(BATCH)
    path = real_model_path_or_skip(NAME)
    prompts = [meta["prompts"][0], meta["prompts"][2]]
    r = run_tool("embedding", "-m", path, "-c", "512", "-fa", "off", "--pooling", "mean",
                 "--embd-output-format", "json+", "-p", "\n".join(prompts))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["object"] == "list" and [d["index"] for d in out["data"]] == [0, 1]
    for k, d in enumerate(out["data"]):
        want = normalize(batch[f"mean/{k}"], 2)
        assert d["object"] == "embedding"
        assert np.max(np.abs(np.array(d["embedding"]) - want)) <= 1e-7     # printed as %1.7f
    sim = out["cosineSimilarity"]
    assert len(sim) == 2 and sim[0][0] == pytest.approx(1.0) and sim[0][1] == sim[1][0]


@pytest.mark.realmodel
def test_default_listing_and_raw(fixture):
    z, meta = fixture
    path = real_model_path_or_skip(NAME)
    r = run_tool("embedding", "-m", path, "-c", "512", "-fa", "off", "--pooling", "none",
                 "--embd-normalize", "-1", "-p", meta["prompts"][0])
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stdout.decode().splitlines() if ln.startswith("embedding ")]
    want = z[f"{NAME}/none/0"]
    assert len(lines) == want.shape[0]
    first = [float(x) for x in lines[0].split(":")[1].split("...")[0].split()]
    np.testing.assert_allclose(first, want[0, :3], atol=1e-6)
    assert "last token in the prompt is not SEP or EOS" in r.stderr
    r = run_tool("embedding", "-m", path, "-c", "512", "-fa", "off", "--pooling", "last",
                 "--embd-normalize", "0", "--embd-output-format", "raw", "-p", meta["prompts"][2])
    row = r.stdout.decode().strip().split()
    assert len(row) == want.shape[1]
    np.testing.assert_allclose([float(x) for x in row],
                               np.round(normalize(z[f"{NAME}/last/2"], 0)), atol=1.0)


def test_bad_pooling_flag(tiny_model_path):
    r = run_tool("embedding", "-m", tiny_model_path("llama"), "--pooling", "max", "-p", "x")
    assert r.returncode == 1 and "--pooling" in r.stderr
