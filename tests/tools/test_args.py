"""The flag table and llama.cpp's parser rules (common/arg.cpp), in-process."""
import io

import pytest

from pyllama.tools import _args
from pyllama.tools._args import ArgError, parse
from pyllama.tools._convert import process_escapes, stof, stoi


def P(tool, *argv, env=None):
    err = io.StringIO()
    p = parse(tool, list(argv), env=env or {}, stream=err)
    return p, err.getvalue()


def test_every_option_has_one_valid_disposition_and_unique_spellings():
    seen = {}
    for o in _args.OPTIONS:
        assert o.status in ("impl", "noop", "unsupported", "deprecated"), o.args
        assert o.kind in ("flag", "bool", "int", "uint", "float", "str", "enum", "list",
                          "optenum", "pair"), o.args
        if o.status in ("noop", "unsupported", "deprecated"):
            assert o.note, f"{o.args} needs a note"
        for a in o.all_args:
            for t in o.tools:
                assert (t, a) not in seen, f"{a} declared twice for {t}"
                seen[(t, a)] = o


def test_spec_section_1_2_flags_exist():
    for flag in ["-m", "-p", "-f", "-n", "-c", "-b", "-ub", "-np", "-t", "-fa", "-ctk", "-ctv",
                 "--swa-full", "--swa-extra", "-ngl", "--temp", "--top-k", "--top-p", "--min-p",
                 "-s", "--repeat-penalty", "--samplers", "-md", "--spec-draft-n-max",
                 "--log-disable", "-lv", "--grammar", "--lora", "--no-mmap", "--draft-max"]:
        assert any(flag in o.all_args for o in _args.OPTIONS), flag


def test_values_and_aliases_map_to_params():
    p, _ = P("completion", "-c", "256", "--ctx_size", "512", "-ub", "64", "--temperature", "0.5",
             "--n-predict", "7", "-s", "-1", "--top-k", "3", "-ctk", "q8_0", "--swa-extra", "4")
    assert (p.n_ctx, p.n_ubatch, p.n_predict) == (512, 64, 7)
    assert p.sampling.temp == 0.5 and p.sampling.top_k == 3 and p.sampling.seed == 2**32 - 1
    assert p.cache_type_k == "q8_0" and p.swa_extra == 4
    assert {"temp", "top_k", "seed"} <= p.sampling.user_set
    kw = p.context_kwargs()
    assert kw["n_ctx"] == 512 and kw["type_k"] == "q8_0" and kw["swa_extra"] == 4


def test_stoi_stof_rules():
    assert stoi("512abc") == 512 and stoi("  -3") == -3 and stof("0.5x") == 0.5
    p, _ = P("completion", "-c", "512abc")
    assert p.n_ctx == 512
    with pytest.raises(ArgError, match=r'^error while handling argument "-c": stoi'):
        P("completion", "-c", "abc")
    with pytest.raises(ArgError, match="stof"):
        P("completion", "--temp", "x")


def test_parse_errors_use_llama_cpp_wording():
    with pytest.raises(ArgError, match=r"^error: invalid argument: --bogus$"):
        P("completion", "--bogus")
    with pytest.raises(ArgError, match=r"^error: invalid argument: --ctx-size=5$"):
        P("completion", "--ctx-size=5")
    with pytest.raises(ArgError, match='"-c": expected value for argument'):
        P("completion", "-c")
    with pytest.raises(ArgError, match="Unsupported cache type: q9"):
        P("completion", "-ctk", "q9")
    with pytest.raises(ArgError, match="failed to open file '/nonexistent'"):
        P("completion", "-f", "/nonexistent")
    with pytest.raises(ArgError, match="invalid argument: -p"):
        P("server", "-p", "x")           # excluded from the server
    with pytest.raises(ArgError, match="invalid argument: -cnv"):
        P("cli", "-cnv")
    with pytest.raises(ArgError, match="invalid value for n_parallel"):
        P("server", "-np", "0")


def test_env_below_cli_with_warning():
    p, err = P("completion", env={"LLAMA_ARG_CTX_SIZE": "1024"})
    assert p.n_ctx == 1024
    p, err = P("completion", "-c", "64", env={"LLAMA_ARG_CTX_SIZE": "1024"})
    assert p.n_ctx == 64
    assert ("warn: LLAMA_ARG_CTX_SIZE environment variable is set, but will be overwritten by "
            "command line argument -c") in err


