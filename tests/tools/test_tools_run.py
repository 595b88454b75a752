"""Each tool end to end through `python -m pyllama <tool>` on a tiny random-weight GGUF: output
format, the numbers against the library, and bad input (one stderr line, exit 1, no traceback)."""
import json
import math
import re

import numpy as np
import pytest

GPL = None


@pytest.fixture(scope="module")
def tiny(tiny_model_path):
    return tiny_model_path("llama")


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    """~600 words of plain text (enough tokens for a few 64-token perplexity chunks)."""
    words = ("the cat sat on a mat while the other cats were singing in the rain and "
             "nobody knew why there were so many of them ").split()
    rng = np.random.default_rng(0)
    path = tmp_path_factory.mktemp("text") / "text.txt"
    path.write_text(" ".join(rng.choice(words, 600)) + "\n")
    return str(path)


@pytest.mark.parametrize("name", ["completion", "cli", "perplexity", "tokenize", "server",
                                  "speculative", "speculative-simple"])
def test_help_version_unknown_flag(tool, name):
    r = tool(name, "--help")
    if r.returncode == 1 and b"unknown tool" in r.stdout + r.stderr.encode():
        pytest.skip(f"llama-{name} not written yet")
    assert r.returncode == 0 and b"----- common params -----" in r.stdout
    r = tool(name, "--version")
    assert r.returncode == 0 and re.match(r"version: \S+ \(build \d+, commit \w+\)\nbuilt with ",
                                          r.stderr)
    r = tool(name, "--definitely-not-a-flag")
    assert r.returncode == 1 and r.stderr == "error: invalid argument: --definitely-not-a-flag\n"


@pytest.mark.parametrize("name", ["completion", "cli", "perplexity", "simple", "bench"])
def test_missing_model_is_one_line_exit_1(tool, name):
    args = {"simple": ["-m", "/nonexistent.gguf", "-n", "2"],
            "bench": ["-m", "/nonexistent.gguf", "-p", "4", "-n", "0"]}.get(
        name, ["-m", "/nonexistent.gguf", "-p", "hi", "-n", "2"])
    r = tool(name, *args)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr and "nonexistent" in r.stderr + r.stdout.decode()


def test_corrupt_model(tool, tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + bytes(64))
    r = tool("completion", "-m", str(bad), "-p", "x", "-no-cnv")
    assert r.returncode == 1 and "Traceback" not in r.stderr


def _greedy(path, prompt, n):
    import pyllama
    from pyllama.generate import generate
    from pyllama.sampling import SamplerChain, SamplerParams
    model = pyllama.load_model(path)
    ctx = pyllama.Context(model, n_ctx=256)
    ids = model.tokenize(prompt, add_special=True, parse_special=True)
    s = SamplerChain(SamplerParams(temp=0.0), model.n_vocab, eog_ids=tuple(model.vocab.eog_ids))
    out = list(generate(ctx, ids, s, n_predict=n))
    return model, ids, out


def test_completion_one_shot_greedy(tool, tiny):
    model, ids, gen = _greedy(tiny, "the cat", 8)
    r = tool("completion", "-m", tiny, "-p", "the cat", "-n", "8", "--temp", "0", "-no-cnv",
             "-c", "256")
    assert r.returncode == 0, r.stderr
    text = b"".join(model.token_to_piece(t, False) for t in ids + gen)
    assert r.stdout.startswith(text)
    assert "common_perf_print: prompt eval time" in r.stderr
    assert "eval time" in r.stderr and "Traceback" not in r.stderr


def test_cli_no_cnv_runs_as_completion(tool, tiny):
    """Old `llama-cli ... -no-cnv` scripts: llama-completion's output, with one line saying so
    (llama.cpp 0c1e570's llama-cli rejects the flag)."""
    args = ("-m", tiny, "-p", "the cat", "-n", "8", "--temp", "0", "-c", "256")
    want = tool("completion", *args, "-no-cnv")
    for spelling in ("-no-cnv", "--no-conversation"):
        r = tool("cli", *args, spelling)
        assert r.returncode == 0, r.stderr
        assert r.stdout == want.stdout
        assert r.stderr.count("running as llama-completion") == 1


def test_completion_reverse_prompt_and_no_display(tool, tiny):
    model, ids, gen = _greedy(tiny, "the cat", 8)
    pieces = [model.token_to_piece(t, False) for t in gen]
    # stop on the first generated piece that is whole UTF-8 text (random weights also emit bytes)
    k = next(i for i, p in enumerate(pieces) if p and _utf8(p))
    r = tool("completion", "-m", tiny, "-p", "the cat", "-n", "8", "--temp", "0", "-no-cnv",
             "--no-display-prompt", "--no-escape", "-r", pieces[k].decode(), "-c", "256")
    assert r.returncode == 0
    assert r.stdout == b"".join(pieces[:k + 1]) + b"\n\n"


