"""numerics="llama.cpp": llama.cpp's one-token CPU kernels (cpu/_compat.pyx + pyl_compat.h) against
their numpy oracle (backend/ref_compat.py) bit for bit, the oracle against float64 arithmetic
(sanity), the row-count kernel choice (backend/compat.py) and the Context option. The end-to-end
oracle is llama.cpp itself: tests/test_greedy.py (its greedy tokens, 14/14 prompts), and per kernel
tests/data/compat-llamacpp.npz (llama.cpp's kernels run on random blocks through ctypes,
tests/make_numerics_compat_fixture.py)."""
import os

import numpy as np
import pytest

import pyllama
from pyllama.backend import compat, get_backend, ref_compat
from pyllama.backend.base import Weight
from pyllama.backend.cpu import compat as cpu_compat
from pyllama.backend.ref_matmul import dequantize_ref, quantize_q8_K_ref
from pyllama.errors import ContextError
from pyllama.gguf import GGML_BLOCK, GGMLType
from tiny import tiny_path

T = GGMLType
DATA = os.path.join(os.path.dirname(__file__), "data")



def random_k_weight(rng, wtype, rows, k):
    """Random K-quant blocks (every bit pattern of quants and scales) with sane f16 d/dmin."""
    nb, bb = k // 256, GGML_BLOCK[wtype][1]
    raw = rng.integers(0, 256, (rows, nb, bb), dtype=np.uint8)
    d = rng.uniform(1e-3, 1e-2, (rows, nb, 2)).astype(np.float16).view(np.uint8)
    at = {T.Q2_K: 80, T.Q3_K: 108, T.Q4_K: 0, T.Q5_K: 0, T.Q6_K: 208}[wtype]
    n_d = 4 if wtype in (T.Q2_K, T.Q4_K, T.Q5_K) else 2     # d (and dmin)
    raw[..., at:at + n_d] = d[..., 0:n_d]
    return Weight(f"w.{wtype.name}", wtype, (rows, k), raw.reshape(rows, nb * bb))


def activations(rng, n, k):
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[0, :256] = 0.0                                         # an all-zero block
    if n > 1:
        x[1, 7], x[1, 9] = 3.5, -3.5                         # |max| tie of both signs
    return x


def test_q8_K_quantizer_equals_reference():
    rng = np.random.default_rng(1)
    x = activations(rng, 64, 2048) * rng.uniform(0.01, 100, (64, 1)).astype(np.float32)
    for a, b in zip(cpu_compat.quantize_q8_K(x), quantize_q8_K_ref(x)):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("wtype,rows", [(T.Q4_K, 40), (T.Q4_K, 36), (T.Q2_K, 36), (T.Q3_K, 36),
                                        (T.Q5_K, 36), (T.Q6_K, 40)])
@pytest.mark.parametrize("n", [1, 3, 5])
def test_matvec_kernel_equals_oracle(wtype, rows, n):
    """Q4_K: 40 rows -> the repacked gemv, 36 rows -> vec_dot."""
    rng = np.random.default_rng(int(wtype) * 10 + n)
    w = random_k_weight(rng, wtype, rows, 1024)
    x = activations(rng, n, 1024)
    want = ref_compat.matvec_k(wtype, w.raw, x)
    for nth in (1, 2):
        assert np.array_equal(cpu_compat.matvec_k(w, x, nth), want)
    exact = x.astype(np.float64) @ dequantize_ref(wtype, w.raw).astype(np.float64).T
    assert np.allclose(want, exact, rtol=0.02, atol=0.02 * np.abs(exact).max())


