"""iSWA retention on Gemma 3 270M geometry (llama.cpp src/llama-kv-cache.cpp `find_slot`,
`seq_pos_min`) and swa_extra (docs/architecture.md). Bookkeeping only."""
import copy

import numpy as np
import pytest

from pyllama.batch import Batch
from pyllama.kv import make_memory

from kvsupport import decode, gemma270m_layout, oracle_plan, plan_lists, prompt, seq_positions, window_ok


def gemma(n_ubatch=512, swa_full=False, swa_extra=0, n_ctx=4096, n_seq_max=1, kv_unified=False):
    return make_memory(gemma270m_layout(), n_ctx=n_ctx, n_seq_max=n_seq_max, n_ubatch=n_ubatch,
                       swa_full=swa_full, swa_extra=swa_extra, kv_unified=kv_unified)


def one(mem, pos, seq=0):
    return decode(mem, Batch.one(1, pos, seq), 512)


def visible(mem, ub, layer, i=-1):
    """Positions the ubatch's token i attends to in layer's cache, in plan order."""
    kv, qs, qe = mem.attn_plan(ub, layer)
    cache = mem.cache_for(layer)
    return cache.cells[0].pos[kv[qs[i]:qe[i]]].tolist()


@pytest.mark.parametrize("n_prompt,n_ubatch,swa_full,pos_min", [
    (1074, 512, False, 50), (1074, 64, False, 306), (1074, 512, True, 0), (1000, 512, False, 0)])
def test_pos_min_after_prompt(n_prompt, n_ubatch, swa_full, pos_min):
    mem = gemma(n_ubatch, swa_full)
    decode(mem, prompt(n_prompt), n_ubatch)
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (pos_min, n_prompt - 1)
    assert mem.base.seq_pos_min(0) == 0 and mem.base.seq_pos_max(0) == n_prompt - 1
    assert seq_positions(mem.swa, 0).tolist() == list(range(pos_min, n_prompt))   # contiguous


_STEADY = []


def steady_state():
    """Gemma defaults, 1000-token prompt then single tokens up to pos 1318 (a fresh copy)."""
    if not _STEADY:
        mem = gemma()
        decode(mem, prompt(1000), 512)
        for p in range(1000, 1319):
            one(mem, p)
        _STEADY.append(mem)
    return copy.deepcopy(_STEADY[0])


def test_steady_state_ring():
    mem = steady_state()
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0)) == (295, 1318)
    assert mem.swa.used_cells() == 1024


@pytest.mark.parametrize("r,exact", [(1, True), (100, True), (512, True), (513, True), (514, False), (520, False)])
def test_rollback_capacity(r, exact):
    mem = steady_state()
    mem.seq_rm(0, 1319 - r, -1)
    p_new = 1319 - r
    ubs = one(mem, p_new)
    assert (visible(mem, ubs[0], 0) == list(range(p_new - 511, p_new + 1))) == exact
    assert visible(mem, ubs[0], 5) == list(range(p_new + 1))


def test_swa_full_rollback_any_depth():
    mem = gemma(swa_full=True)
    decode(mem, prompt(1319), 512)
    mem.seq_rm(0, 300, -1)
    assert window_ok(mem.swa, 0, 300) and mem.seq_pos_min(0) == 0


def test_speculative_rollback_keeps_window():
    rng = np.random.default_rng(0)
    mem = gemma()
    decode(mem, prompt(600), 512)
    n_past = 600
    while n_past < 2100:
        n_draft = 4
        b = Batch(np.ones(n_draft + 1, np.int32), np.arange(n_past, n_past + n_draft + 1), None,
                  np.ones(n_draft + 1, bool))
        decode(mem, b, 512)
        n_new = n_past + 1 + int(rng.integers(0, n_draft + 1))
        mem.seq_rm(0, n_new, -1)
        assert mem.seq_pos_min(0) <= n_new - 512 + 1 and window_ok(mem.swa, 0, n_new)
        n_past = n_new


