"""Context.decode(one_row=True) on the random-weight MoE (qwen3moe, qwen2moe: shared expert) and
attention-sink (gpt-oss: sinks, alternating SWA, biased MoE) models of tests/archsupport, rebuilt
bit for bit from their llama.cpp fixtures: a verification batch's rows equal consecutive
one-token decodes' logits bit for bit in the llama.cpp numerics (flash attention on and off), so
speculative decoding stays exact on these paths (expert selection and the sinks' attention per
row); without one_row the batch arithmetic differs for the Q4_K_M models without flash
attention (for Q8_0, and qwen2moe with flash attention, the batch and one-row arithmetic happen
to agree on these small models)."""
import os
import sys

import numpy as np
import pytest

import pyllama
from pyllama.generate import decode_tokens

ARCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "archsupport")
sys.path.insert(0, ARCH)
import compare  # noqa: E402

NAMES = ["qwen3moe-Q4_K_M", "qwen3moe-Q8_0", "qwen2moe-Q4_K_M", "gpt-oss-Q4_K_M", "gpt-oss-Q8_0"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("moe")
    cache = {}

    def get(name):
        if name not in cache:
            f = compare.load_fixture(os.path.join(compare.DATA, name + ".npz"))
            gg = str(d / (name + ".gguf"))
            assert not compare.rebuild(f, gg)
            cache[name] = f, pyllama.load_model(gg)
        return cache[name]
    return get


def ctx_of(m, fa):
    return pyllama.Context(m, n_ctx=512, numerics="llama.cpp", flash_attn=fa, n_threads=2)


@pytest.mark.parametrize("fa", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_one_row_batch_equals_one_token_decodes(models, name, fa):
    f, m = models(name)
    toks = [int(t) for t in f["tokens"]]
    prompt, extra = toks[:-6], toks[-6:]
    a = ctx_of(m, fa)
    decode_tokens(a, prompt)
    one = []
    for t in extra:
        decode_tokens(a, [t])
        one.append(a.get_logits_ith(-1).copy())
    same = {}
    for one_row in (True, False):
        b = ctx_of(m, fa)
        decode_tokens(b, prompt)
        decode_tokens(b, extra, logits_all=True, one_row=one_row)
        same[one_row] = [np.array_equal(one[i], b.get_logits_ith(i)) for i in range(len(extra))]
    assert all(same[True]), same[True]
    if name.endswith("Q4_K_M") and not fa:    # Q4_K's batch kernels differ: the mode is needed
        assert not all(same[False][1:])


class Recording:
    """A greedy chain that keeps every logit row it sampled from."""

    def __init__(self, n_vocab):
        from pyllama.sampling import SamplerChain, SamplerParams
        self.chain = SamplerChain(SamplerParams(temp=0.0), n_vocab, eog_ids=())
        self.rows = []

    def sample(self, logits, u=None):
        self.rows.append(np.array(logits, copy=True))
        return self.chain.sample(logits, u)

    def accept(self, t):
        self.chain.accept(t)


@pytest.mark.parametrize("numerics,fa", [("llama.cpp", False), ("llama.cpp", True),
                                         ("invariant", False)])
def test_gpt_oss_greedy_speculative_equals_plain_past_its_window(models, numerics, fa):
    """gpt-oss's window is 8 positions here: with n_ubatch 64 its SWA cache has 256 cells (the
    base cache 512), and 200 prompt + 150 generated tokens wrap that ring while n-gram drafts
    are accepted and rolled back. Tokens and sampled logit rows equal plain decoding's."""
    from pyllama.generate import generate
    from pyllama.speculative import NgramDrafter, SpecParams, SpecStats, speculative_generate
    f, m = models("gpt-oss-Q4_K_M")
    prompt = ([int(t) for t in f["tokens"]] * 8)[:200]
    runs = []
    for spec in (False, True):
        ctx = pyllama.Context(m, n_ctx=512, n_ubatch=64, numerics=numerics, flash_attn=fa,
                              n_threads=2)
        assert ctx.memory.swa.n_cells == 256 < ctx.memory.base.n_cells
        s, st = Recording(m.n_vocab), SpecStats()
        if spec:
            toks = list(speculative_generate(ctx, s, prompt, NgramDrafter(size_n=2, size_m=8, min_n=1),
                                             SpecParams(n_max=8), n_predict=150, stop_tokens=(),
                                             stats=st))
            assert st.n_accept > 0 and st.n_drafted > st.n_accept
        else:
            toks = list(generate(ctx, prompt, s, n_predict=150, stop_tokens=()))
        runs.append((toks, s.rows))
    (ref, ref_rows), (toks, rows) = runs
    assert toks == ref
    got = iter(rows)
    for r in ref_rows:
        assert any(np.array_equal(r, g) for g in got)