def test_env_errors():
    with pytest.raises(ArgError, match=r'^error while handling environment variable '
                                       r'"LLAMA_ARG_CTX_SIZE": stoi$'):
        P("completion", env={"LLAMA_ARG_CTX_SIZE": "abc"})
    with pytest.raises(ArgError, match="invalid boolean value"):
        P("server", env={"LLAMA_ARG_KV_UNIFIED": "maybe"})


@pytest.mark.parametrize("value,expect", [("1", True), ("true", True), ("on", True),
                                          ("enabled", True), ("0", False), ("no", False),
                                          ("yes", False), ("", False)])
def test_truthy_env_for_no_value_flags(value, expect):
    p, _ = P("completion", env={"LLAMA_ARG_SWA_FULL": value})
    assert p.swa_full is expect


def test_bool_pairs_and_llama_arg_no():
    p, _ = P("server", env={"LLAMA_ARG_KV_UNIFIED": "true"})
    assert p.kv_unified is True
    p, _ = P("server", env={"LLAMA_ARG_KV_UNIFIED": "true", "LLAMA_ARG_NO_KV_UNIFIED": "x"})
    assert p.kv_unified is False
    p, _ = P("server", env={"LLAMA_ARG_NO_CONT_BATCHING": ""})
    assert p.cont_batching is False
    p, _ = P("server", "-kvu", "--no-kv-unified")
    assert p.kv_unified is False
    p, _ = P("completion", "--no-escape", "-p", "a\\nb")
    assert p.prompt == "a\\nb"


def test_escapes_and_file_prompt(tmp_path):
    p, _ = P("completion", "-p", "a\\nb\\t\\x41\\\\", "-r", "x\\n")
    assert p.prompt == "a\nb\tA\\" and p.antiprompt == ["x\n"]
    f = tmp_path / "p.txt"
    f.write_text("line\\n1\n")
    p, _ = P("completion", "-f", str(f))
    assert p.prompt == "line\n1" and p.prompt_file == str(f)   # one trailing newline stripped
    p, _ = P("perplexity", "-p", "a\\nb")                       # escapes off in perplexity
    assert p.prompt == "a\\nb" and p.n_ctx == 512
    assert process_escapes("\\q") == "\\q"


def test_per_tool_defaults():
    assert P("server")[0].n_parallel == -1
    assert P("completion")[0].use_jinja is False
    assert P("tokenize")[0].parse_special is True
    assert P("speculative")[0].sampling.n_probs == 128
    assert P("cli")[0].verbosity == 1


def test_lora_and_control_vector_flags():
    """common/arg.cpp: --lora / --lora-scaled append to one ordered list (comma-separated
    values), --control-vector(-scaled) likewise, --control-vector-layer-range takes two values."""
    p, _ = P("completion", "--lora", "a.gguf,b.gguf", "--lora-scaled", "c.gguf:0.5",
             "--lora", "d.gguf", "--control-vector", "v.gguf", "--control-vector-scaled",
             "w.gguf:-0.25", "--control-vector-layer-range", "3", "10")
    assert p.lora_adapters == [("a.gguf", 1.0), ("b.gguf", 1.0), ("c.gguf", 0.5), ("d.gguf", 1.0)]
    assert p.control_vectors == [("v.gguf", 1.0), ("w.gguf", -0.25)]
    assert p.control_vector_layer_range == (3, 10)
    kw = p.context_kwargs(512)
    assert kw["lora_adapters"][2] == ("c.gguf", 0.5) and kw["lora_apply"] is True
    assert kw["control_vector_layer_range"] == (3, 10)
    assert "lora_adapters" not in P("completion")[0].context_kwargs(512)
    with pytest.raises(ArgError, match="lora-scaled format: FNAME:SCALE"):
        P("completion", "--lora-scaled", "a.gguf")
    with pytest.raises(ArgError, match="expected value for argument"):
        P("completion", "--control-vector-layer-range", "3")
    assert P("server", "--lora-init-without-apply")[0].lora_init_without_apply is True
    with pytest.raises(ArgError, match="invalid argument"):
        P("completion", "--lora-init-without-apply")      # llama-server only (LLAMA_EXAMPLE_SERVER)


def test_not_supported_exits_with_message():
    for argv in (["--rpc", "127.0.0.1:50052"], ["--log-jsonl"], ["-hf", "x/y"]):
        with pytest.raises(ArgError, match="not supported by pyllama yet"):
            P("completion", *argv)
    p, _ = P("completion", "--no-log-jsonl")   # the default side of an unsupported pair
    assert p.log_jsonl is False
    with pytest.raises(ArgError, match="not supported"):
        P("completion", env={"LLAMA_ARG_LOG_JSONL": "1"})


