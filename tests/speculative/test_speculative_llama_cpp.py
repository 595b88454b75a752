"""Speculative decoding in the llama.cpp numerics: a verification batch decoded with
one_row=True gives each row the logits of its own one-token decode bit for bit (without it the
rows differ), so greedy speculative output equals plain llama.cpp-numerics decoding, token for
token and logit for logit, on Qwen2.5 (no SWA) and Gemma 3 (inside its SWA window), with and
without flash attention, for the n-gram and the draft-model drafters."""
import numpy as np
import pytest

import pyllama
from pyllama.generate import decode_tokens, generate
from pyllama.sampling import SamplerParams
from pyllama.speculative import (DraftModelDrafter, NgramDrafter, SpecParams, SpecStats,
                                 speculative_generate)
from recording_chain import Recording

CODE = ("def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n\n\n"
        "def area(w, h):\n    return w * h\n\n\ndef perimeter(")
N_PREDICT = 24


@pytest.fixture(scope="module", params=["qwen", "gemma"])
def model(request):
    path = request.getfixturevalue(f"{request.param}_path")
    return pyllama.load_model(path)


def ctx_of(model, fa):
    return pyllama.Context(model, n_ctx=512, numerics="llama.cpp", flash_attn=fa, n_threads=2)


@pytest.mark.parametrize("fa", [False, True])
def test_verification_rows_equal_one_token_decodes(model, fa):
    prompt = model.tokenize(CODE)
    extra = model.tokenize("2 * (w + h)\n")[:5]
    a = ctx_of(model, fa)
    decode_tokens(a, prompt)
    one = []
    for t in extra:
        decode_tokens(a, [t])
        one.append(a.get_logits_ith(-1).copy())
    for one_row in (True, False):
        b = ctx_of(model, fa)
        decode_tokens(b, prompt)
        decode_tokens(b, extra, logits_all=True, one_row=one_row)
        same = [np.array_equal(one[i], b.get_logits_ith(i)) for i in range(len(extra))]
        if one_row:
            assert all(same)
        else:         # the batch arithmetic: rows after the first differ (the mode is needed)
            assert not all(same[1:])


def drafter(kind, model):
    if kind == "ngram":
        return NgramDrafter(size_n=3, size_m=8, min_n=1)
    # the target itself in the invariant numerics: close to the target, so drafts get accepted
    return DraftModelDrafter(pyllama.Context(model, n_ctx=512, n_threads=2))


@pytest.mark.parametrize("kind,fa", [("ngram", False), ("ngram", True), ("draft", False)])
def test_greedy_speculative_equals_plain_llama_cpp_numerics(model, kind, fa):
    prompt = model.tokenize(CODE)
    ref = Recording(SamplerParams(temp=0.0), model.n_vocab, eog_ids=())
    ref_toks = list(generate(ctx_of(model, fa), prompt, ref, n_predict=N_PREDICT, stop_tokens=()))
    s = Recording(SamplerParams(temp=0.0), model.n_vocab, eog_ids=())
    st = SpecStats()
    toks = list(speculative_generate(ctx_of(model, fa), s, prompt, drafter(kind, model),
                                     SpecParams(n_max=6), n_predict=N_PREDICT, stop_tokens=(),
                                     stats=st))
    assert toks == ref_toks
    assert st.n_accept > 0                     # multi-row verification batches were run
    # each emitted token's logits are those plain decoding sampled from, bit for bit (the chain
    # samples each verified row up to the first rejection: plain's rows appear in order)
    got = iter(s.rows)
    for r in ref.rows:
        assert any(np.array_equal(r, g) for g in got)


# -- past the SWA window without --swa-full (Gemma 3: n_swa 512; n_ubatch 64 -> an SWA cache of
# 768 cells per sequence, smaller than the context, so generation wraps around its ring) -------
LONG = "".join(f"def f{i}(x):\n    return x * {i} + {i * 7 % 13}\n\n" for i in range(37))
N_LONG = 100


def long_ctx(model, numerics, n_seq_max):
    return pyllama.Context(model, n_ctx=1024 * n_seq_max, n_ubatch=64, n_seq_max=n_seq_max,
                           kv_unified=n_seq_max > 1, numerics=numerics, n_threads=2)


@pytest.mark.slow
@pytest.mark.parametrize("numerics", ["llama.cpp", "invariant"])
@pytest.mark.parametrize("n_seq_max", [1, 2])
def test_greedy_speculative_equals_plain_past_the_swa_window(gemma_path, numerics, n_seq_max):
    """692 prompt tokens + 100 generated through a 768-cell SWA ring (one sequence), or through
    a 1280-cell unified ring that another slot's 500-token prompt shares (two): the rounds'
    rejections cross the ring's end. Tokens and every sampled logit row equal plain decoding's
    (on main before the row-by-row placement, the llama.cpp numerics' logits parted at the 81st
    token of the one-sequence case)."""
    model = pyllama.load_model(gemma_path)
    prompt = model.tokenize(LONG)
    runs = []
    for spec in (False, True):
        ctx = long_ctx(model, numerics, n_seq_max)
        assert ctx.memory.swa.n_cells < ctx.memory.base.n_cells
        if n_seq_max == 2:
            decode_tokens(ctx, model.tokenize(LONG[:1500])[:500], seq_id=1)
        s = Recording(SamplerParams(temp=0.0), model.n_vocab, eog_ids=())
        st = SpecStats()
        if spec:
            toks = list(speculative_generate(ctx, s, prompt, NgramDrafter(size_n=3, size_m=8, min_n=1),
                                             SpecParams(n_max=8), n_predict=N_LONG, stop_tokens=(),
                                             stats=st))
            assert st.n_accept > 0 and st.n_drafted > st.n_accept   # rollbacks happened
        else:
            toks = list(generate(ctx, prompt, s, n_predict=N_LONG, stop_tokens=()))
        assert len(prompt) + len(toks) > ctx.memory.swa.n_cells - 500 * (n_seq_max - 1)
        runs.append((toks, s.rows))
    (ref_toks, ref_rows), (toks, rows) = runs
    assert toks == ref_toks
    got = iter(rows)
    for r in ref_rows:
        assert any(np.array_equal(r, g) for g in got)
