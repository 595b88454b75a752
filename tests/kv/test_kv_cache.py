"""KVCache bookkeeping (llama.cpp src/llama-kv-cache.cpp `find_slot`, `seq_*`, `update`;
src/llama-hparams.h `is_masked_swa`). No tensors unless
stated; each test runs in milliseconds."""
import numpy as np
import pytest

from pyllama.batch import Batch, split_simple, validate
from pyllama.kv import KVCache, is_masked_swa

from kvsupport import decode, oracle_plan, plan_lists, prompt, seq_positions


def kv(n_cells=16, n_seq_max=4, n_stream=1, swa_type=0, n_swa=0, swa_extra=0, **kw):
    return KVCache(n_cells=n_cells, layers=[0, 1], n_embd_k=[8, 8], n_embd_v=[8, 8], n_seq_max=n_seq_max,
                   n_stream=n_stream, swa_type=swa_type, n_swa=n_swa, swa_extra=swa_extra, **kw)


def state(mem):
    return [(c.pos.copy(), c.has.copy(), c.shift.copy()) for c in mem.cells], list(mem.head)


def same_state(a, b):
    return a[1] == b[1] and all((x == y).all() for p, q in zip(a[0], b[0]) for x, y in zip(p, q))


def test_fill_from_zero_and_head():
    mem = kv()
    ubs = decode(mem, prompt(5), 4)
    assert [u.n_tokens for u in ubs] == [4, 1]
    assert mem.cells[0].pos[:6].tolist() == [0, 1, 2, 3, 4, -1] and mem.head == [5]
    assert mem.last_cells.tolist() == [4] and mem.used_cells() == 5
    assert (mem.seq_pos_min(0), mem.seq_pos_max(0), mem.seq_pos_min(1), mem.seq_pos_max(1)) == (0, 4, -1, -1)


def test_full_cache_returns_none_and_leaves_cells():
    mem = kv(n_cells=8)
    decode(mem, prompt(6), 4)
    before = state(mem)
    b = Batch([1, 2, 3], seq_ids=[[1]] * 3)
    assert validate(b, 100, 4, mem)[0] == 0
    assert mem.init_batch(b, 2) is None
    assert same_state(before, state(mem))
    assert decode(mem, Batch([1, 2], seq_ids=[[1]] * 2), 2) != 1


def test_ubatch_larger_than_cache_fails():
    mem = kv(n_cells=4)
    b = prompt(6)
    validate(b, 100, 4, mem)
    assert mem.init_batch(b, 8) is None and mem.used_cells() == 0


def test_prepare_simulates_then_restores():
    mem = kv(n_cells=16)
    decode(mem, prompt(3), 8)
    before = state(mem)
    b = prompt(10, seq=1)
    validate(b, 100, 4, mem)
    ubs = mem.init_batch(b, 4)
    assert [u.n_tokens for u in ubs] == [4, 4, 2] and same_state(before, state(mem))


def test_rollback_reuses_the_same_cells():
    mem = kv(n_cells=32)
    decode(mem, prompt(10), 4)
    layout = mem.cells[0].pos.copy()
    assert mem.seq_rm(0, 6, -1) is True
    assert mem.head == [6]
    decode(mem, Batch(np.arange(4), seq_ids=[[0]] * 4), 4)
    assert (mem.cells[0].pos == layout).all()


def test_head_restart_when_far_beyond_used():
    mem = kv(n_cells=32)
    decode(mem, prompt(20), 32)
    mem.seq_rm(0, 0, 15)          # frees cells 0..14; head lowered to 0
    assert mem.head == [0]
    mem.head = [20]               # head > used (5) + 2 * n_tokens (2) -> search from 0
    decode(mem, Batch([1], seq_ids=[[1]]), 4)
    assert mem.last_cells.tolist() == [0]


def test_slot_wraps_around():
    mem = kv(n_cells=8)
    decode(mem, prompt(6), 8)
    mem.seq_rm(0, 0, 2)           # cells 0, 1 free; head lowered to 0
    mem.head = [6]
    decode(mem, Batch([1, 2, 3, 4], seq_ids=[[1]] * 4), 8)
    assert mem.last_cells.tolist() == [6, 7, 0, 1] and mem.head == [2]


def test_seq_rm_ranges_half_open_and_any_seq():
    mem = kv()
    decode(mem, prompt(8), 8)
    mem.seq_cp(0, 1, 2, 6)
    mem.seq_rm(0, 3, 5)
    assert seq_positions(mem, 0).tolist() == [0, 1, 2, 5, 6, 7]
    assert seq_positions(mem, 1).tolist() == [2, 3, 4, 5]
    assert mem.used_cells() == 8          # 3, 4 still held by seq 1
    mem.seq_rm(-1, 4, -1)                 # every sequence, [4, inf)
    assert seq_positions(mem, 1).tolist() == [2, 3] and seq_positions(mem, 0).tolist() == [0, 1, 2]
    mem.seq_rm(0, -1, -1)
    assert mem.seq_pos_max(0) == -1 and mem.used_cells() == 2


def test_seq_keep():
    mem = kv()
    decode(mem, prompt(4, seq=0), 8)
    decode(mem, prompt(4, seq=1), 8)
    mem.seq_cp(0, 2)
    mem.seq_keep(2)
    assert mem.used_cells() == 4 and mem.head == [4]
    assert not mem.cells[0].has[0].any() and mem.cells[0].has[2, :4].all()


