"""Prompt-cache (session) files move between pyllama and llama.cpp 0c1e570.

Default run (stored fixture: tests/data/session-gemma-llamacpp.bin.gz, written by llama.cpp's own
llama-completion --prompt-cache, recorded with its printed text by tests/make_session_fixture.py):
pyllama's llama-completion writes the same file byte for byte and prints the same text, and
reads llama.cpp's file back (exact prompt match, last token replayed) to the same text.
Slow (oracles): llama.cpp's llama-completion reads a pyllama-written file, and llama-cpp-python's
llama_state_load_file / llama_state_save_file exchange session files with pyllama's Context.
Bad input: a corrupt session file stops the tool with one error line, exit 1."""
import gzip
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DATA = os.path.join(HERE, "data")
LLAMACPP_BIN = os.environ.get("LLAMACPP_BIN", "/work/llamacpp/build/bin")
ORACLE_PY = os.environ.get("LLAMACPP_PYTHON", "/work/oracle/bin/python")

pytestmark = pytest.mark.realmodel


def _fixture() -> tuple[dict, bytes]:
    with open(os.path.join(DATA, "session-gemma-llamacpp.json")) as f:
        fx = json.load(f)
    with gzip.open(os.path.join(DATA, "session-gemma-llamacpp.bin.gz")) as f:
        return fx, f.read()


def _completion(model, fx, session, *extra, prompt=None, args=None):
    cmd = [sys.executable, "-m", "pyllama", "completion", "-m", model, "-p",
           fx["prompt"] if prompt is None else prompt, "-t", "2",
           *(fx["args"] if args is None else args), "--prompt-cache", str(session), *extra]
    return subprocess.run(cmd, capture_output=True, cwd=REPO, timeout=600)


def test_pyllama_writes_llamacpps_session_file(gemma_path, tmp_path):
    fx, want = _fixture()
    path = tmp_path / "s.bin"
    r = _completion(gemma_path, fx, path)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert r.stdout.decode() == fx["save"]["stdout"]
    err = r.stderr.decode()
    for m in fx["save"]["messages"]:
        assert m in err
    assert path.read_bytes() == want


def test_pyllama_reads_llamacpps_session_file(gemma_path, tmp_path):
    fx, data = _fixture()
    path = tmp_path / "s.bin"
    path.write_bytes(data)
    r = _completion(gemma_path, fx, path, "--prompt-cache-ro")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert r.stdout.decode() == fx["load"]["stdout"]
    err = r.stderr.decode()
    for m in fx["load"]["messages"]:
        assert m in err
    assert path.read_bytes() == data            # -ro: not rewritten