def test_noop_flags_warn_once():
    p, err = P("completion", "-ngl", "99", "-sm", "row", "-sm", "layer", "--numa", "distribute")
    assert p.n_gpu_layers == "99"
    assert err.count("-sm has no effect") == 1 and "--numa has no effect" in err
    assert "specified multiple times" in err


def test_old_spellings_keep_working():
    p, err = P("speculative", "--draft-max", "16", "--draft-min", "5", "--draft-p-min", "0.75",
               "-cd", "4096", "--no-mmap", "--mlock")
    assert p.speculative.n_max == 16 and p.speculative.n_min == 5
    assert p.speculative.p_min == 0.75
    assert err.count("old spelling") == 4   # --draft-p-min is a current alias
    p, err = P("speculative", env={"LLAMA_ARG_DRAFT_MAX": "8", "LLAMA_ARG_DRAFT_MIN": "2"})
    assert (p.speculative.n_max, p.speculative.n_min) == (8, 2) and "old spelling" in err


def test_bare_fa_and_color():
    p, err = P("completion", "-fa", "-p", "x")
    assert p.flash_attn == "on" and p.prompt == "x" and "bare -fa" in err
    p, _ = P("completion", "-fa", "off")
    assert p.flash_attn == "off"
    p, _ = P("completion", "--color", "-n", "3")
    assert p.color == "on" and p.n_predict == 3
    p, _ = P("completion", "--color", "auto")
    assert p.color == "auto"
    with pytest.raises(ArgError, match="unknown value for --flash-attn: 'x'"):
        P("completion", env={"LLAMA_ARG_FLASH_ATTN": "x"})


def test_md_alone_enables_draft_and_lists_accumulate():
    p, _ = P("speculative", "-md", "d.gguf")
    assert p.speculative.types == ["draft-simple"] and p.speculative.model == "d.gguf"
    p, _ = P("server", "--spec-type", "ngram-simple", "--spec-type", "draft-simple,none")
    assert p.speculative.types == ["ngram-simple", "draft-simple", "none"]
    p, _ = P("server", "--spec-type", "ngram-cache", "-lcs", "s.bin", "-lcd", "d.bin")
    assert p.speculative.types == ["ngram-cache"]
    assert (p.speculative.lookup_cache_static, p.speculative.lookup_cache_dynamic) == \
        ("s.bin", "d.bin")
    with pytest.raises(ArgError, match="'draft-eagle3' needs an EAGLE3 draft head"):
        P("server", "--spec-type", "draft-eagle3")
    p, _ = P("server", "--spec-type", "ngram-map-k,ngram-map-k4v", "--spec-type", "ngram-mod")
    assert p.speculative.types == ["ngram-map-k", "ngram-map-k4v", "ngram-mod"]
    with pytest.raises(ArgError, match="unknown speculative decoding type: bogus"):
        P("server", "--spec-type", "bogus")
    p, _ = P("completion", "-r", "a", "-r", "b", "--dry-sequence-breaker", "none")
    assert p.antiprompt == ["a", "b"] and p.sampling.dry_sequence_breakers == []


def test_ngram_drafter_flags_and_spec_default():
    # common/arg.cpp: the n-gram settings, their range checks, --spec-default adding ngram-mod
    p, _ = P("server", "--spec-ngram-map-k4v-size-n", "8", "--spec-ngram-map-k4v-size-m", "24",
             "--spec-ngram-map-k4v-min-hits", "2", "--spec-ngram-mod-n-match", "16",
             "--spec-ngram-simple-min-hits", "3")
    sp = p.speculative
    assert (sp.ngram_map_k4v_size_n, sp.ngram_map_k4v_size_m, sp.ngram_map_k4v_min_hits) == \
        (8, 24, 2)
    assert sp.ngram_mod_n_match == 16 and sp.ngram_simple_min_hits == 3
    with pytest.raises(ArgError, match="ngram min hits must be at least 1"):
        P("server", "--spec-ngram-map-k-min-hits", "0")
    with pytest.raises(ArgError, match="ngram n-max must be between 0 and 1024 inclusive"):
        P("server", "--spec-ngram-mod-n-max", "2000")
    p, _ = P("server", "--spec-type", "ngram-simple", "--spec-default")
    assert p.speculative.types == ["ngram-simple", "ngram-mod"]
    assert (p.speculative.ngram_mod_n_match, p.speculative.ngram_mod_n_min,
            p.speculative.ngram_mod_n_max) == (24, 48, 64)
    p, _ = P("server", "--spec-default", "--spec-ngram-mod-n-max", "32")
    assert p.speculative.types == ["ngram-mod"] and p.speculative.ngram_mod_n_max == 32