def _utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def test_completion_conversation_eof(tool, tiny):
    r = tool("completion", "-m", tiny, "-cnv", "-p", "hello", "-n", "4", "--temp", "0",
             stdin=b"")
    assert r.returncode == 0, r.stderr
    assert "EOF by user" in r.stderr and b"\n> " in r.stdout


def test_simple(tool, tiny):
    model, ids, gen = _greedy(tiny, "the cat", 6)
    r = tool("simple", "-m", tiny, "-n", "6", "the", "cat")
    assert r.returncode == 0, r.stderr
    text = b"".join(model.token_to_piece(t, True) for t in ids + gen) + b"\n"
    assert r.stdout == text
    assert re.search(r"main: decoded 6 tokens in \d+\.\d\d s, speed: \d+\.\d\d t/s", r.stderr)
    r = tool("simple", "-m", tiny, "-n")
    assert r.returncode == 1 and b"example usage:" in r.stdout


def test_cli_single_turn(tool, tiny):
    r = tool("cli", "-m", tiny, "-p", "Hello world", "-n", "4", "-st", stdin=b"")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode("utf-8", errors="replace")    # random weights emit raw bytes too
    assert "model      : tiny-llama.gguf" in out and "\n> Hello world\n" in out
    assert re.search(r"\[ Prompt: [\d.]+ t/s \| Generation: [\d.]+ t/s \]", out)
    assert out.endswith("\n\nExiting...\n")
    r = tool("cli", "-m", tiny, "-cnv")
    assert r.returncode == 1 and r.stderr == "error: invalid argument: -cnv\n"


