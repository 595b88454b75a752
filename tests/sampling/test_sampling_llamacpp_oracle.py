"""Our chain against llama.cpp's own samplers (through llama-cpp-python's C API, no model
needed): the same seed and logits must give the same tokens. Skipped when llama_cpp is not
installed (it is an optional oracle: `pip install llama-cpp-python`)."""
import ctypes

import numpy as np
import pytest

from pyllama.sampling import SamplerChain, SamplerParams

L = pytest.importorskip("llama_cpp")

N_VOCAB = 2000
N_CTX_TRAIN = 4096


def _llama_chain(p: SamplerParams):
    """common_sampler_init for `p` (no grammar, no infill, DRY without breakers)."""
    chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
    add = lambda s: L.llama_sampler_chain_add(chain, s)  # noqa: E731
    if p.logit_bias:
        arr = (L.llama_logit_bias * len(p.logit_bias))()
        for i, (t, b) in enumerate(p.logit_bias.items()):
            arr[i].token, arr[i].bias = t, b
        add(L.llama_sampler_init_logit_bias(N_VOCAB, len(p.logit_bias), arr))
    if p.mirostat:
        add(L.llama_sampler_init_temp(p.temp))
        add(L.llama_sampler_init_mirostat(N_VOCAB, p.seed, p.mirostat_tau, p.mirostat_eta, 100)
            if p.mirostat == 1 else
            L.llama_sampler_init_mirostat_v2(p.seed, p.mirostat_tau, p.mirostat_eta))
        return chain
    make = {
        "penalties": lambda: L.llama_sampler_init_penalties(
            p.penalty_last_n, p.penalty_repeat, p.penalty_freq, p.penalty_present),
        "dry": lambda: L.llama_sampler_init_dry(
            None, N_CTX_TRAIN, p.dry_multiplier, p.dry_base, p.dry_allowed_length,
            p.dry_penalty_last_n, None, 0),
        "top_n_sigma": lambda: L.llama_sampler_init_top_n_sigma(p.top_n_sigma),
        "top_k": lambda: L.llama_sampler_init_top_k(p.top_k),
        "typ_p": lambda: L.llama_sampler_init_typical(p.typ_p, p.min_keep),
        "top_p": lambda: L.llama_sampler_init_top_p(p.top_p, p.min_keep),
        "min_p": lambda: L.llama_sampler_init_min_p(p.min_p, p.min_keep),
        "xtc": lambda: L.llama_sampler_init_xtc(p.xtc_probability, p.xtc_threshold, p.min_keep, p.seed),
        "temperature": lambda: L.llama_sampler_init_temp_ext(p.temp, p.dynatemp_range, p.dynatemp_exponent),
    }
    for name in p.samplers:
        add(make[name]())
    add(L.llama_sampler_init_dist(p.seed))
    return chain


def _llama_sample(chain, logits: np.ndarray) -> tuple[int, dict]:
    n = len(logits)
    data = (L.llama_token_data * n)()
    for i in range(n):
        data[i].id, data[i].logit, data[i].p = i, float(logits[i]), 0.0
    cur = L.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
    L.llama_sampler_apply(chain, ctypes.byref(cur))
    base = ctypes.cast(cur.data, ctypes.POINTER(L.llama_token_data))
    probs = {base[i].id: base[i].p for i in range(cur.size)}
    return base[cur.selected].id, probs


CONFIGS = {
    "default": {},
    "greedy": {"temp": 0.0},
    "top_p_only": {"top_k": 0, "min_p": 0.0, "top_p": 0.9},
    "min_p_only": {"top_k": 0, "top_p": 1.0, "min_p": 0.1},
    "typical": {"typ_p": 0.8, "top_k": 100},
    "top_n_sigma": {"top_n_sigma": 1.5, "top_k": 0},
    "xtc": {"xtc_probability": 0.5, "xtc_threshold": 0.05, "top_k": 0, "min_p": 0.0},
    "dynatemp": {"dynatemp_range": 0.5, "dynatemp_exponent": 1.5},
    "penalties": {"penalty_repeat": 1.3, "penalty_freq": 0.2, "penalty_present": 0.3, "penalty_last_n": 16},
    "dry": {"dry_multiplier": 0.8, "dry_allowed_length": 1},
    "mirostat1": {"mirostat": 1},
    "mirostat2": {"mirostat": 2, "mirostat_tau": 3.0},
    "logit_bias": {"logit_bias": {5: 3.0, 7: -100.0}},
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_same_tokens_as_llama_cpp(config):
    p = SamplerParams(seed=1234, **CONFIGS[config])
    ours = SamplerChain(p, N_VOCAB, n_ctx_train=N_CTX_TRAIN, token_pieces=lambda i: f"<{i}>")
    theirs = _llama_chain(p)
    rng = np.random.default_rng(0)
    for step in range(60):
        # peaked, with repeats of earlier tokens likely so penalties/DRY matter
        x = (rng.standard_normal(N_VOCAB) * 2.5).astype(np.float32)
        x[rng.integers(0, 30, 5)] += 4.0
        t_ours = ours.sample(x)
        t_theirs, p_theirs = _llama_sample(theirs, x)
        assert t_ours == t_theirs, f"step {step}"
        ids, probs = ours.last_candidates
        mine = {int(i): float(q) for i, q in zip(ids, probs)}
        assert mine.keys() == p_theirs.keys(), f"step {step}"
        assert [mine[k] for k in mine] == pytest.approx([p_theirs[k] for k in mine], abs=1e-5)
        ours.accept(t_ours)
        L.llama_sampler_accept(theirs, t_theirs)
    L.llama_sampler_free(theirs)