def test_samplers_and_logit_bias():
    p, _ = P("completion", "--samplers", "top-k;temp;nucleus", "-l", "15043+1", "-l", "2-0.5")
    assert p.sampling.samplers == ["top_k", "temperature", "top_p"]
    assert p.sampling.logit_bias == [(15043, 1.0), (2, -0.5)]
    p, _ = P("completion", "--sampling-seq", "kt")
    assert p.sampling.samplers == ["top_k", "temperature"]


def test_sampler_params_mapping():
    from pyllama.sampling import SamplerParams
    p, _ = P("completion", "--temp", "0", "--top-k", "5", "-l", "3+2", "--mirostat", "2")
    sp = p.sampler_params(SamplerParams)
    assert sp.temp == 0 and sp.top_k == 5 and sp.logit_bias == {3: 2.0} and sp.mirostat == 2
    assert "top_k" in sp.user_set
    names = {f for f in SamplerParams.__dataclass_fields__}
    for o in _args.OPTIONS:   # every implemented sampling flag reaches a SamplerParams field
        if o.dest.startswith("sampling.") and o.status == "impl":
            assert o.dest.split(".", 1)[1] in names, o.args


def test_device_none_and_invalid():
    p, _ = P("completion", "-dev", "none")
    assert p.n_gpu_layers == "0" and p.model_kwargs()["backend"] == "cpu"
    with pytest.raises(ArgError, match="invalid device: CPU"):
        P("completion", "-dev", "CPU")


def test_usage_mentions_every_current_flag():
    text = _args.usage("completion")
    assert text.startswith("----- common params -----")
    for o in _args.options_for("completion"):
        if o.status != "deprecated":
            assert o.args[0] in text
    assert "(env: LLAMA_ARG_CTX_SIZE)" in text


def test_config_file_below_env_below_cli(tmp_path):
    cfg = tmp_path / "llama.cpp" / "config.ini"
    cfg.parent.mkdir()
    cfg.write_text("# comment\nctx-size = 300\ntemp = 0.3\nswa-full = true\nno-escape = true\n"
                   "unknown-key = 1\n[other-model]\nctx-size = 999\n[*]\ntop-k = 7\n")
    p, _ = P("completion", env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert (p.n_ctx, p.sampling.temp, p.swa_full, p.escape, p.sampling.top_k) == \
        (300, 0.3, True, False, 7)
    p, _ = P("completion", "-c", "100",
             env={"XDG_CONFIG_HOME": str(tmp_path), "LLAMA_ARG_TEMPERATURE": "0.9"})
    assert (p.n_ctx, p.sampling.temp) == (100, 0.9)
    cfg.write_text("ctx-size = abc\n")
    with pytest.raises(ArgError, match="config file .* key \"ctx-size\": stoi"):
        P("completion", env={"XDG_CONFIG_HOME": str(tmp_path)})


def test_kv_k_center_flag():
    assert P("completion")[0].context_kwargs()["kv_k_center"] is None            # auto
    assert P("completion", "--kv-k-center", "off")[0].context_kwargs()["kv_k_center"] is False
    p, _ = P("perplexity", env={"LLAMA_ARG_KV_K_CENTER": "on"})
    assert p.context_kwargs()["kv_k_center"] is True
    with pytest.raises(ArgError):
        P("completion", "--kv-k-center", "yes")


def test_numerics_defaults_per_tool_flag_and_env():
    # one sequence, prompt then token by token: llama.cpp's arithmetic on the CPU (speculative:
    # llama-speculative(-simple), whose one-row verification prints llama-completion's text)
    for tool in ("cli", "completion", "perplexity", "speculative"):
        p, _ = P(tool)
        assert p.numerics_for("cpu") == "llama.cpp" and p.numerics_for("cuda") == "invariant"
    for tool in ("server", "lookup"):            # slots, llama-lookup: batch-invariant
        assert P(tool)[0].numerics_for("cpu") == "invariant"
    p, _ = P("completion", "--numerics", "invariant")
    assert p.numerics_for("cpu") == "invariant"
    p, _ = P("server", env={"LLAMA_ARG_NUMERICS": "llama.cpp"})
    assert p.numerics_for("cpu") == "llama.cpp"
    p, _ = P("completion", "--numerics", "llama.cpp")
    assert p.numerics_for("cuda") == "llama.cpp"      # explicit: the Context rejects it on cuda
    with pytest.raises(ArgError, match='error while handling argument "--numerics"'):
        P("completion", "--numerics", "fast")
    with pytest.raises(ArgError, match="invalid argument: --numerics"):
        P("tokenize", "--numerics", "invariant")
