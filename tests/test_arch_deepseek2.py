"""deepseek2 / glm4moe specifics beyond the llama.cpp fixtures (tests/test_archsupport.py): what
llama.cpp's loader refuses or derives, and the numpy references the MoE router uses."""
import base64
import gzip
import json
import math
import os
import re
import struct
import subprocess
import sys

import numpy as np
import pytest

import pyllama
from pyllama.arch.deepseek2 import kq_scale
from pyllama.backend.ref import ggml_sigmoid, moe_group_mask
from pyllama.errors import ContextError, ModelError
from pyllama.hparams import with_rope_cparams


def test_sigmoid_reference():
    x = np.array([-80.0, -3.5, 0.0, 1e-3, 2.25, 40.0], np.float32)
    one = np.float32(1)          # op_sigmoid: 1.f / (1.f + expf(-x)), f32 arithmetic
    want = np.array([one / (one + np.float32(math.exp(-float(v)))) for v in x], np.float32)
    assert np.array_equal(ggml_sigmoid(x), want)


def test_group_mask_keeps_the_best_groups_by_their_two_largest():
    sel = np.array([[0.9, 0.0, 0.0, 0.0, 0.5, 0.5, 0.4, 0.1]], np.float32)   # groups of 2
    out = moe_group_mask(sel, 4, 2)
    # group scores 0.9, 0.0, 1.0, 0.5 -> groups 2 and 0 kept
    assert np.array_equal(out[0, [0, 1, 4, 5]], sel[0, [0, 1, 4, 5]])
    assert np.all(np.isneginf(out[0, [2, 3, 6, 7]]))


def test_yarn_kq_scale_is_mscale_squared(tiny_model_path):
    m = pyllama.load_model(tiny_model_path("deepseek2"))
    hp = with_rope_cparams(m.hparams, 256)
    # factor 4, mscale_all_dim 1: (1 + 0.1 ln 4)^2 / sqrt(qk_nope + qk_rope)
    want = (1 + 0.1 * math.log(4.0)) ** 2 / math.sqrt(40)
    assert abs(kq_scale(hp) - want) < 1e-6
    assert m.hparams.rope_yarn_log_mul == pytest.approx(1.0)


@pytest.mark.parametrize("arch,key,value,msg", [
    ("deepseek2", "expert_gating_func", 4, "expert_gating_func 4"),
    ("deepseek2", "expert_group_used_count", 4, "bad expert groups"),
    ("glm4moe", "expert_gating_func", 3, "expert_gating_func 3"),
])
def test_refusals(tiny_model_path, arch, key, value, msg):
    with pytest.raises(ModelError, match=msg):
        pyllama.load_model(tiny_model_path(arch, overrides={key: value}))


def test_nextn_blocks_are_not_run(tiny_model_path):
    """nextn_predict_layers: llama.cpp's trunk is block_count minus them; a file without the
    NextN tensors (trunk-only) loads and runs the first block_count - 1 layers, as a 2-layer file."""
    full = pyllama.load_model(tiny_model_path("glm4moe", overrides={"block_count": 2}))
    trunk = pyllama.load_model(tiny_model_path("glm4moe", overrides={"nextn_predict_layers": 1}))
    assert trunk.hparams.n_layer == 2
    toks = np.arange(3, 13, dtype=np.int32)
    a = pyllama.Context(full, n_ctx=64).eval(toks, logits_all=True)
    b = pyllama.Context(trunk, n_ctx=64).eval(toks, logits_all=True)
    assert np.array_equal(a, b)          # the same tensors (the writer draws the same specs)


# -- MLA KV cache: K only, V a view of it (llama.cpp's llama_kv_cache with is_mla) ---------------

def _mla(tiny_model_path):
    m = pyllama.load_model(tiny_model_path("deepseek2"))
    assert m.hparams.is_mla
    return m


@pytest.mark.parametrize("n_ctx,n_seq,unified", [(512, 1, False), (768, 2, False),
                                                 (512, 3, True)])
