"""The 8-row kernels of AVX2 builds without VNNI (pyl_matmul.h): the repacked 8x8 types (Q4_0,
IQ4_NL, MXFP4 with rows % 8 == 0) read an 8-row interleaved copy of the weight (kernel type
| RP, made by matmul.py at the first matmul) through a mat-vec for 1-3 tokens and an 8-row gemm
from 4; IQ4_XS runs 8-row tiles from 4 tokens. Every row and token count, thread count and the
fused matmul_many must give the numpy oracle's bits (the same arithmetic as every other build).
On other builds these run the other kernels, with the same expectations."""
import numpy as np
import pytest

from pyllama.backend.base import Weight
from pyllama.backend.cpu import _matmul
from pyllama.backend.cpu import matmul as mm
from pyllama.backend.ref_matmul import matmul_ref
from pyllama.gguf import GGMLType as T

from test_matmul import kernel_threads, act, rand_weight, weight  # tests/backend is on sys.path
from matmul_checks import assert_token_slices_exact  # tests/ is on sys.path

REF = __file__.rsplit("/", 2)[0] + "/data/quant/ggml_iq_ref.npz"


def _raw(name, rows, k):
    with np.load(REF) as z:
        raw = z["raw_" + name]
    reps = (rows + raw.shape[0] - 1) // raw.shape[0]
    return np.ascontiguousarray(np.tile(raw, (reps, k // 512))[:rows])


@pytest.fixture(params=[1, 2, 3], ids=["1thread", "2threads", "3threads"])
def threads(request):
    with kernel_threads(request.param, split_small=True):
        yield request.param


@pytest.mark.parametrize("rows", [8, 24, 40])
@pytest.mark.parametrize("name", ["Q4_0", "IQ4_NL", "MXFP4", "IQ4_XS"])
def test_8row_kernels_equal_oracle(name, rows, threads):
    k = 1024
    raw = _raw(name, rows, k)
    w = Weight("w." + name, T[name], (rows, k), raw)
    x = act(35, k, seed=5)
    x[7] *= 1e-3
    want = matmul_ref(w.type, w.raw, x)
    assert_token_slices_exact(w, x, want)


@pytest.mark.parametrize("rows", [13, 21, 29])
def test_iq4_xs_partial_8row_tile(rows, threads):
    """rows % 8 != 0: the last 8-row tile runs 4 rows at a time (the 4-row tiles' bits)."""
    raw = _raw("IQ4_XS", rows, 512)
    w = Weight("w", T.IQ4_XS, (rows, 512), raw)
    x = act(12, 512, seed=6)
    want = matmul_ref(w.type, w.raw, x)
    for n in (1, 3, 4, 5, 8, 12):
        assert np.array_equal(mm.matmul(w, x[:n]), want[:n]), n


@pytest.mark.parametrize("n", [1, 2, 3, 5, 9])
def test_matmul_many_with_repacked_weights(n):
    """q/k/v-style fusion of a repacked type with an unrepacked one of the same activation kind
    (the IQ4_XS model's IQ4_NL q/k and Q5_1 v): each output as its own matmul."""
    k = 512
    ws = [Weight("q", T.IQ4_NL, (32, k), _raw("IQ4_NL", 32, k)),
          weight(T.Q5_1, rand_weight(T.Q5_1, 16, k, seed=2)),
          Weight("o", T.Q4_0, (16, k), _raw("Q4_0", 16, k))]
    x = act(n, k, seed=8)
    outs = mm.matmul_many(ws, x)
    for w, y in zip(ws, outs):
        assert np.array_equal(y, mm.matmul(w, x))
        if w.type != T.Q5_1:              # (the oracle sums Q5_1's blocks in another order)
            assert np.array_equal(y, matmul_ref(w.type, w.raw, x))


def test_repack_layout_and_plain_rows_kept():
    """repack_r8: per 8-row group and block, the 8 d's then vector v lane l = row l's
    qs[4v..4v+3]; get_rows and an explicit kernel type (ktype) still read the GGUF rows."""
    rows, k = 16, 512
    raw = _raw("Q4_0", rows, k)
    out = np.empty_like(raw)
    _matmul.repack_r8(int(T.Q4_0), raw, out)
    blocks = raw.reshape(rows // 8, 8, k // 32, 18)
    got = out.reshape(rows // 8, k // 32, 8 * 18)
    for g in range(rows // 8):
        for b in range(k // 32):
            o = got[g, b]
            assert np.array_equal(o[:16].reshape(8, 2), blocks[g, :, b, :2])
            qs = o[16:].reshape(4, 8, 4)                     # [v, lane, byte]
            assert np.array_equal(qs.transpose(1, 0, 2).reshape(8, 16), blocks[g, :, b, 2:])
    w = Weight("w", T.Q4_0, (rows, k), raw)
    x = act(3, k, seed=9)
    mm.matmul(w, x)                                          # makes the repacked copy
    from pyllama.quant import dequantize
    assert np.array_equal(mm.get_rows(w, np.array([3, 11])), dequantize(raw[[3, 11]], T.Q4_0))
    plain = mm.matmul(w, x, ktype=int(T.Q4_0))               # tinyBLAS lanes on the GGUF rows
    w15 = Weight("w15", T.Q4_0, (15, k), np.ascontiguousarray(raw[:15]))   # not repacked
    assert np.array_equal(plain[:, :15], mm.matmul(w15, x))


@pytest.mark.parametrize("rows", [8, 24, 29])
def test_q8_0_8row_tiles_equal_direct(rows, threads):
    """Q8_0 beyond the direct path's 16 tokens: 8-row tiles holding the tiles' 8 float lanes
    with lane = row; every token equals its one-token mat-vec, for any token count."""
    w = weight(T.Q8_0, rand_weight(T.Q8_0, rows, 1024, seed=4))
    x = act(40, 1024, seed=10)
    x[9] *= 1e-3
    big = mm.matmul(w, x)
    for i in range(40):
        assert np.array_equal(mm.matmul(w, x[i:i + 1])[0], big[i]), i
    for n in (17, 18, 21, 33):
        assert np.array_equal(mm.matmul(w, x[40 - n:]), big[40 - n:]), n
