"""Random operation sequences on a small SWA cache: every position in [pos_min, pos_max] of
every sequence stays present (the llama.h promise), attention plans match the brute-force mask,
and failed decodes leave the cache untouched."""
import numpy as np
from hypothesis import settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from pyllama.batch import Batch, validate
from pyllama.kv import KVCache, KVLayout, make_memory

from kvsupport import N_VOCAB, oracle_plan, plan_lists, seq_positions, window_ok

N_SEQ = 3
seqs = st.integers(0, N_SEQ - 1)


class SWACacheMachine(RuleBasedStateMachine):
    n_stream = 1

    @initialize(n_cells=st.integers(8, 24), n_swa=st.integers(2, 6), extra=st.integers(0, 3),
                swa_type=st.sampled_from([1, 2]))
    def setup(self, n_cells, n_swa, extra, swa_type):
        self.mem = KVCache(n_cells=n_cells, layers=[0], n_embd_k=[4], n_embd_v=[4], n_seq_max=N_SEQ,
                           n_stream=self.n_stream, swa_type=swa_type, n_swa=n_swa, swa_extra=extra)

    def snapshot(self):
        cs = self.mem.cells
        return (np.concatenate([c.pos for c in cs]), np.concatenate([c.has for c in cs], axis=1),
                list(self.mem.head))

    @rule(owners=st.lists(seqs, min_size=1, max_size=7), n_ubatch=st.integers(1, 5))
    def decode(self, owners, n_ubatch):
        b = Batch(np.zeros(len(owners), np.int32), seq_ids=[[s] for s in owners])
        assert validate(b, N_VOCAB, N_SEQ, self.mem)[0] == 0
        before = self.snapshot()
        ubs = self.mem.init_batch(b, n_ubatch)
        after = self.snapshot()
        assert all((x == y).all() if isinstance(x, np.ndarray) else x == y for x, y in zip(before, after))
        if ubs is None:
            return
        for ub in ubs:
            self.mem.apply_ubatch(ub)
            assert plan_lists(self.mem, ub) == oracle_plan(self.mem, ub)

    @rule(s=seqs, r=st.integers(1, 6))
    def rollback(self, s, r):
        self.mem.seq_rm(s, max(0, self.mem.seq_pos_max(s) + 1 - r), -1)

    @rule(s=seqs)
    def remove(self, s):
        self.mem.seq_rm(s, -1, -1)

    @rule(src=seqs, dst=seqs)
    def copy(self, src, dst):
        if self.mem.seq_pos_max(dst) < 0:
            self.mem.seq_cp(src, dst)

    @rule(s=seqs)
    def keep(self, s):
        self.mem.seq_keep(s)

    @rule(s=seqs, p=st.integers(0, 30))
    def bad_position(self, s, p):
        if p != self.mem.seq_pos_max(s) + 1 and self.mem.seq_pos_max(s) >= 0:
            before = self.snapshot()
            assert validate(Batch([1], [p], [[s]]), N_VOCAB, N_SEQ, self.mem)[0] == -1
            assert (before[0] == self.snapshot()[0]).all()

    @invariant()
    def contiguous(self):
        if not hasattr(self, "mem"):
            return
        for s in range(N_SEQ):
            p = seq_positions(self.mem, s).tolist()
            lo, hi = self.mem.seq_pos_min(s), self.mem.seq_pos_max(s)
            assert p == (list(range(lo, hi + 1)) if hi >= 0 else [])

    @invariant()
    def consistent_cells(self):
        if not hasattr(self, "mem"):
            return
        for st_, c in enumerate(self.mem.cells):
            assert ((c.pos >= 0) == c.has.any(axis=0)).all()
            assert (c.shift[c.pos < 0] == 0).all()
            if self.n_stream > 1:           # a stream holds only its own sequence
                assert not np.delete(c.has, st_, axis=0).any()


class MultiStreamMachine(SWACacheMachine):
    n_stream = N_SEQ


SWACacheMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=25, deadline=None)
MultiStreamMachine.TestCase.settings = settings(max_examples=20, stateful_step_count=25, deadline=None)
TestSWACache = SWACacheMachine.TestCase
TestMultiStream = MultiStreamMachine.TestCase


class ISWAExtraMachine(RuleBasedStateMachine):
    """Two sequences sharing a unified iSWA cache small enough to recycle (256 SWA cells, n_swa 8;
    4096 base cells).
    --swa-extra (docs/architecture.md): a cell is recycled only when masked for its owner's next position with window
    n_swa + N, so while a sequence sits at most N below the highest pos_max it ever had, the
    window of its next token is complete."""

    @initialize(extra=st.integers(0, 6), n_ubatch=st.sampled_from([8, 16, 32]))
    def setup(self, extra, n_ubatch):
        lay = KVLayout(n_embd_k_gqa=[4] * 3, n_embd_v_gqa=[4] * 3, n_head_kv=[1] * 3,
                       is_swa=[True, True, False], swa_type=1, n_swa=8)
        self.mem = make_memory(lay, n_ctx=4096, n_seq_max=2, n_ubatch=n_ubatch, kv_unified=True,
                               swa_extra=extra)
        self.extra, self.n_ubatch = extra, n_ubatch
        self.hw = [-1, -1]

    @rule(s=st.integers(0, 1), n=st.integers(1, 60))
    def decode(self, s, n):
        b = Batch(np.zeros(n, np.int32), seq_ids=[[s]] * n)
        assert validate(b, N_VOCAB, 2, self.mem)[0] == 0
        ubs = self.mem.init_batch(b, self.n_ubatch)
        if ubs is None:
            return
        for ub in ubs:
            self.mem.apply_ubatch(ub)
        self.hw[s] = max(self.hw[s], self.mem.seq_pos_max(s))

    @rule(s=st.integers(0, 1), n=st.integers(200, 400))
    def long_prompt(self, s, n):
        """Laps the 256-cell SWA ring: reaches the other sequence's just-expired cells."""
        self.decode(s, n)

    @rule(s=st.integers(0, 1), r=st.integers(1, 8))
    def rollback(self, s, r):
        self.mem.seq_rm(s, max(0, self.mem.seq_pos_max(s) + 1 - r), -1)
        if self.mem.seq_pos_max(s) < 0:     # deeper than the SWA part: the caller starts over
            self.remove(s)

    @rule(s=st.integers(0, 1))
    def remove(self, s):
        self.mem.seq_rm(s, -1, -1)
        self.hw[s] = -1

    @rule(src=st.integers(0, 1))
    def copy_over(self, src):
        dst = 1 - src
        self.mem.seq_rm(dst, -1, -1)
        self.mem.seq_cp(src, dst)
        self.hw[dst] = self.hw[src]

    @invariant()
    def window_of_next_token(self):
        if not hasattr(self, "mem"):
            return
        for s in (0, 1):
            pmax = self.mem.seq_pos_max(s)
            if pmax >= 0 and self.hw[s] - pmax <= self.extra:
                assert window_ok(self.mem.swa, s, pmax + 1), (s, pmax, self.hw[s], self.mem.seq_pos_min(s))

    @invariant()
    def base_and_swa_agree(self):
        if not hasattr(self, "mem"):
            return
        for s in (0, 1):
            base = seq_positions(self.mem.base, s).tolist()
            swa = seq_positions(self.mem.swa, s).tolist()
            assert base == list(range(base[0], base[-1] + 1)) if base else not swa
            assert swa == list(range(swa[0], swa[-1] + 1)) if swa else True
            assert set(swa) <= set(base)
            # a rollback deeper than the SWA retention empties the SWA part (seq_pos_max -1,
            # as in llama.cpp, whose seq_pos_max also comes from the SWA cache)
            assert not swa or self.mem.base.seq_pos_max(s) == self.mem.swa.seq_pos_max(s)


ISWAExtraMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=40, deadline=None)
TestISWAExtra = ISWAExtraMachine.TestCase
