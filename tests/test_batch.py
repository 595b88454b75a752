"""Batch validation and ubatch splitting (llama.cpp src/llama-batch.cpp `llama_batch_allocr::init`, `split_*`)."""
import numpy as np
import pytest

from pyllama.batch import Batch, split_equal, split_simple, validate
from pyllama.errors import ContextError
from pyllama.kv import KVCache


def kv(n_cells=64, n_seq_max=4):
    return KVCache(n_cells=n_cells, layers=[0], n_embd_k=[8], n_embd_v=[8], n_seq_max=n_seq_max, n_stream=1)


def put(mem, n, seq=0):
    b = Batch(np.zeros(n, np.int32), seq_ids=[[seq]] * n)
    assert validate(b, 100, mem.n_seq_max, mem) == (0, "")
    for ub in mem.init_batch(b, 512):
        mem.apply_ubatch(ub)


def test_defaults():
    b = Batch([5, 6, 7])
    assert b.seq_ids == [(0,)] * 3
    assert b.logits.tolist() == [False, False, True]
    assert b.tokens.dtype == np.int32 and b.pos is None
    one = Batch.one(9, 41, seq_id=2, logits=False)
    assert one.pos.tolist() == [41] and one.seq_ids == [(2,)] and one.logits.tolist() == [False]
    assert Batch([1, 2], seq_ids=[1, 2]).seq_ids == [(1,), (2,)]


def test_auto_pos_from_memory_each_validate():
    mem = kv()
    put(mem, 5, seq=0)
    b = Batch([1, 2, 3, 4], seq_ids=[[0], [1], [0], [0]])
    assert validate(b, 100, 4, mem) == (0, "")
    assert b.pos.tolist() == [5, 0, 6, 7]
    for ub in mem.init_batch(b, 512):
        mem.apply_ubatch(ub)
    assert validate(b, 100, 4, mem) == (0, "")   # refilled, not stale
    assert b.pos.tolist() == [8, 1, 9, 10]


@pytest.mark.parametrize("tokens,pos,seqs,why", [
    ([], None, None, "n_tokens == 0"),
    ([100], [0], None, "invalid token"),
    ([-1], [0], None, "invalid token"),
    ([1], [0], [[4]], "invalid seq_id"),
    ([1, 2], [0, 2], None, "not continuous"),
    ([1, 2, 3], [0, 2, 1], None, "decreasing"),
])
def test_invalid_batches(tokens, pos, seqs, why):
    rc, reason = validate(Batch(tokens, pos, seqs), 100, 4, None)
    assert rc == -1 and why in reason


def test_position_must_follow_memory_and_memory_untouched():
    mem = kv()
    put(mem, 10)
    snap = (mem.cells[0].pos.copy(), mem.cells[0].has.copy(), list(mem.head))
    for start in (9, 11, 0):
        rc, reason = validate(Batch([1, 2], [start, start + 1]), 100, 4, mem)
        assert rc == -1 and "Y = X + 1" in reason
    assert validate(Batch([1, 2], [10, 11]), 100, 4, mem) == (0, "")
    assert (mem.cells[0].pos == snap[0]).all() and (mem.cells[0].has == snap[1]).all()
    assert mem.head == snap[2]


def test_coupled_sequences_must_agree():
    mem = kv()
    put(mem, 3, seq=0)
    rc, reason = validate(Batch([1], [3], [[0, 1]]), 100, 4, mem)
    assert rc == -1 and "coupled" in reason
    mem.seq_cp(0, 1)
    assert validate(Batch([1], [3], [[0, 1]]), 100, 4, mem) == (0, "")


def test_split_simple():
    b = Batch(np.arange(10), seq_ids=[[i % 2] for i in range(10)])
    validate(b, 100, 2, None)
    ubs = split_simple(b, 4)
    assert [u.n_tokens for u in ubs] == [4, 4, 2]
    assert ubs[1].idx.tolist() == [4, 5, 6, 7] and ubs[1].seq_id_unq == [0, 1]
    assert ubs[2].output.tolist() == [False, True]


def test_split_equal_groups_by_sequence():
    seqs = [[0], [1], [0], [1], [0], [2], [0]]
    b = Batch(np.arange(7), seq_ids=seqs)
    validate(b, 100, 3, None)
    ubs = split_equal(b, 6, sequential=False)
    # sets {0},{1},{2}; rounds until one runs out: 1 token each (set 2 has one) -> [0, 1, 5]
    assert ubs[0].idx.tolist() == [0, 1, 5] and ubs[0].n_seqs == 3 and ubs[0].n_seq_tokens == 1
    assert ubs[1].idx.tolist() == [2, 3] and ubs[1].n_seqs == 2
    assert ubs[2].idx.tolist() == [4, 6]
    assert sorted(i for u in ubs for i in u.idx.tolist()) == list(range(7))


def test_split_equal_respects_n_ubatch_and_sequential():
    b = Batch(np.arange(8), seq_ids=[[0], [0], [0], [0], [2], [2], [2], [2]])
    validate(b, 100, 3, None)
    ubs = split_equal(b, 4, sequential=False)
    assert [u.idx.tolist() for u in ubs] == [[0, 1, 4, 5], [2, 3, 6, 7]]
    ubs = split_equal(b, 4, sequential=True)   # 0 and 2 are not consecutive
    assert [u.seq_id_unq for u in ubs] == [[0], [0], [2], [2]] or [u.seq_id_unq for u in ubs][0] == [0]
    assert all(len(u.seq_id_unq) == 1 for u in ubs)
    cpl = Batch([1, 2], [0, 1], [[0, 1], [0, 1]])
    validate(cpl, 100, 3, None)
    with pytest.raises(ContextError):
        split_equal(cpl, 4, sequential=True)
    assert [u.n_tokens for u in split_equal(cpl, 4, sequential=False)] == [2]
