"""Speculative verification's KV placement (Context.decode(one_row=True), docs/architecture.md):
the rows of a one_row batch land in the cells consecutive one-token decodes give them, and a
seq_rm of the rejected rows undoes them exactly (cells, head, and the K/V of the expired cells
they took), so speculative decoding leaves the memory plain decoding leaves, past the SWA window
without --swa-full and with several sequences in one cache. Bookkeeping plus K/V rows."""
import random

import numpy as np
import pytest

from pyllama.batch import Batch, validate
from pyllama.kv import make_memory

from kvsupport import N_VOCAB, gemma270m_layout, prompt


def alloc(n, row, dtype):
    return np.zeros((n, row), dtype=np.float32)


def memory(n_seq_max=1, kv_unified=False, data=False):
    # Gemma 3 geometry, n_ubatch 64, 1024 cells per sequence: SWA cache 768 cells per stream
    # (unified, two sequences: 1280)
    return make_memory(gemma270m_layout(n_embd=4), n_ctx=1024 * n_seq_max,
                       n_seq_max=n_seq_max, n_ubatch=64, kv_unified=kv_unified,
                       alloc=alloc if data else None)


def decode(mem, pos, n, seq, one_row=False):
    """Place n tokens of seq from pos; write each row's K/V as (seq, pos) (data caches).
    Returns {pos: swa cell}."""
    return place(mem, Batch(np.zeros(n, np.int32), pos=np.arange(pos, pos + n, dtype=np.int32),
                            seq_ids=[seq] * n, logits=np.ones(n, bool)), one_row)


def place(mem, b, one_row):
    assert validate(b, N_VOCAB, mem.n_seq_max, mem)[0] == 0
    ubs = mem.init_batch(b, 64, one_row=one_row)
    assert ubs is not None
    out = {}
    for ub in ubs:
        cells = mem.apply_ubatch(ub)
        for il, buf in mem.k.items():
            c = mem.cells_for(il)
            buf[c] = np.stack([np.full(4, s[0] * 10000 + p, np.float32)
                               for s, p in zip(ub.seq_ids, ub.pos)])
            mem.v[il][c] = -buf[c]
        out.update(zip(ub.pos.tolist(), cells["swa"].tolist()))
    return out


def state(mem):
    return [(c.cells[st].pos.copy(), c.cells[st].has.copy(), c.head[st])
            for c in (mem.base, mem.swa) for st in range(c.n_stream)]


def same_state(a, b):
    return all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) and x[2] == y[2]
               for x, y in zip(state(a), state(b)))


def same_data(a, b):
    """Same K/V in every cell that holds a position (what attention can read)."""
    for c, d in ((a.base, b.base), (a.swa, b.swa)):
        for st in range(c.n_stream):
            idx = st * c.n_cells + np.flatnonzero(c.cells[st].pos >= 0)
            if not all(np.array_equal(c.k[il][idx], d.k[il][idx]) and
                       np.array_equal(c.v[il][idx], d.v[il][idx]) for il in c.layers):
                return False
    return True


def schedule(seed, seqs, n_prompt, n_gen, k_max):
    """Rounds (seq, n_drafts, n_accepted) interleaving the sequences until each has n_gen."""
    rng = random.Random(seed)
    done = {s: 0 for s in seqs}
    out = []
    while any(v < n_gen for v in done.values()):
        s = rng.choice([s for s in seqs if done[s] < n_gen])
        k = min(rng.randint(0, k_max), n_gen - done[s] - 1)
        a = rng.randint(0, k)
        out.append((s, k, a))
        done[s] += a + 1
    return out


def run(mem, rounds, n_prompt, seqs, spec, one_row=True):
    """Prompts, then the rounds: spec: one batch of 1 + k rows, seq_rm of the rejected ones;
    plain: the accepted 1 + a tokens one at a time. {(seq, pos): swa cell} of the kept tokens."""
    where, n_past = {}, {}
    for s in seqs:
        decode(mem, 0, n_prompt, s)
        n_past[s] = n_prompt
    for s, k, a in rounds:
        p = n_past[s]
        if spec:
            placed = decode(mem, p, k + 1, s, one_row=one_row)
            mem.seq_rm(s, p + a + 1, -1)
        else:
            placed = {}
            for j in range(a + 1):
                placed.update(decode(mem, p + j, 1, s))
        where.update({(s, q): c for q, c in placed.items() if q <= p + a})
        n_past[s] = p + a + 1
    return where


@pytest.mark.parametrize("seed", range(6))
def test_one_row_rounds_leave_plain_decodings_memory(seed):
    """One sequence through the 768-cell SWA ring (wrapping during generation)."""
    rounds = schedule(seed, [0], 700, 300, 12)
    plain, spec = memory(data=True), memory(data=True)
    a = run(plain, rounds, 700, [0], spec=False)
    b = run(spec, rounds, 700, [0], spec=True)
    assert a == b                        # every kept token in plain decoding's cell
    assert same_state(plain, spec) and same_data(plain, spec)


def test_batch_placement_parts_from_plain_after_the_wrap():
    """Without one_row (llama.cpp's own placement): seq_rm moves the head to the first freed
    cell in index order, which after the ring wraps is cell 0, so the next tokens land in other
    cells than plain decoding's (llama-kv-cache.cpp seq_rm / find_slot)."""
    rounds = schedule(1, [0], 700, 300, 12)      # a schedule whose rejections cross cell 767
    a = run(memory(), rounds, 700, [0], spec=False)
    b = run(memory(), rounds, 700, [0], spec=True, one_row=False)
    assert a != b


@pytest.mark.parametrize("kv_unified", [False, True])
def test_one_row_rounds_several_sequences(kv_unified):
    """Two sequences in one cache (one stream each, or one unified stream shared by both)."""
    rounds = schedule(3, [0, 1], 600, 250, 10)
    plain = memory(2, kv_unified, data=True)
    spec = memory(2, kv_unified, data=True)
    assert run(plain, rounds, 600, [0, 1], spec=False) == run(spec, rounds, 600, [0, 1], spec=True)
    assert same_state(plain, spec) and same_data(plain, spec)


def test_one_batch_for_two_sequences_then_two_rollbacks():
    """The server's shape: one verification batch holding both slots' rows, then one seq_rm per
    slot: with a stream per slot the memory equals plain decoding of each slot's kept rows. (In
    a unified cache slot 1's rows are placed after all of slot 0's drafted rows, so there only
    the invariant numerics, which do not depend on cell order, give plain decoding's bits.)"""
    plain, spec = memory(2, data=True), memory(2, data=True)
    for m in (plain, spec):
        for s in (0, 1):
            decode(m, 0, 760, s)
    p = 760
    place(spec, Batch(np.zeros(12, np.int32), pos=np.r_[p:p + 6, p:p + 6].astype(np.int32),
                      seq_ids=[0] * 6 + [1] * 6, logits=np.ones(12, bool)), one_row=True)
    spec.seq_rm(0, p + 2, -1)
    spec.seq_rm(1, p + 4, -1)
    for s, n in ((0, 2), (1, 4)):
        for j in range(n):
            decode(plain, p + j, 1, s)
    assert same_state(plain, spec) and same_data(plain, spec)
