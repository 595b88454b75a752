"""Flash attention off: llama.cpp's V tensor is transposed (v_trans = 1) and its state files store
the V section per V dimension across the cells (llama_kv_cache::state_write_data's v_trans
branch); pyllama writes and reads that layout, and refuses a quantized V cache without flash
attention as llama_init_from_model does. Oracle: tests/data/state-gemma-f16-nofa-llamacpp.bin.gz,
llama.cpp 0c1e570's llama_state_seq_get_data and llama_state_save_file after a 12-token prompt
with flash attention disabled (tests/make_state_vtrans_fixture.py)."""
import gzip
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

import pyllama
from pyllama.errors import ContextError

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
IDS = [2, 236787, 107, 236769, 236770, 236768, 4613, 17097, 580, 506, 5368, 236764]


def _fixture() -> tuple[bytes, bytes]:
    raw = gzip.open(os.path.join(HERE, "data", "state-gemma-f16-nofa-llamacpp.bin.gz")).read()
    n = struct.unpack_from("<Q", raw)[0]
    session = raw[16:]
    return raw[8:16] + session[len(session) - (n - 8):], session


def test_transposed_v_section_round_trips(tiny_model_path):
    """Without flash attention the V section is [type, element bytes, n_embd_v_gqa] then V^T;
    it reads back to the same next logits, and a state of the other layout is refused."""
    m = pyllama.load_model(tiny_model_path("qwen2"))
    off = pyllama.Context(m, n_ctx=64)
    on = pyllama.Context(m, n_ctx=64, flash_attn=True)
    for c in (off, on):
        c.eval([5, 6, 7, 8, 9])
    cache = off.memory
    st_off, st_on = cache.state_write(0), on.memory.state_write(0)
    word = 8 + 5 * 12                      # n_stream, cell_count, 5 x (pos, n_seq, seq id)
    assert struct.unpack_from("<I", st_off, word)[0] == 1
    assert struct.unpack_from("<I", st_on, word)[0] == 0
    assert len(st_off) == len(st_on)       # u32 element bytes + u32 n_embd_v_gqa: the u64 row size
    il = cache.layers[0]
    v = cache.v[il][:5]
    assert struct.pack("<iII", 1, 2, v.shape[1]) + np.ascontiguousarray(v.T).tobytes() in st_off
    assert v.tobytes() in st_on and v.tobytes() not in st_off
    b = pyllama.Context(m, n_ctx=64)
    assert b.memory.state_read(st_off, 0) == len(st_off)
    np.testing.assert_array_equal(b.eval([10])[-1], off.eval([10])[-1])
    with pytest.raises(ContextError, match="incompatible V transposition"):
        pyllama.Context(m, n_ctx=64).memory.state_read(st_on, 0)
    with pytest.raises(ContextError, match="incompatible V transposition"):
        pyllama.Context(m, n_ctx=64, flash_attn=True).memory.state_read(st_off, 0)


def test_quantized_v_needs_flash_attn(tiny_model_path):
    """llama_init_from_model: a quantized V cache with flash attention disabled is refused; K
    alone may be quantized."""
    m = pyllama.load_model(tiny_model_path("qwen3"))
    for t in ("q8_0", "q4_0"):
        with pytest.raises(ContextError, match="^quantized V cache requires flash_attn to be "
                                               "enabled$"):
            pyllama.Context(m, n_ctx=64, type_k=t, type_v=t)
        assert pyllama.Context(m, n_ctx=64, type_k=t, type_v=t, flash_attn=True)
    assert pyllama.Context(m, n_ctx=64, type_k="q8_0")


def _tool(model, *args):
    return subprocess.run([sys.executable, "-m", "pyllama", "completion", "-m", model,
                           "-p", "Hello", "-n", "1", "--temp", "0", "-no-cnv", "-c", "64",
                           *args], capture_output=True, cwd=REPO, timeout=600)


