"""pyllama.perplexity numbers against numpy references and llama.cpp's formulas/file format."""
import io
import math

import numpy as np
import pytest

from pyllama import perplexity as ppl


def _logits(n=6, V=50, seed=0):
    return (np.random.default_rng(seed).standard_normal((n, V)) * 3).astype(np.float32)


def test_nll_matches_float64_log_softmax():
    lg = _logits()
    t = np.arange(len(lg)) % lg.shape[1]
    ref = -(lg.astype(np.float64) - np.log(np.exp(lg.astype(np.float64)).sum(1, keepdims=True)))
    np.testing.assert_allclose(ppl.nll_rows(lg, t), ref[np.arange(len(t)), t], rtol=1e-5)


def test_quantized_log_probs_round_trip():
    lg = _logits(V=51)          # odd vocab: rows padded to an even number of uint16
    t = np.array([0, 1, 2, 3, 4, 5])
    rows, nll = ppl.quantize_log_probs(lg, t)
    assert rows.shape == (6, ppl.row_units(51)) == (6, 2 * 26 + 4)
    hdr = rows[:, :4].copy().view(np.float32)
    lp = hdr[:, :1] * rows[:, 4:55].astype(np.float32) + hdr[:, 1:2]
    ref = lg - np.log(np.exp(lg.astype(np.float64)).sum(1, keepdims=True))
    live = ref > ref.max(1, keepdims=True) - 16
    assert np.all(np.abs(lp - ref)[live] <= hdr[:, :1].repeat(51, 1)[live] * 0.51 + 1e-5)
    np.testing.assert_allclose(nll, ppl.nll_rows(lg, t), rtol=1e-6)


def test_kld_against_itself_is_zero_and_same_top():
    lg = _logits(n=20, V=40, seed=3)
    t = np.arange(20) % 40
    rows, _ = ppl.quantize_log_probs(lg, t)
    st = ppl.KldStats()
    ppl.kld_rows(lg, rows, t, st)
    assert st.count == 20 and st.n_same_top == 20
    assert abs(st.sum_kld) / 20 < 1e-4 and st.max_p_diff < 1e-3


def test_kld_matches_direct_formula():
    a, b = _logits(n=12, V=30, seed=1), _logits(n=12, V=30, seed=2)
    t = np.arange(12)
    rows, _ = ppl.quantize_log_probs(b, t)
    st = ppl.KldStats()
    ppl.kld_rows(a, rows, t, st)
    pb = np.exp(b - np.log(np.exp(b.astype(np.float64)).sum(1, keepdims=True)))
    la = a - np.log(np.exp(a.astype(np.float64)).sum(1, keepdims=True))
    lb = np.log(pb)
    ref = (pb * (lb - la)).sum(1)          # KL(base || current)
    np.testing.assert_allclose(st.kld_values, ref, atol=2e-3)
    assert st.n_same_top == int((a.argmax(1) == b.argmax(1)).sum())


def test_final_estimate_formula():
    acc = ppl.PplAccumulator()
    nll = np.array([1.0, 2.0, 3.0, 2.5])
    acc.add(nll)
    value, err = acc.final()
    assert value == pytest.approx(math.exp(2.125))
    assert err == pytest.approx(math.exp(2.125) * nll.std(ddof=0) * math.sqrt(4 / 3) / 2)


def test_plan_follows_llama_cpp():
    pl = ppl.plan(5000, 512, 2048)
    assert (pl.n_seq, pl.n_batch, pl.n_chunk, pl.first) == (4, 2048, 9, 256)
    pl = ppl.plan(5000, 512, 2048, n_chunks=4)
    assert pl.n_chunk == 4
    pl = ppl.plan(5000, 1024, 256)
    assert (pl.n_seq, pl.num_batches) == (1, 4)
    assert ppl.plan(5000, 512, 700).n_batch == 512     # clamped to n_seq * n_ctx


def test_base_file_header_round_trip():
    f = io.BytesIO()
    toks = np.arange(40, dtype=np.int32)
    ppl.write_header(f, 8, 51, 5, toks)
    rows, _ = ppl.quantize_log_probs(_logits(n=3, V=51), np.array([0, 1, 2]))
    f.write(rows.tobytes())
    f.seek(0)
    base = ppl.open_base(f)
    assert (base.n_ctx, base.n_vocab, base.n_chunk) == (8, 51, 5)
    assert base.tokens.tolist() == list(range(40))
    np.testing.assert_array_equal(base.chunk_rows(), rows)
    with pytest.raises(Exception, match="log-probabilities"):
        ppl.open_base(io.BytesIO(b"notlogits" + bytes(20)))
