"""SamplerParams defaults, `--samplers` / `--sampling-seq` parsing, general.sampling.* metadata
(written with the gguf package, read back with our reader)."""
import dataclasses

import gguf
import numpy as np
import pytest

from pyllama.gguf import GGUFReader
from pyllama.sampling import (
    DEFAULT_SAMPLERS, SamplerParams, parse_sampler_chars, parse_sampler_names, sampler_chars)


def test_defaults_are_llama_cpps():
    p = SamplerParams()
    assert (p.seed, p.top_k, p.top_p, p.min_p, p.temp, p.typ_p) == (0xFFFFFFFF, 40, 0.95, 0.05, 0.8, 1.0)
    assert (p.penalty_last_n, p.penalty_repeat, p.penalty_freq, p.penalty_present) == (64, 1.0, 0.0, 0.0)
    assert (p.dry_multiplier, p.dry_base, p.dry_allowed_length, p.dry_penalty_last_n) == (0.0, 1.75, 2, 64)
    assert p.dry_sequence_breakers == ["\n", ":", '"', "*"]
    assert (p.xtc_probability, p.xtc_threshold, p.top_n_sigma) == (0.0, 0.1, -1.0)
    assert (p.mirostat, p.mirostat_tau, p.mirostat_eta) == (0, 5.0, 0.1)
    assert p.samplers == list(DEFAULT_SAMPLERS) and sampler_chars(p.samplers) == "edskypmxt"
    assert {f.name for f in dataclasses.fields(p)} >= {
        "n_prev", "n_probs", "min_keep", "dynatemp_range", "dynatemp_exponent",
        "dry_penalty_last_n", "ignore_eos", "logit_bias"}


def test_sampler_names_canonical_alt_and_unknown():
    warned = []
    assert parse_sampler_names("top_k;top-p;nucleus;typ;temp;min-p;topk;Top_N_Sigma;typ-p;"
                               "adaptivep;penalties;typical;bogus", warn=warned.append) == [
        "top_k", "top_p", "top_p", "typ_p", "temperature", "min_p", "top_k", "top_n_sigma",
        "typ_p", "adaptive_p", "penalties"]
    # names are lower-cased; "typical" is no alias in llama.cpp
    assert warned == ["common_sampler_types_from_names: unable to match sampler by name 'typical'",
                      "common_sampler_types_from_names: unable to match sampler by name 'bogus'"]
    assert parse_sampler_names(["top-k", "dry"], allow_alt_names=False) == ["dry"]


def test_sampler_letters():
    assert parse_sampler_chars("edskypmxt") == list(DEFAULT_SAMPLERS)
    assert parse_sampler_chars("kq?t") == ["top_k", "temperature"]
    assert parse_sampler_chars("ia") == ["infill", "adaptive_p"]


def _write_gguf(path, kv):
    w = gguf.GGUFWriter(str(path), "llama")
    for key, (kind, value) in kv.items():
        getattr(w, "add_" + kind)(key, value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_general_sampling_metadata_replaces_defaults(tmp_path):
    path = tmp_path / "s.gguf"
    _write_gguf(path, {
        "general.sampling.sequence": ("string", "top_k;top-p;temp"),
        "general.sampling.top_k": ("int32", 20),
        "general.sampling.top_p": ("float32", 0.8),
        "general.sampling.min_p": ("float32", 0.0),
        "general.sampling.temp": ("float32", 0.6),
        "general.sampling.penalty_last_n": ("int32", 128),
        "general.sampling.mirostat_eta": ("float32", 1e-7),
    })
    meta = GGUFReader(str(path)).metadata
    p = SamplerParams.from_gguf_metadata(meta)
    assert p.samplers == ["top_k", "top_p", "temperature"]
    assert (p.top_k, p.min_p, p.penalty_last_n) == (20, 0.0, 128)
    assert p.top_p == float(np.float32(0.8)) and p.temp == float(np.float32(0.6))
    assert p.mirostat_eta == 0.0  # llama.cpp reads the value back from "%f" text: 0.000000


def test_user_set_fields_win_over_metadata():
    meta = {"general.sampling.temp": 0.6, "general.sampling.top_k": 20,
            "general.sampling.sequence": "temp"}
    base = SamplerParams(temp=0.3, samplers=["top_k", "temperature"],
                         user_set=frozenset({"temp", "samplers"}))
    p = SamplerParams.from_gguf_metadata(meta, base=base)
    assert (p.temp, p.top_k, p.samplers) == (0.3, 20, ["top_k", "temperature"])


def test_describe_like_common_params_sampling_print():
    text = SamplerParams().describe()
    assert text.startswith("\trepeat_last_n = 64, repeat_penalty = 1.000, frequency_penalty = 0.000")
    assert "top_k = 40, top_p = 0.950, min_p = 0.050" in text
    assert text.endswith("mirostat = 0, mirostat_lr = 0.100, mirostat_ent = 5.000, "
                         "adaptive_target = -1.000, adaptive_decay = 0.900")


def test_params_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SamplerParams().temp = 1.0
    assert SamplerParams().replace(temp=0.1).temp == 0.1
