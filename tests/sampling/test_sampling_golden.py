"""Our chain against llama.cpp's own sampler chain: golden.json holds what the reference tree's
src/llama-sampler.cpp (driven by tests/data/sampling/llama_sampler_driver.cpp) selected on the
same deterministic logits with the same seed: the token, the number of candidates left after the
chain and the top-3 candidate probabilities, at every step, for 22 configurations."""
import json
import os

import numpy as np
import pytest

from pyllama.sampling import SamplerChain, SamplerParams

HERE = os.path.join(os.path.dirname(__file__), "..", "data", "sampling")
GOLDEN = json.load(open(os.path.join(HERE, "golden.json")))


def oracle_logits(steps: int, n_vocab: int, period: int, eog_boost: bool) -> np.ndarray:
    """The logits gen_golden.py fed to llama.cpp: integer hashing only, no RNG stream; rows
    repeat with a period (so DRY and the penalties see repeats)."""
    i = np.arange(steps * n_vocab, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(12345)) % np.uint64(2 ** 32)
    h = (h ^ (h >> np.uint64(13))) * np.uint64(1274126177) % np.uint64(2 ** 32)
    x = (h.astype(np.float64) / 2 ** 32 * 8.0 - 4.0).astype(np.float32).reshape(steps, n_vocab)
    x[:, :20] += np.float32(3.0)
    if eog_boost:
        x[::3, 49] += np.float32(6.0)
    return x[np.arange(steps) % period] if period else x


def toy_piece(i: int) -> str:
    """The toy vocabulary of toy_vocab.cpp (DRY's sequence breakers are found in it; ids 49,
    99, ... are end-of-generation tokens with an empty piece)."""
    if i % 50 == 49:
        return ""
    return ["\n", ":", "x:", " *", '"q', "a", "b", "ab"][i % 50] if i % 50 < 8 else f"w{i}"


@pytest.mark.parametrize("config", list(GOLDEN["configs"]))
def test_matches_llama_cpp_sampler(config):
    case = GOLDEN["configs"][config]
    params = dict(case["params"])
    if "logit_bias" in params:
        params["logit_bias"] = {int(k): v for k, v in params["logit_bias"].items()}
    n = GOLDEN["n_vocab"]
    chain = SamplerChain(SamplerParams(seed=GOLDEN["seed"], **params), n, token_pieces=toy_piece,
                         eog_ids=range(49, n, 50), eot_id=49)
    logits = oracle_logits(GOLDEN["steps"], GOLDEN["n_vocab"], case["period"], case["eog_boost"])
    for step, want in enumerate(case["steps"]):
        token = chain.sample(logits[step])
        ids, p = chain.last_candidates
        assert (token, len(ids)) == (want["token"], want["n"]), f"step {step}"
        assert ids[:3].tolist() == [t for t, _ in want["top"]], f"step {step}"
        assert p[:3] == pytest.approx([q for _, q in want["top"]], abs=1e-6), f"step {step}"
        chain.accept(token)
