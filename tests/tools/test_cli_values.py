"""Flag values llama.cpp's common/arg.cpp handlers reject (same condition, same message), the
values it maps to another one (the same mapping, said in one line), and llama-completion's timing
block with real sampling figures (common_perf_print in common/sampling.cpp)."""
import io
import re

import pytest

from pyllama.tools._args import ArgError, parse

from toolsupport import run_tool

REJECTED = [
    # (tool, argv, llama.cpp's message)
    ("completion", ["--presence-penalty", "inf"], "presence-penalty must be finite"),
    ("completion", ["--frequency-penalty", "nan"], "frequency-penalty must be finite"),
    ("completion", ["--repeat-penalty", "0"], "repeat-penalty must be finite and greater than 0"),
    ("completion", ["--repeat-last-n", "-2"], "invalid repeat-last-n = -2"),
    ("completion", ["--dry-penalty-last-n", "-1"], "invalid dry-penalty-last-n = -1"),
    ("server", ["-cms", "-1"], "checkpoint-min-step must be non-negative"),
    ("server", ["--reasoning-budget", "-2"], "invalid value"),
    ("server", ["--spec-draft-n-max", "-1"], "invalid value"),
    ("server", ["--draft-max", "-1"], "invalid value"),
    ("server", ["--spec-ngram-simple-size-n", "0"], "between 1 and 1024 inclusive"),
    ("server", ["--spec-ngram-simple-size-m", "2000"], "between 1 and 1024 inclusive"),
    ("server", ["--slot-save-path", "/nonexistent-dir"], "not a directory: /nonexistent-dir"),
    ("server", ["--host", ""], "--host requires at least one address"),
    ("server", ["-np", "0"], "invalid value for n_parallel"),
    ("completion", ["--prio", "9"], "invalid value"),
    ("completion", ["-C", "zz"], "invalid cpumask"),
    ("completion", ["-Cr", "5"], "invalid range"),
    ("completion", ["-ts", "a,b"], "stof"),
    # std::stof("nan") passes llama.cpp's handlers and then samples from NaN (undefined): refused
    ("completion", ["--temp", "nan"], "not a number"),
    ("completion", ["--top-p", "nan"], "not a number"),
]


def P(tool, *argv):
    err = io.StringIO()
    return parse(tool, list(argv), env={}, stream=err), err.getvalue()


@pytest.mark.parametrize("tool,argv,message", REJECTED, ids=[" ".join(c[1]) for c in REJECTED])
def test_values_llama_cpp_rejects_are_rejected(tool, argv, message):
    with pytest.raises(ArgError) as e:
        P(tool, *argv)
    assert f'error while handling argument "{argv[0]}"' in str(e.value)
    assert message in str(e.value)


def test_accepted_values_still_parse():
    p, _ = P("completion", "-C", "0xff", "-Cr", "0-3", "--prio", "2", "-ts", "1,2",
             "--presence-penalty", "0.5", "--temp", "0.7")
    assert p.sampling.temp == pytest.approx(0.7)
    P("server", "--slot-save-path", "/tmp", "--host", "127.0.0.1")


def test_values_llama_cpp_maps_are_mapped_and_said():
    p, err = P("completion", "--temp", "-1")          # std::max(temp, 0.0f)
    assert p.sampling.temp == 0.0 and "--temp -1 is taken as 0" in err
    p, err = P("completion", "--dry-base", "0.5")     # a base < 1 is ignored
    assert p.sampling.dry_base == 1.75 and "--dry-base 0.5 is below 1 and ignored" in err


def test_completion_minimum_context_and_real_timings(tiny_model_path):
    """-c -5: llama-completion warns and runs with 8 (completion.cpp); the timing block prints
    the sampling time and the tokens the sampler accepted (prompt and generated), not zeros."""
    model = tiny_model_path("llama")
    r = run_tool("completion", "-m", model, "-p", "hello there", "-n", "6", "-no-cnv",
                 "-c", "-5", "--temp", "0")
    assert r.returncode == 0, r.stderr
    assert "llama_completion: warning: minimum context size is 8, using minimum size." in r.stderr
    sampling = re.search(r"sampling time = +([\d.]+) ms", r.stderr)
    samplers = re.search(r"samplers time = +([\d.]+) ms / +(\d+) tokens", r.stderr)
    prompt = re.search(r"prompt eval time = .* / +(\d+) tokens", r.stderr)
    assert sampling and samplers and prompt, r.stderr
    assert float(sampling.group(1)) > 0 and float(samplers.group(1)) > 0
    assert int(samplers.group(2)) == int(prompt.group(1)) + 6   # prompt + generated accepts
    assert "unaccounted time" in r.stderr
