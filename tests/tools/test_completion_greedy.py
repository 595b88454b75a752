"""llama-completion with its default arithmetic on the CPU (numerics='llama.cpp') prints
llama.cpp's own greedy continuation (tests/data/logits-*.json)."""
import json
import os

import pytest

from toolsupport import DATA, real_model_path_or_skip

pytestmark = pytest.mark.realmodel


@pytest.mark.parametrize("alias,case_id", [("gemma-3-270m", "code-py"),
                                           ("qwen2.5-coder-0.5b", "multilingual")])
def test_completion_greedy_is_llama_cpps(tool, alias, case_id):
    """`llama-completion --temp 0 -no-cnv -n 32 -fa off` prints llama.cpp's own greedy continuation
    (logits-*.json), on prompts where the batch-invariant arithmetic parts from it."""
    import pyllama
    path = real_model_path_or_skip(alias)
    with open(os.path.join(os.path.dirname(DATA), f"logits-{alias}.json"), encoding="utf-8") as f:
        case = [c for c in json.load(f)["cases"] if c["id"] == case_id][0]
    # the reference's own flags: flash attention off (llama.cpp's -fa auto turns it on on the CPU)
    r = tool("completion", "-m", path, "-p", case["text"], "-n", "32", "--temp", "0", "-no-cnv",
             "-c", "2048", "-fa", "off", timeout=900)
    assert r.returncode == 0, r.stderr
    vocab = pyllama.load_model(path).vocab
    text = b"".join(vocab.token_to_piece(t, False) for t in case["greedy"][:32])
    assert text in r.stdout, r.stdout[-300:]
    assert r.stdout.rsplit(text, 1)[1].strip(b"\n") == b""       # nothing generated after it
