"""Regenerate golden.json: llama.cpp's own sampler chain (llama_sampler_driver.cpp, built from the
reference tree 0c1e570's src/llama-sampler.cpp + src/llama-impl.cpp with stubs for the unused
ggml/vocab/grammar symbols) run on deterministic logits. Not run by the tests.

    g++ -O1 -std=c++17 -I$LLAMA/include -I$LLAMA/src -I$LLAMA/ggml/include -c ...  (see README)
    python tests/data/sampling/gen_golden.py ./driver > tests/data/sampling/golden.json
"""
import json
import subprocess
import sys

import numpy as np

N_VOCAB, STEPS, TOP = 1000, 24, 3


def oracle_logits(period: int = 0, eog_boost: bool = False) -> np.ndarray:
    """[STEPS, N_VOCAB] float32 from integer hashing only (no RNG whose stream could change);
    with a period the rows repeat, so the samples repeat and DRY has sequences to penalise."""
    i = np.arange(STEPS * N_VOCAB, dtype=np.uint64)
    h = (i * np.uint64(2654435761) + np.uint64(12345)) % np.uint64(2 ** 32)
    h = (h ^ (h >> np.uint64(13))) * np.uint64(1274126177) % np.uint64(2 ** 32)
    x = (h.astype(np.float64) / 2 ** 32 * 8.0 - 4.0).astype(np.float32).reshape(STEPS, N_VOCAB)
    x[:, :20] += np.float32(3.0)  # a few likely tokens, so repeats (penalties, DRY) happen
    if eog_boost:  # every third row makes the end-of-generation token 49 likely
        x[::3, 49] += np.float32(6.0)
    return x[np.arange(STEPS) % period] if period else x


BREAKERS = ["\n", ":", '"', "*", "ab"]  # the driver's list when dry_brk=1

# name -> (SamplerParams fields, driver arguments)
CONFIGS = {
    "default": ({}, {}),
    "greedy": ({"temp": 0.0}, {"temp": 0}),
    "top_p_only": ({"top_k": 0, "min_p": 0.0, "top_p": 0.9}, {"top_k": 0, "min_p": 0, "top_p": 0.9}),
    "min_p_only": ({"top_k": 0, "top_p": 1.0, "min_p": 0.1}, {"top_k": 0, "top_p": 1, "min_p": 0.1}),
    "typical": ({"typ_p": 0.8, "top_k": 100}, {"typ_p": 0.8, "top_k": 100}),
    "top_n_sigma": ({"top_n_sigma": 1.5, "top_k": 0}, {"nsigma": 1.5, "top_k": 0}),
    "xtc": ({"xtc_probability": 0.5, "xtc_threshold": 0.05, "top_k": 0, "min_p": 0.0},
            {"xtc_p": 0.5, "xtc_t": 0.05, "top_k": 0, "min_p": 0}),
    "dynatemp": ({"dynatemp_range": 0.5, "dynatemp_exponent": 1.5}, {"dyn_range": 0.5, "dyn_exp": 1.5}),
    "penalties": ({"penalty_repeat": 1.3, "penalty_freq": 0.2, "penalty_present": 0.3, "penalty_last_n": 16},
                  {"repeat": 1.3, "freq": 0.2, "present": 0.3, "last_n": 16}),
    "dry": ({"dry_multiplier": 0.8, "dry_allowed_length": 1, "dry_sequence_breakers": []},
            {"dry_mult": 0.8, "dry_allowed": 1}),
    "mirostat1": ({"mirostat": 1}, {"mirostat": 1}),
    "mirostat2": ({"mirostat": 2, "mirostat_tau": 3.0}, {"mirostat": 2, "tau": 3.0}),
    "logit_bias": ({"logit_bias": {5: 3.0}}, {"bias_tok": 5, "bias": 3.0}),
    "min_keep": ({"top_p": 0.3, "min_keep": 5, "top_k": 0}, {"top_p": 0.3, "min_keep": 5, "top_k": 0}),
    "seq_kmt": ({"samplers": ["top_k", "min_p", "temperature"], "temp": 0.7}, {"seq": "kmt", "temp": 0.7}),
    "adaptive_p": ({"samplers": ["top_k", "adaptive_p"], "adaptive_target": 0.3, "top_k": 100},
                   {"seq": "ka", "ad_target": 0.3, "top_k": 100}),
    "adaptive_p_off": ({"samplers": ["top_k", "temperature", "adaptive_p"]}, {"seq": "kta"}),
    "n_sigma_default": ({"top_n_sigma": 1.0}, {"nsigma": 1.0}),
    # DRY with sequence breakers over the toy vocabulary of toy_vocab.cpp (its "ab" breaker has a
    # partial-overlap head "a" whose tail is tokenised)
    "dry_breakers": ({"dry_multiplier": 0.8, "dry_allowed_length": 1, "dry_penalty_last_n": 20,
                      "dry_sequence_breakers": BREAKERS}, {"dry_mult": 0.8, "dry_allowed": 1,
                                                           "dry_last_n": 20, "dry_brk": 1}),
    "dry_breakers_base": ({"dry_multiplier": 2.0, "dry_base": 1.1, "dry_allowed_length": 2,
                           "dry_sequence_breakers": BREAKERS, "temp": 0.5},
                          {"dry_mult": 2.0, "dry_base": 1.1, "dry_allowed": 2, "dry_brk": 1, "temp": 0.5}),
    # infill over the toy vocabulary (EOG = ids 49, 99, ...; "a" prefixes "ab", "w10" "w108")
    "infill": ({"samplers": ["top_k", "infill"], "top_k": 60}, {"seq": "ki", "top_k": 60}),
    "infill_text": ({"samplers": ["top_k", "temperature", "infill"], "top_k": 4, "temp": 3.0},
                    {"seq": "kti", "top_k": 4, "temp": 3.0}),
}
SEED = 1234


PERIODIC = {"dry": 3, "dry_breakers": 3, "dry_breakers_base": 4, "penalties": 3}
EOG_BOOST = {"infill"}


def run(driver: str) -> dict:
    out = {"n_vocab": N_VOCAB, "steps": STEPS, "seed": SEED, "configs": {}}
    for name, (params, args) in CONFIGS.items():
        oracle_logits(PERIODIC.get(name, 0), name in EOG_BOOST).tofile("/tmp/oracle_logits.bin")
        lines = subprocess.run([driver, "/tmp/oracle_logits.bin", str(N_VOCAB), str(STEPS),
                                f"seed={SEED}"] + [f"{k}={v}" for k, v in args.items()],
                               capture_output=True, text=True, check=True).stdout.splitlines()
        steps = []
        for line in lines:
            parts = line.split()
            cand = sorted(((int(a), float(b)) for a, b in (q.split(":") for q in parts[2:])),
                          key=lambda c: (-c[1], c[0]))
            steps.append({"token": int(parts[0]), "n": int(parts[1]), "top": cand[:TOP]})
        out["configs"][name] = {"params": params, "period": PERIODIC.get(name, 0),
                                "eog_boost": name in EOG_BOOST, "steps": steps}
    return out


if __name__ == "__main__":
    json.dump(run(sys.argv[1]), sys.stdout, indent=None, separators=(",", ":"))