def test_attn_plan_iswa_matches_oracle_and_window():
    mem = gemma(n_ubatch=64)
    ubs = decode(mem, prompt(1074), 64)
    last = ubs[-1]
    assert plan_lists(mem.swa, last) == oracle_plan(mem.swa, last)
    assert plan_lists(mem.base, last) == oracle_plan(mem.base, last)
    kv, qs, qe = mem.attn_plan(last, 0)
    assert (qe - qs).tolist() == [512] * last.n_tokens
    assert (mem.attn_plan(last, 5)[2] - mem.attn_plan(last, 5)[1]).tolist() == (last.pos + 1).tolist()


def test_iswa_seq_ops_route_to_both():
    mem = gemma()
    decode(mem, prompt(700), 512)
    mem.seq_cp(0, 0)
    assert mem.seq_rm(0, 650, -1) is True
    assert mem.base.seq_pos_max(0) == mem.swa.seq_pos_max(0) == 649
    mem.seq_add(0, 600, -1, 10)
    assert mem.base.seq_pos_max(0) == mem.swa.seq_pos_max(0) == 659
    mem.clear()
    assert mem.used_cells() == 0 and mem.seq_pos_max(0) == -1


# -- swa_extra (docs/architecture.md) -----------------------------------------------------------------

def two_seq_cache(swa_extra, n_ctx=8192):
    return gemma(n_ubatch=512, swa_extra=swa_extra, n_ctx=n_ctx, n_seq_max=2, kv_unified=True)


def test_other_sequence_steals_expired_cells_without_extra():
    """llama.cpp's behaviour (N = 0): after B's 1024-token prompt, A (pos_max 1023) has pos_min 512;
    rolling A back by 2 leaves its next token without position 511 of its window."""
    mem = two_seq_cache(0)
    assert mem.swa.n_cells == 1536
    decode(mem, prompt(1024, seq=0), 512)
    decode(mem, prompt(1024, seq=1), 512)
    assert mem.seq_pos_min(0) == 512
    mem.seq_rm(0, 1022, -1)
    assert not window_ok(mem.swa, 0, 1022)
    assert visible(mem, one(mem, 1022)[0], 0) == list(range(512, 1023))     # 511 keys, not 512


@pytest.mark.parametrize("extra", [1, 2, 4, 16])
def test_swa_extra_makes_rollback_exact_in_shared_cache(extra):
    """B's long prompt interleaved with A's generation; at every step rolling A back by any
    r <= N keeps every position its next token's window needs."""
    mem = two_seq_cache(extra)
    decode(mem, prompt(1024, seq=0), 512)
    pa, pb = 1024, 0
    recycled = False
    while pb < 3000:
        decode(mem, Batch(np.ones(300, np.int32), np.arange(pb, pb + 300), [[1]] * 300), 512)
        pb += 300
        for _ in range(3):
            one(mem, pa, seq=0)
            pa += 1
        recycled |= mem.seq_pos_min(0) > 0
        for r in range(1, extra + 1):
            assert window_ok(mem.swa, 0, pa - r), (pa, r, mem.seq_pos_min(0))
    assert recycled                # the ring did recycle A's cells
    mem.seq_rm(0, pa - extra, -1)
    ub = one(mem, pa - extra)[0]
    assert visible(mem, ub, 0) == list(range(pa - extra - 511, pa - extra + 1))   # masks at n_swa


def test_swa_extra_single_sequence_rollback_capacity():
    mem = gemma(swa_extra=8)     # 1280 cells: steady ring keeps 1280 positions
    decode(mem, prompt(1000), 512)
    for p in range(1000, 1600):
        one(mem, p)
    assert mem.seq_pos_min(0) == 1600 - 1280
    kv, qs, qe = mem.attn_plan(one(mem, 1600)[0], 0)
    assert (qe - qs).tolist() == [512]


def test_iswa_non_unified_streams():
    mem = gemma(n_ubatch=64, n_ctx=4096, n_seq_max=4, kv_unified=False)
    assert mem.n_stream == 4 and mem.swa.n_cells == 768 and not mem.can_shift()
    owners = [i % 3 for i in range(300)]
    b = Batch(np.zeros(300, np.int32), seq_ids=[[s] for s in owners])
    ubs = decode(mem, b, 64)
    assert all(u.equal_seqs for u in ubs)
    for s in range(3):
        assert (mem.seq_pos_min(s), mem.seq_pos_max(s)) == (0, 99)
        assert mem.swa.cells[s].has[s].sum() == 100 and mem.swa.cells[s].has.sum() == 100
    cells = mem.apply_ubatch(decode_one_more(mem))
    assert cells["swa"][0] // mem.swa.n_cells == 2 and cells["base"][0] // mem.base.n_cells == 2