def test_kernels_equal_llama_cpp():
    """llama.cpp's own quantize_row_q8_K_ref, ggml_vec_dot_q{2,3,4,5,6}_K_q8_K, ggml_gemv_q4_K_8x8_q8_K
    and ggml_vec_dot_f16 outputs (stored), reproduced bit for bit by kernels and oracle."""
    z = np.load(os.path.join(DATA, "compat-llamacpp.npz"))
    x = z["x"]
    q, d, bs = cpu_compat.quantize_q8_K(x)
    assert np.array_equal(q, z["q8_qs"]) and np.array_equal(d, z["q8_d"])
    assert np.array_equal(bs, z["q8_bsums"])
    for key, wtype in (("6", T.Q6_K), ("4", T.Q4_K)):
        raw = z["w" + key]
        w = Weight("w", wtype, (raw.shape[0], x.shape[1]), raw)
        assert np.array_equal(cpu_compat.matvec_k(w, x, 2), z["y" + key])
        assert np.array_equal(ref_compat.matvec_k(wtype, raw, x), z["y" + key])
    x2 = z["x2"]
    for key, wtype in (("4v", T.Q4_K), ("5v", T.Q5_K), ("2v", T.Q2_K), ("3v", T.Q3_K)):
        # 12 rows: this Q4_K is not repacked
        raw = z["w" + key]
        w = Weight("w", wtype, (raw.shape[0], x2.shape[1]), raw)
        assert np.array_equal(cpu_compat.matvec_k(w, x2, 2), z["y" + key])
        assert np.array_equal(ref_compat.matvec_k(wtype, raw, x2), z["y" + key])
    for a, b, n, y in zip(z["f16_a"], z["f16_b"], z["f16_len"], z["f16_dot"]):
        assert ref_compat.vec_dot_f16(a[:n].astype(np.float32), b[:n].astype(np.float32)) == y


def test_matvec_rows_are_independent():
    rng = np.random.default_rng(7)
    w = random_k_weight(rng, T.Q6_K, 24, 512)
    x = activations(rng, 4, 512)
    one = np.concatenate([cpu_compat.matvec_k(w, x[i:i + 1], 1) for i in range(4)])
    assert np.array_equal(cpu_compat.matvec_k(w, x, 2), one)


def cache(rng, n_cells, n_kv, dk, dv):
    k = (0.5 * rng.standard_normal((n_cells, n_kv * dk))).astype(np.float16)
    v = rng.standard_normal((n_cells, n_kv * dv)).astype(np.float16)
    return k, v


def lists_for(kind, n_cells):
    if kind == "from0":
        return [np.arange(0, 77)]
    if kind == "window":                                     # SWA window not at a multiple of 32
        return [np.arange(45, 300)]
    if kind == "ring":                                       # position order != cell order
        return [np.concatenate([np.arange(250, n_cells), np.arange(0, 70)])]
    if kind == "several":
        return [np.arange(0, 5), np.array([], np.int64), np.arange(3, 130, 3)]
    raise ValueError(kind)


def pack(lists):
    lens = np.array([len(c) for c in lists], np.int64)
    end = np.cumsum(lens)
    return np.concatenate(lists).astype(np.int32), end - lens, end