def test_mla_cache_holds_k_only_llamacpps_bytes(tiny_model_path, n_ctx, n_seq, unified):
    """llama_kv_cache allocates for MLA only K: n_stream tensors of kv_size rows of
    ggml_row_size(type_k, kv_lora_rank + n_rot) per layer, no V tensor (has_v = !is_mla)."""
    m = _mla(tiny_model_path)
    hp = m.hparams
    ctx = pyllama.Context(m, n_ctx=n_ctx, n_seq_max=n_seq, kv_unified=unified)
    mem = ctx.memory
    assert mem.v == {}
    n_stream = 1 if unified else n_seq
    kv_size = -(-(n_ctx // n_stream) // 256) * 256                # llama_context: n_ctx_seq
    row = (hp.n_lora_kv + hp.n_rot) * 2                           # f16
    want_k = hp.n_layer * n_stream * kv_size * row
    br = mem.memory_breakdown()
    assert (br["k_bytes"], br["v_bytes"]) == (want_k, 0)
    assert sum(b.nbytes for b in mem.k.values()) == want_k


def test_mla_refuses_kv_k_center(specs_deepseek2):
    """Nothing can be taken off K when V is read from it (and attn_k_b is MLA's weight there,
    not a K bias): off by default with a quantized K, refused when asked for."""
    m = pyllama.load_model(specs_deepseek2)
    ctx = pyllama.Context(m, n_ctx=256, type_k="q8_0", type_v="q8_0", flash_attn=True)
    assert ctx.memory.k_center == {}
    with pytest.raises(ContextError, match="kv_k_center is not available for MLA"):
        pyllama.Context(m, n_ctx=256, type_k="q8_0", type_v="q8_0", kv_k_center=True,
                        flash_attn=True)


def test_mla_k_and_v_types_must_match(tiny_model_path):
    """llama_init_from_model refuses different K and V types for an MLA model."""
    with pytest.raises(ContextError, match=r"does not support different K \(q8_0\) and V "
                                           r"\(f16\) cache types"):
        pyllama.Context(_mla(tiny_model_path), n_ctx=256, type_k="q8_0")


def _state_sections(data: bytes, n_layer: int):
    """Parse one stream of a KV state: (v_trans word, [(type, row bytes, rows bytes)], end)."""
    off = 0
    n_stream, count = struct.unpack_from("<II", data, off)
    off += 8
    for _ in range(count):
        _, n = struct.unpack_from("<iI", data, off)
        off += 8 + 4 * n
    v_trans, nl = struct.unpack_from("<II", data, off)
    off += 8
    secs = []
    while off < len(data):
        t, rb = struct.unpack_from("<iQ", data, off)
        off += 12
        secs.append((t, rb, data[off:off + count * rb]))
        off += count * rb
    assert n_stream == 1 and nl == n_layer
    return v_trans, secs, count


@pytest.mark.parametrize("fa", [False, True])
def test_mla_state_has_no_v_rows_and_round_trips(tiny_model_path, fa):
    """llama_kv_cache::state_write for MLA: the v_trans word (1 without flash attention), the
    layer count, the K rows of each layer and no V section (v_stream is null)."""
    m = _mla(tiny_model_path)
    hp = m.hparams
    toks = np.arange(5, 17, dtype=np.int32)
    a = pyllama.Context(m, n_ctx=256, flash_attn=fa, numerics="llama.cpp")
    a.eval(toks[:10])
    data = a.memory.state_write()
    v_trans, secs, count = _state_sections(data, hp.n_layer)
    assert v_trans == (0 if fa else 1) and count == 10
    row = (hp.n_lora_kv + hp.n_rot) * 2
    assert [(t, rb) for t, rb, _ in secs] == [(1, row)] * hp.n_layer        # K only, GGML f16
    for il, (_, _, rows) in enumerate(secs):
        assert rows == a.memory.k[il][:10].tobytes()
    want = a.eval(toks[10:], logits_all=True)
    for fa_b in (fa, not fa):                    # no V rows: either word reads back
        b = pyllama.Context(m, n_ctx=256, flash_attn=fa_b, numerics="llama.cpp")
        assert b.memory.state_read(data) == len(data)
        if fa_b == fa:
            assert np.array_equal(b.eval(toks[10:], logits_all=True), want)


def test_mla_v_view_gives_the_bits_of_a_separate_v(tiny_model_path):
    """The backends' attention kernels with the K buffer as V equal, on the first d_v values of
    each head, the same kernels given a separate V of those values (every path the MLA graph
    takes: invariant, llama.cpp one-query vec_dot_f16, flash attention one-chunk, tiled and
    split-KV)."""
    be = _mla(tiny_model_path).backend
    rng = np.random.default_rng(3)
    n_cells, dk, dv, nh = 600, 48, 32, 4
    k = rng.standard_normal((n_cells, dk)).astype(np.float16)
    v = np.ascontiguousarray(k[:, :dv])
    for n_q in (1, 7, 70):
        q = rng.standard_normal((n_q, nh, dk)).astype(np.float32)
        cells = np.arange(n_cells, dtype=np.int32)
        qs = np.zeros(n_q, np.int32)
        qe = np.minimum(np.arange(n_q, dtype=np.int32) + 530, n_cells).astype(np.int32)
        runs = [lambda kk, vv: be.attention(q, kk, vv, cells, qs, qe, 0.3),
                lambda kk, vv: be.attention_fa(q, kk, vv, cells, qs, qe, 0.3)]
        if n_q == 1:
            runs += [lambda kk, vv: be.attention_vec(q, kk, vv, cells, qs, qe, 0.3),
                     lambda kk, vv: be.attention_fa(q, kk, vv, cells, qs, qe, 0.3,
                                                    view=(0, 768))]
        for run in runs:
            got = np.asarray(run(k, k)).reshape(n_q, nh, dk)[:, :, :dv]
            assert np.array_equal(got, np.asarray(run(k, v)).reshape(n_q, nh, dv))


LEGACY = {"attention.key_length_mla": 0, "attention.value_length_mla": 0,
          "attention.head_count_kv": 4}          # attn_kv_b, MHA: K heads [k_nope | k_pe]


@pytest.mark.parametrize("overrides", [{}, LEGACY], ids=["mla", "legacy"])
def test_k_shift_rotates_k_pe(tiny_model_path, overrides):
    """build_graph_shift rotates the n_rot values at the end of each K head (after kv_cmpr, or
    k_nope): a prompt decoded at 0.. and shifted by +5 continues as the same prompt decoded at
    5.. (up to f16 rounding of the re-roped rows); rotating the first n_rot is far off."""
    m = pyllama.load_model(tiny_model_path("deepseek2", overrides=overrides))
    assert m.hparams.is_mla == (not overrides)
    toks = np.arange(20, 32, dtype=np.int32)
    b = pyllama.Context(m, n_ctx=256)
    b.decode(pyllama.Batch(toks[:10], pos=np.arange(5, 15), seq_ids=[[0]] * 10))
    b.decode(pyllama.Batch(toks[10:11], pos=[15], seq_ids=[[0]]))
    lb = b.get_logits_ith(-1)
    errs = []
    for offset in (None, 0):                     # 0: the first n_rot values (kv_cmpr) rotated
        a = pyllama.Context(m, n_ctx=256)
        if offset is not None:
            a.memory.rope_offset = offset
        a.decode(pyllama.Batch(toks[:10], pos=np.arange(10), seq_ids=[[0]] * 10))
        a.memory.seq_add(0, 0, -1, 5)
        a.decode(pyllama.Batch(toks[10:11], pos=[15], seq_ids=[[0]]))
        errs.append(np.abs(a.get_logits_ith(-1) - lb).max() / np.abs(lb).max())
    assert errs[0] < 0.05 < errs[1]              # measured: 0.028 vs 0.89 (MLA)


# -- llama.cpp's own files (tests/make_mla_session_fixture.py, llama-completion 0c1e570) ----------

def _session_fixture():
    with open(os.path.join(os.path.dirname(__file__), "data",
                           "session-deepseek2-llamacpp.json")) as f:
        return json.load(f)


@pytest.fixture(scope="module")
def specs_deepseek2(tmp_path_factory):
    """The random deepseek2 model of tests/archsupport/specs.py the fixture was recorded on."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "archsupport"))
    import specs
    path = str(tmp_path_factory.mktemp("mla") / "deepseek2.gguf")
    specs.write_model(path, "deepseek2")
    return path


def _mib(line: str, what: str) -> float:
    return float(re.search(what + r" \(f16\):\s+([0-9.]+) MiB", line).group(1))


@pytest.mark.parametrize("n_ctx,key", [(4096, "kv_4096"), (256, "fa_on")])
def test_mla_kv_bytes_equal_what_llamacpp_logged(specs_deepseek2, n_ctx, key):
    fx = _session_fixture()
    log = fx[key] if key == "kv_4096" else fx["runs"][key]["kv_log"]
    line = [ln for ln in log if "size =" in ln][-1]
    br = pyllama.Context(pyllama.load_model(specs_deepseek2), n_ctx=n_ctx).memory_breakdown()
    assert round(br["k_bytes"] / 2**20, 2) == _mib(line, "K")
    assert br["v_bytes"] == 0 == _mib(line, "V")
    if n_ctx == 4096:                                  # 6.75 MiB: printed exactly
        assert br["k_bytes"] == 6.75 * 2**20


def _completion(model, fx, run, session, *extra):
    cmd = [sys.executable, "-m", "pyllama", "completion", "-m", model, "-p", fx["prompt"],
           *fx["args"], *run["args"], "--prompt-cache", str(session), *extra]
    return subprocess.run(cmd, capture_output=True, timeout=600,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _llamacpp_session(run) -> bytes:
    return gzip.decompress(base64.b64decode(run["session_gz_b64"]))


RUNS = ["fa_on", "fa_off", "q8_0", "q4_0"]


@pytest.mark.parametrize("run_name", RUNS)
def test_pyllama_writes_llamacpps_mla_session_file(specs_deepseek2, tmp_path, run_name):
    """Byte for byte: llama.cpp's K rows (flash attention on and off; f16, q8_0 and q4_0
    caches), its v_trans word, and no V section."""
    fx = _session_fixture()
    run = fx["runs"][run_name]
    path = tmp_path / "s.bin"
    r = _completion(specs_deepseek2, fx, run, path)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert r.stdout.decode("utf-8", "replace") == run["stdout"]
    assert path.read_bytes() == _llamacpp_session(run)


@pytest.mark.parametrize("run_name", RUNS)
def test_pyllama_reads_llamacpps_mla_session_file(specs_deepseek2, tmp_path, run_name):
    fx = _session_fixture()
    run = fx["runs"][run_name]
    path = tmp_path / "s.bin"
    path.write_bytes(_llamacpp_session(run))
    r = _completion(specs_deepseek2, fx, run, path, "--prompt-cache-ro")
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert "session file has exact match for prompt!" in r.stderr.decode()
    assert r.stdout.decode("utf-8", "replace") == run["stdout"]


@pytest.mark.slow
@pytest.mark.parametrize("fa", ["on", "off"])
def test_llamacpp_reads_pyllama_mla_session_file(specs_deepseek2, tmp_path, fa):
    """Live (llama.cpp's llama-completion): another prompt, pyllama's file equals the one
    llama.cpp writes, and llama.cpp reads pyllama's back to the text of a fresh run."""
    exe = os.path.join(os.environ.get("LLAMACPP_BIN", "/work/llamacpp/build/bin"),
                       "llama-completion")
    if not os.path.exists(exe):
        pytest.skip(f"llama.cpp's llama-completion is not built ({exe})")
    fx = {"prompt": "In the beginning of the nineteenth century the town had three mills, and",
          "args": ["--temp", "0", "-no-cnv", "-c", "512", "-n", "8", "-t", "1"]}
    ours = tmp_path / "py.bin"
    r = _completion(specs_deepseek2, fx, {"args": ["-fa", fa]}, ours)
    assert r.returncode == 0, r.stderr.decode()[-2000:]

    def llamacpp(*extra):
        out = subprocess.run([exe, "-m", specs_deepseek2, "-p", fx["prompt"], *fx["args"],
                              "-fa", fa, *extra], capture_output=True, timeout=600)
        assert out.returncode == 0, out.stderr.decode()[-2000:]
        return out
    theirs = tmp_path / "cpp.bin"
    fresh = llamacpp("--prompt-cache", str(theirs))
    assert ours.read_bytes() == theirs.read_bytes()
    loaded = llamacpp("--prompt-cache", str(ours), "--prompt-cache-ro")
    assert "session file has exact match for prompt!" in loaded.stderr.decode()
    for out in (fresh.stdout, loaded.stdout):
        # llama-completion's stdout here (the random model's text ends in split UTF-8
        # sequences) now and then lacks its last few bytes: seen once in six identical runs
        assert out == r.stdout or (r.stdout.startswith(out) and len(r.stdout) - len(out) <= 4)


@pytest.mark.parametrize("fa", [True, False])
def test_one_row_batch_equals_one_token_decodes(specs_deepseek2, fa):
    """Speculative verification (one_row) in the llama.cpp numerics equals one-token decodes
    bit for bit on the MLA graph, with flash attention (K as V, the attn_v_b after it) too."""
    m = pyllama.load_model(specs_deepseek2)
    toks = np.arange(30, 50, dtype=np.int32)
    a = pyllama.Context(m, n_ctx=256, numerics="llama.cpp", flash_attn=fa)
    a.eval(toks[:10])
    assert a.decode(pyllama.Batch(toks[10:14], pos=np.arange(10, 14), seq_ids=[[0]] * 4,
                                  logits=[True] * 4), one_row=True) == 0
    b = pyllama.Context(m, n_ctx=256, numerics="llama.cpp", flash_attn=fa)
    b.eval(toks[:10])
    want = np.concatenate([b.eval(toks[i:i + 1]) for i in range(10, 14)])
    assert np.array_equal(a.get_logits(), want)


@pytest.mark.parametrize("run_name", ["fa_on", "fa_off"])
def test_mla_seq_state_is_llamacpps(specs_deepseek2, run_name):
    """llama_state_seq_get_data of sequence 1 beside sequence 0 (one stream each), recorded by
    tests/make_mla_state_seq_fixture.py (after its u32 io magic and i32 seq id, which
    Context.state_seq_get leaves out): pyllama's bytes are llama.cpp's, and llama.cpp's bytes
    restored into another sequence of a fresh context continue as the original."""
    with open(os.path.join(os.path.dirname(__file__), "data",
                           "state-seq-deepseek2-llamacpp.json")) as f:
        fx = json.load(f)
    run = fx["runs"][run_name]
    raw = gzip.decompress(base64.b64decode(run["seq1_gz_b64"]))
    assert struct.unpack_from("<Ii", raw) == (0xAF143CD8, 1)      # llama_context's io header
    want = raw[8:]                                                # the memory's state
    m = pyllama.load_model(specs_deepseek2)

    def ctx():
        return pyllama.Context(m, n_ctx=fx["n_ctx"], n_seq_max=fx["n_seq_max"], n_threads=2,
                               numerics="llama.cpp", flash_attn=run["flash_attn"])
    a = ctx()
    a.eval(fx["seq0"], seq_id=0)
    a.eval(fx["seq1"], seq_id=1)
    assert a.state_seq_get(1) == want
    b = ctx()
    assert b.state_seq_set(want, 0) == len(want)
    assert b.memory.seq_pos_max(0) == len(fx["seq1"]) - 1
    assert np.array_equal(b.eval([7], seq_id=0), a.eval([7], seq_id=1))