def test_tool_quantized_v_with_fa_off_is_one_error(tiny_model_path):
    """-fa off -ctv q8_0: one error line, exit 1; -fa auto (llama.cpp: turned on for a quantized
    V cache, and on the CPU anyway) runs."""
    path = tiny_model_path("qwen3")
    r = _tool(path, "-fa", "off", "-ctk", "q8_0", "-ctv", "q8_0")
    assert r.returncode == 1 and r.stdout == b""
    err = [ln for ln in r.stderr.decode().splitlines() if ln.strip()]
    assert len(err) == 1 and err[0].endswith("quantized V cache requires flash_attn to be "
                                             "enabled"), err
    r = _tool(path, "-fa", "auto", "-ctk", "q8_0", "-ctv", "q8_0")
    assert r.returncode == 0, r.stderr.decode()[-2000:]


@pytest.mark.realmodel
def test_gemma_state_without_fa_is_llama_cpps(gemma_path, tmp_path):
    """Gemma 3 (iSWA), f16 K/V, llama.cpp's arithmetic without flash attention: after the same
    prompt pyllama's sequence state and session file are llama.cpp's bytes, and llama.cpp's
    restore here and continue to the logits of a fresh run."""
    seq, session = _fixture()
    assert struct.unpack_from("<Ii", seq) == (0xAF143CD8, 0)
    m = pyllama.load_model(gemma_path)

    def ctx():
        return pyllama.Context(m, n_ctx=256, n_threads=2, numerics="llama.cpp")
    a = ctx()
    a.eval(IDS)
    assert a.state_seq_get(0) == seq[8:]
    ours = tmp_path / "py.bin"
    a.state_save_file(str(ours), IDS)
    assert ours.read_bytes() == session
    want = a.eval([506])[-1]
    b = ctx()
    b.state_seq_set(seq[8:], 0)
    np.testing.assert_array_equal(b.eval([506])[-1], want)
    theirs = tmp_path / "lcpp.bin"
    theirs.write_bytes(session)
    c = ctx()
    assert c.state_load_file(str(theirs), 256) == IDS
    np.testing.assert_array_equal(c.eval([506])[-1], want)


LLAMACPP_BIN = os.environ.get("LLAMACPP_BIN", "/work/llamacpp/build/bin")
PROMPT = "In the beginning of the nineteenth century the town had three mills, and"
ARGS = ["--temp", "0", "-no-cnv", "-c", "256", "-n", "12", "-t", "2", "-fa", "off"]


@pytest.mark.slow
@pytest.mark.realmodel
def test_prompt_cache_without_fa_through_llama_completion(gemma_path, tmp_path):
    """Live (llama.cpp's llama-completion, -fa off): pyllama's --prompt-cache file is the one
    llama.cpp writes for the same prompt, and each runtime reads the other's to the text of a
    fresh llama.cpp run."""
    exe = os.path.join(LLAMACPP_BIN, "llama-completion")
    if not os.path.exists(exe):
        pytest.skip(f"llama.cpp's llama-completion is not built ({exe})")

    def ours(path, *extra):
        return subprocess.run([sys.executable, "-m", "pyllama", "completion", "-m", gemma_path,
                               "-p", PROMPT, *ARGS, "--prompt-cache", str(path), *extra],
                              capture_output=True, cwd=REPO, timeout=600)

    def theirs(*extra):
        return subprocess.run([exe, "-m", gemma_path, "-p", PROMPT, *ARGS, *extra],
                              capture_output=True, timeout=600)
    fresh = theirs()
    assert fresh.returncode == 0, fresh.stderr.decode()[-2000:]
    lc_file, py_file = tmp_path / "lc.bin", tmp_path / "py.bin"
    assert theirs("--prompt-cache", str(lc_file)).returncode == 0
    r = ours(py_file)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert r.stdout == fresh.stdout
    assert py_file.read_bytes() == lc_file.read_bytes()
    loaded = theirs("--prompt-cache", str(py_file), "--prompt-cache-ro")
    assert loaded.returncode == 0 and loaded.stdout == fresh.stdout
    assert "session file has exact match for prompt!" in loaded.stderr.decode()
    r = ours(lc_file, "--prompt-cache-ro")
    assert r.returncode == 0 and r.stdout == fresh.stdout
    assert "session file has exact match for prompt!" in r.stderr.decode()