def decode_one_more(mem):
    b = Batch.one(1, 100, seq_id=2)
    from pyllama.batch import validate
    assert validate(b, 1000, 4, mem)[0] == 0
    return mem.init_batch(b, 64)[0]


def test_iswa_unified_coupled_prefix_shared():
    mem = gemma(n_ubatch=64, n_seq_max=2, kv_unified=True)
    b = Batch(np.zeros(10, np.int32), seq_ids=[[0, 1]] * 10)
    decode(mem, b, 64)
    assert mem.swa.used_cells() == 10 and mem.seq_pos_max(1) == 9
    ubs = decode(mem, Batch([1, 2], [10, 10], [[0], [1]]), 64)
    assert visible(mem, ubs[0], 0, 0) == list(range(11)) and visible(mem, ubs[0], 0, 1) == list(range(11))


# -- chunked attention (llama4: LLAMA_SWA_TYPE_CHUNKED) ------------------------------------------------

def chunked(n_ubatch=64, swa_extra=0, n_ctx=4096, n_seq_max=1, kv_unified=False, n_swa=256):
    """Gemma's geometry with llama4's mask: the query at p sees its own chunk p // n_swa * n_swa
    and on (the cache is generic; llama4 models use n_swa 8192)."""
    lay = gemma270m_layout()
    lay.swa_type, lay.n_swa = 2, n_swa
    return make_memory(lay, n_ctx=n_ctx, n_seq_max=n_seq_max, n_ubatch=n_ubatch,
                       swa_extra=swa_extra, kv_unified=kv_unified)


def chunk_ok(cache, s, p_new):
    """Every position of p_new's chunk before p_new is in the cache."""
    have = set(seq_positions(cache, s).tolist())
    return all(p in have for p in range(p_new // cache.n_swa * cache.n_swa, p_new))


def test_chunked_attn_plan_matches_oracle_and_recycles():
    mem = chunked()
    assert mem.swa.n_cells == 512
    ubs = decode(mem, prompt(1100), 64)
    last = ubs[-1]
    assert plan_lists(mem.swa, last) == oracle_plan(mem.swa, last)
    assert plan_lists(mem.base, last) == oracle_plan(mem.base, last)
    p = int(last.pos[-1])                # 1099: its chunk starts at 1024
    assert visible(mem, last, 0) == list(range(1024, p + 1))
    assert visible(mem, last, 5) == list(range(0, p + 1))
    assert mem.seq_pos_min(0) > 0        # cells of earlier chunks were recycled
    ub = one(mem, 1100)[0]
    assert plan_lists(mem.swa, ub) == oracle_plan(mem.swa, ub)


@pytest.mark.parametrize("extra", [3, 40])
def test_chunked_swa_extra_keeps_the_chunk_of_every_rollback(extra):
    """Two sequences in a unified chunked cache: after every step, rolling A back by r <= N
    leaves every position of its new chunk cached (a window of n_swa + N would move the chunk
    grid and recycle cells of the current chunk)."""
    mem = chunked(n_ubatch=64, swa_extra=extra, n_ctx=4096, n_seq_max=2, kv_unified=True)
    decode(mem, prompt(300, seq=0), 64)
    pa, pb = 300, 0
    recycled = False
    while pb < 2400:
        decode(mem, Batch(np.ones(100, np.int32), np.arange(pb, pb + 100), [[1]] * 100), 64)
        pb += 100
        for _ in range(7):
            one(mem, pa, seq=0)
            pa += 1
        recycled |= mem.seq_pos_min(0) > 0
        for r in range(1, extra + 1):
            assert chunk_ok(mem.swa, 0, pa - r), (pa, r, mem.seq_pos_min(0))
    assert recycled