def _ppl_reference(path, text, n_ctx, n_chunks):
    """PPL of llama.cpp's scheme computed directly: each chunk from an empty cache, float64
    log-softmax over the second half, in the tool's arithmetic on the CPU (llama.cpp's, with flash
    attention: its -fa auto)."""
    import pyllama
    model = pyllama.load_model(path)
    toks = model.tokenize(text, add_special=True, parse_special=False)
    nll, values = [], []
    for c in range(n_chunks):
        ctx = pyllama.Context(model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                              numerics="llama.cpp", flash_attn=True)
        chunk = toks[c * n_ctx:(c + 1) * n_ctx]
        lg = ctx.eval(chunk, logits_all=True).astype(np.float64)
        ls = lg - np.log(np.exp(lg - lg.max(1, keepdims=True)).sum(1, keepdims=True)) \
            - lg.max(1, keepdims=True)
        for j in range(n_ctx // 2, n_ctx - 1):
            nll.append(-ls[j, chunk[j + 1]])
        values.append(math.exp(np.mean(nll)))
    return values


def test_perplexity_numbers_and_format(tool, tiny, text_file):
    with open(text_file) as f:
        text = f.read()[:-1]
    ref = _ppl_reference(tiny, text, 64, 3)
    r1 = tool("perplexity", "-m", tiny, "-f", text_file, "-c", "64", "--chunks", "3", "-b", "128")
    r2 = tool("perplexity", "-m", tiny, "-f", text_file, "-c", "64", "--chunks", "3", "-b", "64")
    assert r1.returncode == 0 and r2.returncode == 0, r1.stderr
    line = r1.stdout.decode().splitlines()[1]
    got = [float(x) for x in re.findall(r"\[\d\]([\d.]+),", line)]
    assert re.fullmatch(r"(\[\d\][\d.]+,){3}", line)
    np.testing.assert_allclose(got, ref, rtol=2e-4)
    # two chunks per batch (n_seq = 2) give the same numbers as one chunk per batch
    assert r1.stdout.decode().splitlines()[1] == r2.stdout.decode().splitlines()[1]
    m = re.search(r"Final estimate: PPL = ([\d.]+) \+/- ([\d.]+)", r1.stderr)
    assert m and float(m.group(1)) == pytest.approx(ref[-1], rel=2e-4)
    assert "n_ctx=64, batch_size=128, n_seq=2" in r1.stderr


def test_perplexity_bad_input(tool, tiny, text_file):
    r = tool("perplexity", "-m", tiny, "-f", text_file, "-c", "0")
    assert r.returncode == 1 and "perplexity tool requires '--ctx-size' > 0" in r.stderr
    r = tool("perplexity", "-m", tiny, "-p", "too short", "-c", "64")
    assert r.returncode == 0 and "you need at least 128 tokens" in r.stderr
    assert "Final estimate" not in r.stderr


def test_kld_against_own_base(tool, tiny, text_file, tmp_path):
    base = str(tmp_path / "base.bin")
    r = tool("perplexity", "-m", tiny, "-f", text_file, "-c", "64", "--chunks", "4",
             "--kl-divergence-base", base)
    assert r.returncode == 0, r.stderr
    r = tool("perplexity", "-m", tiny, "-c", "64", "--kl-divergence-base", base,
             "--kl-divergence")
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert "====== KL divergence statistics ======" in out
    kld = float(re.search(r"Mean    KLD: +([-\d.]+)", out).group(1))
    assert abs(kld) < 1e-3
    assert re.search(r"Same top p: 100\.000 ±", out)


def test_bench_formats(tool, tiny):
    r = tool("bench", "-m", tiny, "-p", "8", "-n", "2", "-r", "2", "-ub", "4")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0] == ("| model                          |       size |     params | backend    "
                        "| threads | n_ubatch |            test |                  t/s |")
    assert lines[1].startswith("| ------------------------------ | ---------: |")
    assert re.match(r"\| .{30} \| +[\d.]+ MiB \| +[\d.]+ M \| CPU +\| +\d+ \| +4 \| +pp8 \| "
                    r"+[\d.]+ ± [\d.]+ \|$", lines[2])
    assert lines[3].split("|")[-3].strip() == "tg2" and re.match(r"build: \w+ \(\d+\)", lines[-1])
    r = tool("bench", "-m", tiny, "-p", "4", "-n", "0", "-r", "1", "-pg", "4,2", "-o", "json")
    rows = json.loads(r.stdout)
    from pyllama.tools.bench import FIELDS
    assert [list(x)[:len(FIELDS)] for x in rows] == [FIELDS, FIELDS]
    assert (rows[1]["n_prompt"], rows[1]["n_gen"]) == (4, 2) and len(rows[0]["samples_ns"]) == 1
    r = tool("bench", "-m", tiny, "-p", "4", "-n", "0", "-r", "1", "-o", "csv")
    assert r.stdout.decode().splitlines()[0] == ",".join(FIELDS)
    r = tool("bench", "-m", tiny, "-p", "4", "-n", "0", "-r", "1", "-o", "json", "--poll", "20")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["poll"] == 20        # the OpenMP spin level in effect
    r = tool("bench", "-m", tiny, "-p", "4", "-n", "0", "--poll", "0,50")
    assert r.returncode == 1 and r.stderr.splitlines()[-1] == \
        "error: invalid parameter for argument: --poll"
    r = tool("bench", "-p", "abc")
    assert r.returncode == 1 and r.stderr.splitlines() == [
        "error: invalid range format", "error: invalid parameter for argument: -p"]


def test_bench_ranges():
    from pyllama.tools.bench import int_list
    assert int_list("1,8-32*2,64-256+64") == [1, 8, 16, 32, 64, 128, 192, 256]


@pytest.mark.parametrize("n,spec", [
    (16, ["--spec-type", "ngram-simple"]),
    (16, ["--spec-type", "ngram-map-k,ngram-map-k4v", "--spec-ngram-map-k-size-n", "2",
          "--spec-ngram-map-k4v-size-n", "2", "--spec-ngram-map-k4v-size-m", "4"]),
    # ngram-mod adds generated n-grams to its pool in chunks of 32 tokens
    (64, ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "2",
          "--spec-ngram-mod-n-min", "1"])])
def test_speculative_simple_ngram_equals_plain_greedy(tool, tiny, n, spec):
    prompt = "the cat the cat the cat"
    model, ids, gen = _greedy(tiny, prompt, n + 1)    # llama.cpp emits n+1 tokens for -n n
    r = tool("speculative-simple", "-m", tiny, *spec, "-p", prompt,
             "-n", str(n), "--temp", "0", "-c", "256")
    assert r.returncode == 0, r.stderr
    text = b"\n\n" + b"".join(model.token_to_piece(t, True) for t in ids) + \
        b"".join(model.token_to_piece(t, False) for t in gen) + b"\n\n"
    assert r.stdout == text
    assert re.search(rf"n_predict = {n + 1}\n", r.stderr) and "n_drafted = " in r.stderr
    assert re.search(r"accept    = [\d.]+%", r.stderr)