def float64_attention(q, k, v, cells, qs, qe, scale):
    n_q, H, dk = q.shape
    n_kv = k.shape[1] // dk
    out = np.zeros((n_q, H, v.shape[1] // n_kv))
    for i in range(n_q):
        c = cells[qs[i]:qe[i]]
        if len(c) == 0:
            continue
        for h in range(H):
            kh = h // (H // n_kv)
            kk = k[c].astype(np.float64).reshape(len(c), n_kv, dk)[:, kh]
            vv = v[c].astype(np.float64).reshape(len(c), n_kv, -1)[:, kh]
            s = scale * kk @ q[i, h].astype(np.float64)
            p = np.exp(s - s.max())
            out[i, h] = p @ vv / p.sum()
    return out


@pytest.mark.parametrize("shape", [(4, 1, 256, 256), (14, 2, 64, 64), (6, 3, 40, 40)])
@pytest.mark.parametrize("kind", ["from0", "window", "ring", "several"])
def test_attention_vec_kernel_equals_oracle(shape, kind):
    H, n_kv, dk, dv = shape
    rng = np.random.default_rng(dk + H)
    k, v = cache(rng, 320, n_kv, dk, dv)
    cells, qs, qe = pack(lists_for(kind, 320))
    q = rng.standard_normal((len(qs), H, dk)).astype(np.float32)
    scale = 1.0 / np.sqrt(dk)
    want = ref_compat.attention_vec(q, k, v, cells, qs, qe, scale)
    for nth in (1, 2):
        got = cpu_compat.attention_vec(q, k, v, cells, qs, qe, scale, 0.0, nth)
        assert np.array_equal(got, want)
    assert np.allclose(want, float64_attention(q, k, v, cells, qs, qe, scale), atol=5e-3)


def test_attention_vec_ignores_list_order():
    """llama.cpp reduces over the cache rows in cell order: the listed order does not matter."""
    rng = np.random.default_rng(3)
    k, v = cache(rng, 200, 1, 64, 64)
    q = rng.standard_normal((1, 2, 64)).astype(np.float32)
    c = rng.permutation(200)[:90]
    a = cpu_compat.attention_vec(q, k, v, *pack([c]), 0.125, 0.0, 1)
    b = cpu_compat.attention_vec(q, k, v, *pack([np.sort(c)]), 0.125, 0.0, 1)
    assert np.array_equal(a, b)


def fa_lists(rng, n_q, n_cells, kind):
    """n_q cell lists: 'causal' (query i sees cells 0..i+1, the tiles of a prompt), 'random'
    (random subsets in random order), 'ring' (a window wrapping around the cache end)."""
    if kind == "causal":
        return [np.arange(0, i + 2) for i in range(n_q)]
    if kind == "ring":
        return [np.concatenate([np.arange(n_cells - 40 + i % 7, n_cells), np.arange(0, 90)])
                for i in range(n_q)]
    return [rng.permutation(n_cells)[:rng.integers(0, 200)] for _ in range(n_q)]


@pytest.mark.parametrize("n_q,dtype", [(1, np.float16), (5, np.float16), (64, np.float16),
                                       (70, np.float16), (64, np.float32), (70, np.float32)])
@pytest.mark.parametrize("kind", ["causal", "random", "ring"])
def test_attention_fa_kernel_equals_oracle(n_q, dtype, kind):
    """llama.cpp's flash attention (tiled from 64 queries, one_chunk below: f16 caches only) in C
    against the numpy oracle, bit for bit, whatever the thread count; and near float64."""
    rng = np.random.default_rng(n_q)
    H, n_kv, d = 4, 2, 64
    k = (rng.standard_normal((260, n_kv * d)) * 2).astype(dtype)
    v = rng.standard_normal((260, n_kv * d)).astype(dtype)
    cells, qs, qe = pack(fa_lists(rng, n_q, 260, kind))
    q = (rng.standard_normal((n_q, H, d)) * 2).astype(np.float32)
    want = ref_compat.attention_fa(q, k, v, cells, qs, qe, 0.125)
    for nth in (1, 2):
        assert np.array_equal(cpu_compat.attention_fa(q, k, v, cells, qs, qe, 0.125, 0.0, nth),
                              want)
    assert np.allclose(want, float64_attention(q, k, v, cells, qs, qe, 0.125), atol=4e-3)


@pytest.mark.parametrize("H,n_kv,dk,dv,dtype", [(72, 1, 36, 24, np.float16),
                                                 (6, 2, 44, 20, np.float32),
                                                 (3, 3, 64, 40, np.float16)])
def test_attention_fa_tiled_blocks_equal_oracle(H, n_kv, dk, dv, dtype):
    """The tiled kernel works on blocks of (query, head) rows sharing a KV head: more heads per KV
    head than a block holds (split), head sizes that are no multiple of 8 or 16, dk != dv, queries
    of one block seeing different tiles, K rows packed 8 x 8 with a d % 8 tail; bit for bit
    the per-row oracle."""
    rng = np.random.default_rng(H + dv)
    n_q = 67
    k = (rng.standard_normal((300, n_kv * dk)) * 2).astype(dtype)
    v = rng.standard_normal((300, n_kv * dv)).astype(dtype)
    lists = fa_lists(rng, n_q, 300, "random")
    lists[5] = np.arange(200, 300)                   # a query alone in the later tiles
    lists[6] = np.array([], np.int64)
    cells, qs, qe = pack(lists)
    q = (rng.standard_normal((n_q, H, dk)) * 2).astype(np.float32)
    want = ref_compat.attention_fa(q, k, v, cells, qs, qe, 0.125)
    for nth in (1, 2):
        assert np.array_equal(cpu_compat.attention_fa(q, k, v, cells, qs, qe, 0.125, 0.0, nth),
                              want)


@pytest.mark.parametrize("nth", [1, 2, 3])
@pytest.mark.parametrize("kind", ["causal", "random", "ring"])
def test_attention_fa_split_kv_equals_oracle(nth, kind):
    """One query over a KV view of >= 512 cells: llama.cpp's split-KV path, one one_chunk per
    thread's slice of the view, partials merged in order (its result depends on the thread
    count, as llama.cpp's does); C against the oracle bit for bit."""
    rng = np.random.default_rng(nth)
    k = (rng.standard_normal((1100, 128)) * 2).astype(np.float16)
    v = rng.standard_normal((1100, 128)).astype(np.float16)
    lists = {"causal": [np.arange(0, 700)], "random": [rng.permutation(1024)[:600]],
             "ring": [np.concatenate([np.arange(900, 1024), np.arange(0, 400)])]}[kind]
    cells, qs, qe = pack(lists)
    q = (rng.standard_normal((1, 4, 64)) * 2).astype(np.float32)
    view = (0, 1024)
    want = ref_compat.attention_fa(q, k, v, cells, qs, qe, 0.125, 0.0, view, nth)
    got = cpu_compat.attention_fa(q, k, v, cells, qs, qe, 0.125, 0.0, nth, view)
    assert np.array_equal(got, want)
    assert np.allclose(want, float64_attention(q, k, v, cells, qs, qe, 0.125), atol=4e-3)
    if nth > 1:       # not the one_chunk result: the chunks are merged
        one = ref_compat.attention_fa(q, k, v, cells, qs, qe, 0.125)
        assert not np.array_equal(want, one)


def test_kv_view_pads_used_cells_to_256(tmp_path):
    """kv_view: llama.cpp's n_kv (used cells padded to 256, at most the cache), per cache."""
    m = pyllama.load_model(tiny_path(str(tmp_path), "llama"))
    ctx = pyllama.Context(m, n_ctx=1024)
    ctx.eval(list(range(1, 40)))
    assert ctx.memory.kv_view(0) == (0, 256)
    ctx.eval(list(range(1, 260)))
    assert ctx.memory.kv_view(0) == (0, 512)


@pytest.mark.parametrize("kt,vt", [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("q8_0", "f16"),
                                   ("q4_0", "q8_0"), ("f16", "q8_0"), ("f16", "q4_0")])
@pytest.mark.parametrize("n_q", [1, 5, 70])
@pytest.mark.parametrize("softcap", [0.0, 20.0])
def test_attention_fa_quantized_kv_equals_oracle(kt, vt, n_q, softcap):
    """Flash attention over q8_0 / q4_0 K (llama.cpp's one_chunk for every ubatch: q as q8_0,
    vec_dot_q*_0_q8_0; a quantized V dequantized and summed in f32, an f16 V in f16) and over f16
    K with a quantized V (q rounded to f16, vec_dot_f16): C against the oracle bit for bit, and
    near float64 over the dequantized caches."""
    from pyllama.backend.base import kv_decode, kv_encode
    rng = np.random.default_rng(n_q)
    H, n_kv, d = 4, 2, 64
    k = kv_encode((rng.standard_normal((200, n_kv * d)) * 2).astype(np.float32), kt)
    v = kv_encode(rng.standard_normal((200, n_kv * d)).astype(np.float32), vt)
    cells, qs, qe = pack(fa_lists(rng, n_q, 200, "random"))
    q = (rng.standard_normal((n_q, H, d)) * 2).astype(np.float32)
    want = ref_compat.attention_fa(q, k, v, cells, qs, qe, 0.125, softcap)
    for nth in (1, 2):
        assert np.array_equal(cpu_compat.attention_fa(q, k, v, cells, qs, qe, 0.125, softcap, nth),
                              want)
    if not softcap:      # q itself is quantized to q8_0: ~1e-2 off exact attention
        kf, vf = kv_decode(k, kt), kv_decode(v, vt)
        err = np.abs(want - float64_attention(q, kf, vf, cells, qs, qe, 0.125))
        assert err.mean() < 0.01 and err.max() < 0.1


def test_attention_fa_softcap_equals_oracle():
    """With a logit softcap (Gemma 2): tanhf and expf from the C library on both sides."""
    rng = np.random.default_rng(9)
    k = (rng.standard_normal((200, 64)) * 3).astype(np.float16)
    v = rng.standard_normal((200, 64)).astype(np.float16)
    for n_q in (3, 64):
        cells, qs, qe = pack(fa_lists(rng, n_q, 200, "random"))
        q = (rng.standard_normal((n_q, 2, 64)) * 3).astype(np.float32)
        a = ref_compat.attention_fa(q, k, v, cells, qs, qe, 0.125, 5.0)
        b = cpu_compat.attention_fa(q, k, v, cells, qs, qe, 0.125, 5.0, 2)
        assert np.array_equal(a, b)


def test_attention_fa_tiles_follow_cell_index():
    """The tiled kernel's online softmax steps over 64-cell tiles of cell index: the same visible
    cells give different bits when their tile boundaries move, and listing order is irrelevant."""
    rng = np.random.default_rng(4)
    k = (rng.standard_normal((256, 64)) * 4).astype(np.float16)
    v = rng.standard_normal((256, 64)).astype(np.float16)
    q = (rng.standard_normal((64, 1, 64)) * 4).astype(np.float32)
    c = np.arange(0, 100)
    a = cpu_compat.attention_fa(q, k, v, *pack([c] * 64), 0.125, 0.0, 1)
    b = cpu_compat.attention_fa(q, k, v, *pack([rng.permutation(c)] * 64), 0.125, 0.0, 1)
    assert np.array_equal(a, b)
    k2, v2 = np.roll(k, 30, axis=0), np.roll(v, 30, axis=0)       # same rows at cells 30..129
    d = cpu_compat.attention_fa(q, k2, v2, *pack([c + 30] * 64), 0.125, 0.0, 1)
    assert np.allclose(a, d, atol=1e-5) and not np.array_equal(a, d)


def test_compat_attention_routes_flash_attention():
    """numerics='llama.cpp' with flash attention: f16 caches always, f32 from 64 queries, q8_0 /
    q4_0 K with q8_0 / q4_0 / f16 V (else the attention without it)."""
    be = get_backend("cpu", 1)
    rng = np.random.default_rng(2)
    from pyllama.backend.base import kv_encode
    for kt, vt, n_q, fa in [("f16", "f16", 3, True), ("f32", "f32", 64, True),
                            ("f32", "f32", 3, False), ("q8_0", "q4_0", 3, True),
                            ("bf16", "bf16", 3, False), ("f16", "q8_0", 3, True),
                            ("q8_0", "bf16", 3, False)]:
        k = kv_encode(rng.standard_normal((80, 64)).astype(np.float32), kt)
        v = kv_encode(rng.standard_normal((80, 64)).astype(np.float32), vt)
        q = rng.standard_normal((n_q, 2, 64)).astype(np.float32)
        cells, qs, qe = pack([np.arange(0, 70)] * n_q)
        got = compat.attention(be, q, k, v, cells, qs, qe, 0.125, flash_attn=True)
        if fa:
            want = ref_compat.attention_fa(q, k, v, cells, qs, qe, 0.125)
        else:
            want = compat.attention(be, q, k, v, cells, qs, qe, 0.125)
        assert np.array_equal(got, want)


def _vdot_scalar(a, b):
    """ggml_vec_dot_f16 written out with scalar float32 operations (independent of the oracle)."""
    f = np.float32
    acc = [[f(0)] * 8 for _ in range(4)]
    n32 = len(a) - len(a) % 32
    for t in range(0, n32, 32):
        for j in range(4):
            for l in range(8):
                e = t + 8 * j + l
                acc[j][l] = f(np.float64(a[e]) * np.float64(b[e]) + np.float64(acc[j][l]))
    x = [f(f(acc[0][l] + acc[2][l]) + f(acc[1][l] + acc[3][l])) for l in range(8)]
    t4 = [f(x[l] + x[l + 4]) for l in range(4)]
    s = np.float64(f(f(t4[0] + t4[1]) + f(t4[2] + t4[3])))
    for e in range(n32, len(a)):
        s += np.float64(f(a[e] * b[e]))
    return f(s)


def test_vec_dot_f16_oracle_follows_ggml():
    rng = np.random.default_rng(11)
    for n in (32, 64, 72):
        a = rng.standard_normal(n) * 10 ** rng.uniform(-3, 3, n)
        a = a.astype(np.float16).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float16).astype(np.float32)
        assert ref_compat.vec_dot_f16(a, b) == _vdot_scalar(a, b)
    # the order is visible: lanes 0 and 4 hold +-2^24, lane 1 holds 1 (ggml's hsum8 order
    # ((l0+l4)+(l2+l6))+((l1+l5)+(l3+l7)) and this one agree here, a plain running sum does not)
    a = np.zeros(32, np.float32)
    a[0], a[4], a[1], a[2] = 2.0 ** 24, -(2.0 ** 24), 1.0, 1.0
    assert ref_compat.vec_dot_f16(a, np.ones(32, np.float32)) == 2.0


def test_vec_row_start_follows_llama_cpp():
    assert [compat.vec_row_start(T.Q4_K, 64, n) for n in (1, 3, 4, 6, 8, 13)] == [0, 0, 4, 4, 8, 12]
    assert compat.vec_row_start(T.Q4_K, 60, 6) == 0              # not repacked: vec_dot < 8
    assert compat.vec_row_start(T.Q4_K, 60, 9) == 9
    for wtype in (T.Q2_K, T.Q3_K, T.Q5_K, T.Q6_K):
        assert [compat.vec_row_start(wtype, 64, n) for n in (1, 7, 8, 20)] == [0, 0, 8, 20]
    assert compat.vec_row_start(T.Q8_0, 64, 1) == 1


@pytest.mark.parametrize("wtype,n", [(T.Q4_K, 6), (T.Q4_K, 2), (T.Q6_K, 5), (T.Q6_K, 9)])
def test_compat_matmul_splits_rows(wtype, n):
    be = get_backend("cpu", 2)
    rng = np.random.default_rng(n)
    w = random_k_weight(rng, wtype, 64, 512)
    x = activations(rng, n, 512)
    s = compat.vec_row_start(wtype, 64, n)
    y = compat.matmul(be, w, x)
    assert np.array_equal(y[:s], be.matmul(w, x)[:s])
    assert np.array_equal(y[s:], ref_compat.matvec_k(wtype, w.raw, x[s:]))


def test_ref_backend_uses_the_oracle():
    rng = np.random.default_rng(5)
    w = random_k_weight(rng, T.Q6_K, 16, 256)
    x = activations(rng, 1, 256)
    assert np.array_equal(compat.matmul(get_backend("ref"), w, x),
                          compat.matmul(get_backend("cpu", 1), w, x))


# -- Context option -----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    # head size 64 (32-element steps of vec_dot_f16), a 40-token prompt (several 8-cell lanes), F32
    # weights (q8 activation rounding would hide the ulp-level attention differences)
    return pyllama.load_model(tiny_path(str(tmp_path_factory.mktemp("nc")), "llama", all_f32=True,
                                        overrides={"embedding_length": 256}))


def test_context_rejects_unknown_numerics(tiny_llama):
    with pytest.raises(ContextError):
        pyllama.Context(tiny_llama, n_ctx=256, numerics="fast")


def _run(model, numerics, prompt, extra, logits_all=False):
    ctx = pyllama.Context(model, n_ctx=256, numerics=numerics)
    first = ctx.eval(prompt, logits_all=logits_all)
    return first, [ctx.eval([t]) for t in extra]


def test_context_llama_cpp_mode(tiny_llama):
    """Without K-quant weights llama.cpp's choice changes only the output head of a multi-row
    prefill whose rows all reach it (this model's tied 279-row head: tinyBLAS needs rows % 4 == 0,
    so llama.cpp runs ggml_vec_dot_f32 per element; close, not equal); a prefill that keeps only
    its last row sends that row through ggml_vec_dot_f32 too (one row: tinyBLAS needs n >= 2), and
    the decodes' one-token attention and matmuls (close, not equal)."""
    prompt, extra = [(7 * i + 3) % 250 for i in range(40)], [11, 12, 13]
    a0, _ = _run(tiny_llama, "invariant", prompt, extra, logits_all=True)
    b0, _ = _run(tiny_llama, "llama.cpp", prompt, extra, logits_all=True)
    assert a0.shape[1] % 4 and not np.array_equal(a0, b0) and np.allclose(a0, b0, atol=1e-4)
    a0, a = _run(tiny_llama, "invariant", prompt, extra)
    b0, b = _run(tiny_llama, "llama.cpp", prompt, extra)
    assert np.allclose(a0, b0, atol=1e-4)
    assert any(not np.array_equal(x, y) for x, y in zip(a, b))
    for x, y in zip(a, b):
        assert np.allclose(x, y, atol=1e-3)
    c0, c = _run(tiny_llama, "llama.cpp", prompt, extra)     # deterministic
    assert all(np.array_equal(x, y) for x, y in zip(b, c))