def test_seq_add_moves_shared_cells_and_drops_negative():
    mem = kv()
    decode(mem, prompt(6), 8)
    mem.seq_cp(0, 1, 0, 3)
    mem.seq_add(0, -1, 3, -2)       # positions 0, 1 -> negative: whole cells dropped
    assert seq_positions(mem, 0).tolist() == [0, 3, 4, 5]
    assert seq_positions(mem, 1).tolist() == [0]       # the shared cell moved for seq 1 too
    assert mem.head == [0] and mem.cells[0].shift[2] == -2 and mem.cells[0].has_shift
    mem.head = [5]
    mem.seq_add(0, 10, 20, 3)       # nothing freed -> head reset to 0
    assert mem.head == [0]
    mem.head = [5]
    mem.seq_add(0, 4, 4, 3)         # p0 == p1: no-op
    assert mem.head == [5]


def test_seq_div():
    mem = kv()
    decode(mem, prompt(6), 8)
    mem.seq_div(0, 2, -1, 2)
    assert mem.cells[0].pos[:6].tolist() == [0, 1, 1, 1, 2, 2]
    assert mem.cells[0].shift[:6].tolist() == [0, 0, -1, -2, -2, -3]


@pytest.mark.parametrize("swa_type,n_swa", [(0, 0), (1, 4), (2, 4), (3, 6)])
def test_attn_plan_matches_bruteforce_mask(swa_type, n_swa):
    rng = np.random.default_rng(swa_type)
    mem = kv(n_cells=64, swa_type=swa_type, n_swa=n_swa)
    for _ in range(12):
        seqs = rng.integers(0, 3, size=rng.integers(1, 6)).tolist()
        b = Batch(np.zeros(len(seqs), np.int32), seq_ids=[[s] for s in seqs])
        ubs = decode(mem, b, 3)
        if isinstance(ubs, int):
            continue
        for ub in ubs[-1:]:
            assert plan_lists(mem, ub) == oracle_plan(mem, ub)
        if rng.random() < 0.3:
            s = int(rng.integers(0, 3))
            mem.seq_rm(s, max(0, mem.seq_pos_max(s) - 2), -1)


def test_attn_plan_shares_one_list_per_sequence():
    mem = kv(n_cells=32, swa_type=1, n_swa=3)
    ubs = decode(mem, Batch(np.zeros(6, np.int32), seq_ids=[[0], [1], [0], [1], [0], [0]]), 8)
    kv_cells, qs, qe = mem.attn_plan(ubs[0])
    assert len(kv_cells) == 6                           # 4 cells of seq 0 + 2 of seq 1
    assert qs.tolist() == [0, 4, 0, 4, 0, 1] and qe.tolist() == [1, 5, 2, 6, 3, 4]


@pytest.mark.parametrize("swa_type,n_swa,p1,visible", [
    (1, 4, 10, [7, 8, 9, 10]),
    (2, 4, 10, [8, 9, 10]),
    (3, 4, 10, [8, 9, 10]),
    (0, 0, 3, [0, 1, 2, 3]),
])
def test_is_masked_swa(swa_type, n_swa, p1, visible):
    p0 = np.arange(p1 + 1)
    assert p0[~is_masked_swa(n_swa, swa_type, p0, p1)].tolist() == visible


def test_swa_recycles_only_masked_single_owner_cells():
    mem = kv(n_cells=8, swa_type=1, n_swa=4)
    decode(mem, prompt(8), 8)
    mem.seq_cp(0, 1, 0, 1)            # cell 0 shared: never recycled
    decode(mem, Batch([1, 2], seq_ids=[[0]] * 2), 8)
    # masked for next pos 8: positions <= 4; cell 0 shared -> cells 1, 2 taken; the purge
    # removes seq 0 from [pos_min, 2] (incl. the shared cell, which seq 1 keeps)
    assert mem.last_cells.tolist() == [1, 2]
    assert seq_positions(mem, 0).tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert seq_positions(mem, 1).tolist() == [0]


def test_purge_drops_older_positions_of_the_owner():
    mem = kv(n_cells=8, swa_type=1, n_swa=3)
    decode(mem, prompt(8), 8)
    mem.seq_rm(0, 1, 2)               # hole at cell 1 (pos 1): empty cells come first in the walk
    mem.head = [2]
    decode(mem, Batch([1, 2], seq_ids=[[0]] * 2), 8)
    # walk from 2: cell 2 (pos 2 <= 8 - 3 = 5, masked) and cell 3, then purge pos <= 3
    assert mem.last_cells.tolist() == [2, 3]
    assert seq_positions(mem, 0).tolist() == [4, 5, 6, 7, 8, 9]
    assert mem.cells[0].pos[0] == -1


def test_multi_stream_equal_split():
    mem = kv(n_cells=8, n_seq_max=3, n_stream=3)
    b = Batch(np.zeros(7, np.int32), seq_ids=[[0], [1], [0], [1], [0], [2], [0]])
    assert validate(b, 100, 3, mem)[0] == 0
    ubs = mem.init_batch(b, 8)
    assert [u.seq_id_unq for u in ubs] == [[0, 1, 2], [0, 1], [0]]
    cells = mem.apply_ubatch(ubs[0])
    assert cells.tolist() == [0, 8, 16]
    kv_cells, qs, qe = mem.attn_plan(ubs[0])
    assert [kv_cells[a:b].tolist() for a, b in zip(qs, qe)] == [[0], [8], [16]]
    for ub in ubs[1:]:
        mem.apply_ubatch(ub)
    assert (mem.seq_pos_max(0), mem.seq_pos_max(1), mem.seq_pos_max(2)) == (3, 1, 0)
    assert mem.cells[1].has[1].sum() == 2 and not mem.cells[1].has[0].any()


def test_apply_without_slot_raises():
    mem = kv(n_cells=2)
    b = prompt(3)
    validate(b, 100, 4, mem)
    with pytest.raises(Exception):
        mem.apply_ubatch(split_simple(b, 3)[0])