def test_speculative_needs_a_drafter(tool, tiny):
    r = tool("speculative-simple", "-m", tiny, "-p", "x", "-n", "2")
    assert r.returncode == 1 and "failed to initialize speculative decoding" in r.stderr
    r = tool("speculative", "-m", tiny, "-p", "x", "-n", "2")
    assert r.returncode == 1 and "--model-draft is required" in r.stderr
    r = tool("speculative", "-m", tiny, "-md", tiny, "-p", "x", "-n", "-5")
    assert r.returncode == 1 and "--n-predict must be >= -1" in r.stderr


def test_perplexity_output_type_1(tool, tiny, text_file):
    r = tool("perplexity", "-m", tiny, "-f", text_file, "-c", "64", "--chunks", "4", "-b", "128",
             "--ppl-output-type", "1")
    assert r.returncode == 0, r.stderr
    rows = [ln for ln in r.stdout.decode().splitlines() if re.match(r" +\d+  ", ln)]
    assert [int(ln.split()[0]) for ln in rows] == [0, 0, 128, 128]   # offset of the batch group
    assert all(re.fullmatch(r" {7}\d|\s+\d+  [\d.]+  [\d.]+  [\d.]+", ln) for ln in rows)


def test_completion_interactive_prefix_suffix(tool, tiny):
    r = tool("completion", "-m", tiny, "-i", "-p", "the", "--in-prefix", "cat ", "--in-suffix",
             " on", "-n", "3", "--temp", "0", "-no-cnv", stdin=b"sat\n")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count(b"\n> ") == 2 and "EOF by user" in r.stderr


def test_bench_help_version_bad_output(tool):
    r = tool("bench", "-h")
    assert r.returncode == 0 and r.stdout.startswith(b"usage: llama-bench [options]")
    r = tool("bench", "--version")
    assert r.returncode == 0 and r.stderr.startswith("version: ")
    r = tool("bench", "-o", "xml")
    assert r.returncode == 1 and "error: invalid parameter for argument: -o" in r.stderr
    assert b"usage: llama-bench" in r.stdout


def test_speculative_draft_model_same_as_target(tool, tiny):
    """A draft identical to the target, with llama.cpp's fixed draft length (--spec-policy
    fixed): every draft is accepted, output == plain greedy."""
    model, ids, gen = _greedy(tiny, "the cat", 9)
    r = tool("speculative-simple", "-m", tiny, "-md", tiny, "-p", "the cat", "-n", "8",
             "--temp", "0", "-c", "256", "--spec-policy", "fixed")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"\n\n" + b"".join(model.token_to_piece(t, True) for t in ids) + \
        b"".join(model.token_to_piece(t, False) for t in gen) + b"\n\n"
    assert "accept    = 100.000%" in r.stderr and "n_predict = 9" in r.stderr
    assert "n_drafted = 0" not in r.stderr


@pytest.mark.parametrize("how", ["default", "flag", "env"])
def test_speculative_cost_aware_default_skips_a_draft_as_costly_as_the_target(tool, tiny, how):
    """The default cost-aware policy (--spec-policy cost): a draft model as large as the target
    costs one target decode per drafted token, so no draft length can pay (E(k) <= k + 1 <
    c(k) + k) and nothing is drafted; the output is still plain greedy's."""
    model, ids, gen = _greedy(tiny, "the cat", 9)
    extra = ("--spec-policy", "cost") if how == "flag" else ()
    r = tool("speculative-simple", "-m", tiny, "-md", tiny, "-p", "the cat", "-n", "8",
             "--temp", "0", "-c", "256", *extra,
             env={"LLAMA_ARG_SPEC_POLICY": "cost"} if how == "env" else None)
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"\n\n" + b"".join(model.token_to_piece(t, True) for t in ids) + \
        b"".join(model.token_to_piece(t, False) for t in gen) + b"\n\n"
    assert "n_drafted = 0" in r.stderr and "n_predict = 9" in r.stderr


@pytest.mark.parametrize("name,extra", [("completion", ["-no-cnv"]), ("cli", ["-st"])])
def test_keep_not_below_the_context_is_one_error(tool, tiny, name, extra):
    """--keep at or past the context (llama.cpp clamps it silently): one error line, exit 1
    (--context-shift or not: tools/completion.py check_ctx_shift)."""
    for shift in (["--context-shift"],):
        r = tool(name, "-m", tiny, "-p", "Hello world", "-n", "4", "-c", "256", "--keep", "256",
                 *extra, *shift, stdin=b"")
        assert r.returncode == 1 and "Traceback" not in r.stderr
        errors = [ln for ln in r.stderr.splitlines() if "error" in ln.lower()]
        assert len(errors) == 1 and errors[0].endswith(
            "error: --keep 256 is not smaller than the context size (n_ctx = 256)"), errors