def test_corrupt_session_file_is_one_error(gemma_path, tmp_path):
    """A truncated file (the library's other refusals, bad magic, too many tokens, another
    architecture, are in tests/test_ctx_shift.py)."""
    fx, data = _fixture()
    path = tmp_path / "bad.bin"
    path.write_bytes(data[:len(data) // 2])
    r = _completion(gemma_path, fx, path)
    assert r.returncode == 1 and r.stdout == b""
    errors = [ln for ln in r.stderr.decode().splitlines() if "error" in ln.lower()
              or "failed" in ln]
    assert len(errors) == 1 and f"failed to load session file '{path}'" in errors[0], errors


# -- slow: the oracles read pyllama's files ----------------------------------------------------

LONG_PROMPT = ("In the beginning of the nineteenth century the town had three mills, a school "
               "and a small harbour, and")
LONG_ARGS = ["--temp", "0", "-no-cnv", "-c", "512", "-n", "24"]


@pytest.mark.slow
def test_llamacpp_reads_pyllama_session_file(gemma_path, tmp_path):
    exe = os.path.join(LLAMACPP_BIN, "llama-completion")
    if not os.path.exists(exe):
        pytest.skip(f"llama.cpp's llama-completion is not built ({exe})")
    fx = {"prompt": LONG_PROMPT, "args": LONG_ARGS}
    path = tmp_path / "py.bin"
    r = _completion(gemma_path, fx, path)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    ours = r.stdout.decode()

    def llamacpp(*extra):
        return subprocess.run([exe, "-m", gemma_path, "-p", LONG_PROMPT, "-t", "2", *LONG_ARGS,
                               *extra], capture_output=True, timeout=600)
    fresh = llamacpp()
    assert fresh.returncode == 0
    assert ours == fresh.stdout.decode()        # greedy text, llama.cpp numerics
    loaded = llamacpp("--prompt-cache", str(path), "--prompt-cache-ro")
    assert loaded.returncode == 0, loaded.stderr.decode()[-2000:]
    err = loaded.stderr.decode()
    assert "session file has exact match for prompt!" in err
    assert "replayed last token from session" in err
    assert loaded.stdout.decode() == fresh.stdout.decode()


ORACLE = r"""
import ctypes, json, sys
import llama_cpp as L
model_path, mode, path = sys.argv[1], sys.argv[2], sys.argv[3]
L.llama_backend_init()
model = L.llama_model_load_from_file(model_path.encode(), L.llama_model_default_params())
cp = L.llama_context_default_params()
cp.n_ctx, cp.n_threads, cp.n_threads_batch, cp.flash_attn_type = 512, 2, 2, 1
ctx = L.llama_init_from_model(model, cp)
toks = (L.llama_token * 512)()
if mode == "load":
    n = ctypes.c_size_t(0)
    ok = L.llama_state_load_file(ctx, path.encode(), toks, 512, ctypes.byref(n))
    ids = list(toks[:n.value])
    # decode the last token again at its position: the logits after the restored state
    b = L.llama_batch_init(1, 0, 1)
    b.n_tokens = 1
    b.token[0], b.pos[0], b.n_seq_id[0], b.seq_id[0][0], b.logits[0] = ids[-1], len(ids) - 1, 1, 0, 1
    assert L.llama_decode(ctx, b) == 0
    lg = L.llama_get_logits_ith(ctx, 0)
    nv = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    print(json.dumps({"ok": bool(ok), "tokens": ids, "argmax": max(range(nv), key=lambda i: lg[i])}))
else:
    ids = json.loads(sys.argv[4])
    b = L.llama_batch_init(len(ids), 0, 1)
    b.n_tokens = len(ids) - 1
    for j, t in enumerate(ids[:-1]):
        b.token[j], b.pos[j], b.n_seq_id[j], b.seq_id[j][0], b.logits[j] = t, j, 1, 0, j == len(ids) - 2
    assert L.llama_decode(ctx, b) == 0
    for j, t in enumerate(ids):
        toks[j] = t
    print(json.dumps({"ok": bool(L.llama_state_save_file(ctx, path.encode(), toks, len(ids)))}))
"""


def _oracle(*args) -> dict:
    if not os.path.exists(ORACLE_PY):
        pytest.skip(f"llama-cpp-python oracle not installed ({ORACLE_PY})")
    r = subprocess.run([ORACLE_PY, "-c", ORACLE, *map(str, args)], capture_output=True,
                       timeout=600)
    if r.returncode != 0 and b"No module named 'llama_cpp'" in r.stderr:
        pytest.skip("llama-cpp-python is not importable by the oracle interpreter")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return json.loads(r.stdout.decode().strip().splitlines()[-1])


@pytest.mark.slow
def test_session_files_through_llama_cpp_python(gemma_path, tmp_path):
    import pyllama
    m = pyllama.load_model(gemma_path)
    ids = m.tokenize(LONG_PROMPT)

    def ctx():
        return pyllama.Context(m, n_ctx=512, n_threads=2, numerics="llama.cpp", flash_attn=True)
    # pyllama writes, llama-cpp-python reads
    a = ctx()
    a.eval(ids[:-1])
    ours = tmp_path / "py.bin"
    a.state_save_file(str(ours), ids)
    want = int(np.argmax(a.eval(ids[-1:])[-1]))
    got = _oracle(gemma_path, "load", ours)
    assert got["ok"] and got["tokens"] == ids and got["argmax"] == want
    # llama-cpp-python writes, pyllama reads: the same bytes, the same next logits
    theirs = tmp_path / "lcpp.bin"
    assert _oracle(gemma_path, "save", theirs, json.dumps(ids))["ok"]
    assert theirs.read_bytes() == ours.read_bytes()
    b = ctx()
    assert b.state_load_file(str(theirs), 512) == ids
    np.testing.assert_array_equal(b.eval(ids[-1:])[-1], ctx_eval_fresh(ctx, ids))


def ctx_eval_fresh(make, ids):
    c = make()
    c.eval(ids[:-1])
    return c.eval(ids[-1:])[-1]


def test_prompt_cache_all_file_is_llamacpps(gemma_path, tmp_path):
    """--prompt-cache-all: the decoded tokens (prompt and generation, not the last sampled
    token, which llama.cpp never decodes) and their memory, as llama.cpp writes them."""
    import hashlib
    import struct
    fx, _ = _fixture()
    want = fx["save_all"]
    path = tmp_path / "all.bin"
    r = _completion(gemma_path, fx, path, "--prompt-cache-all")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    # the text, then "llama_completion: saving final output to session file '<path>'"
    text, sep, tail = r.stdout.decode().rpartition(str(path))
    w_text, _, w_tail = want["stdout"].rpartition(want["path"])
    assert (text, sep and tail) == (w_text, w_tail)
    data = path.read_bytes()
    n = struct.unpack_from("<I", data, 8)[0]
    assert list(struct.unpack_from(f"<{n}i", data, 12)) == want["tokens"]
    assert len(data) == want["size"] and hashlib.sha256(data).hexdigest() == want["sha256"]
