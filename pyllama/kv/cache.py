"""One KV cache: cells per stream + per-layer K/V buffers (llama.cpp src/llama-kv-cache.cpp `llama_kv_cache`).

Bookkeeping lives in `KVCells` (one per stream); the K/V arrays are only indexed by global cell
(stream * n_cells + idx). With `alloc=None` the cache is bookkeeping only (tests, planning).
"""
from __future__ import annotations

import itertools
import os

import numpy as np

from ..backend.base import KV_BLOCK, KV_TYPES, hadamard, kv_decode, kv_encode
from ..batch import UBatch, split_equal, split_simple
from ..errors import ContextError
from .cells import INF_POS, KVCells
from .state import read_state, write_state
from .swa import SWA_NONE, is_expired, window_start

DTYPES = KV_TYPES            # cache type name -> buffer item dtype (block types: one item = 32)


def row_bytes(type_name: str, n_embd: int) -> int:
    """Bytes of one cell's row of n_embd elements (ggml_row_size)."""
    return n_embd // KV_BLOCK[type_name] * KV_TYPES[type_name].itemsize
_STATE_IDS = itertools.count()
QUANTIZED = ("q8_0", "q4_0")         # ggml_is_quantized among the KV types


def _centers(layers, k_center, n_embd_k, type_k) -> dict:
    """{il: f32[n_embd_k]} K offsets (quantized K only; kv_k_center): a constant vector taken
    off every stored K row shifts each score of a query by the same amount, which the softmax
    cancels, and can shrink the block scales of a quantized K cache (Qwen2's large K biases)."""
    out = {}
    if type_k not in QUANTIZED or not k_center:
        return out
    for il, c in zip(layers, k_center):
        if c is not None:
            c = np.ascontiguousarray(c, dtype=np.float32).reshape(-1)
            if c.shape[0] != n_embd_k[il]:
                raise ContextError(f"k_center of layer {il}: {c.shape[0]} values for {n_embd_k[il]}")
            out[il] = c
    return out


def _uniform(heads: list[int]) -> int:
    """llama.cpp's n_embd_head_*_all: the head size shared by all layers, 0 none, -1 mixed."""
    return heads[0] if heads and all(h == heads[0] for h in heads) else (-1 if heads else 0)


def attn_rot(type_k: str, type_v: str, heads_k: list[int], heads_v: list[int]) -> tuple[int, int]:
    """(n_rot_k, n_rot_v), 0 = off: the Walsh-Hadamard rotation llama.cpp (0c1e570,
    llama_kv_cache) applies to q and K (and to V and the attention output) when that cache type
    is quantized and the head size, the same for all layers of the cache, is a multiple of 64.
    K: the largest power of two dividing the head size; V: 64. LLAMA_ATTN_ROT_DISABLE=1 turns
    it off, as there."""
    try:
        off = int(os.environ.get("LLAMA_ATTN_ROT_DISABLE", "0") or 0) != 0
    except ValueError:
        off = False
    hk, hv = _uniform(heads_k), _uniform(heads_v)
    nk = nv = 0
    if not off and type_k in QUANTIZED and hk > 0 and hk % 64 == 0:
        nk = 64
        while hk % (2 * nk) == 0:
            nk *= 2
    if not off and type_v in QUANTIZED and hv > 0 and hv % 64 == 0:
        nv = 64
    return nk, nv


def mark_one_row(ubs, one_row: bool) -> None:
    """Flag the ubatches of a Context.decode(one_row=True) (speculative verification)."""
    for ub in ubs:
        ub.one_row = one_row


def _range(p0, p1):
    return (0 if p0 is None or p0 < 0 else p0), (INF_POS if p1 is None or p1 < 0 else p1)


class KVCache:
    def __init__(self, *, n_cells, layers, n_embd_k, n_embd_v, n_seq_max, n_stream, swa_type=SWA_NONE,
                 n_swa=0, swa_extra=0, type_k="f16", type_v="f16", alloc=None, rope=None,
                 n_head_kv=None, k_center=None, v_in_k=False, v_trans=False, rope_offset=0):
        if type_k not in DTYPES or type_v not in DTYPES:
            raise ContextError(f"unsupported KV cache type {type_k}/{type_v} "
                               f"({', '.join(DTYPES)})")
        self.n_cells, self.n_stream, self.n_seq_max = n_cells, n_stream, n_seq_max
        self.layers = list(layers)
        self.n_embd_k = dict(zip(self.layers, n_embd_k))
        self.n_embd_v = dict(zip(self.layers, n_embd_v))
        self.n_head_kv = dict(zip(self.layers, n_head_kv or [1] * len(self.layers)))
        self.swa_type, self.n_swa, self.swa_extra = swa_type, n_swa, swa_extra
        self.type_k, self.type_v, self.rope = type_k, type_v, rope
        # MLA (KVLayout.v_in_k): V rows are the first n_embd_v values of the K rows, read from
        # the K buffer; no V buffer, no V in the state, the V type unused (the Context refuses
        # one other than type_k, as llama.cpp)
        self.v_in_k, self.v_trans, self.rope_offset = bool(v_in_k), bool(v_trans), rope_offset
        if self.v_in_k:
            bad = [il for il in self.layers if self.n_embd_v[il] > self.n_embd_k[il]]
            if bad or (k_center and any(c is not None for c in k_center)):
                raise ContextError("a V view of the K cache needs V rows no longer than K's "
                                   "and no K centering")
        self.k_center = _centers(self.layers, k_center, self.n_embd_k, type_k)
        # llama.cpp's MLA attention input (llm_graph_input_attn_k) has no Hadamard rotation
        self.rot_k, self.rot_v = (0, 0) if self.v_in_k else attn_rot(
            type_k, type_v, [self.n_embd_k[il] // self.n_head_kv[il] for il in self.layers],
            [self.n_embd_v[il] // self.n_head_kv[il] for il in self.layers])
        self.cells = [KVCells(n_cells, n_seq_max) for _ in range(n_stream)]
        self.head = [0] * n_stream
        self.k: dict[int, np.ndarray] = {}
        self.v: dict[int, np.ndarray] = {}
        if alloc is not None:
            for il in self.layers:
                self.k[il] = alloc(n_stream * n_cells, self.n_embd_k[il], type_k)
                if not self.v_in_k:
                    self.v[il] = alloc(n_stream * n_cells, self.n_embd_v[il], type_v)
        self._copies: list[tuple[int, int]] = []
        self._version = next(_STATE_IDS)
        self._plan = (None, None, None)
        self._slots: dict = {}
        self.last_cells = np.zeros(0, dtype=np.int32)
        self._used_before = [0] * n_stream      # used_max_p1 per stream before last_cells
        # one_row ubatches applied since the last other change: per stream the state before the
        # first, the rows placed since [(ubatch, row, cell)], and where the K/V rows they
        # overwrote are saved ({cell: row of _save}); seq_rm of their tail undoes them exactly
        self._undo: dict | None = None
        self._save: dict[tuple, np.ndarray] = {}
        self._n_saved = 0

    # -- geometry -----------------------------------------------------------------------------
    def seq_to_stream(self, s: int) -> int:
        return 0 if self.n_stream == 1 else s

    def cache_for(self, layer) -> "KVCache":
        return self

    def cells_for(self, layer) -> np.ndarray:
        """Global cells written by the last applied ubatch (K/V destination rows)."""
        return self.last_cells

    def attn_rot(self, layer) -> tuple[int, int]:
        """(n_rot_k, n_rot_v) for the layer's attention, 0 = no rotation (see attn_rot)."""
        return self.rot_k, self.rot_v

    def kv_view(self, layer=None) -> tuple[int, int]:
        """(first cell, n_kv) of the KV view llama.cpp's graph attends over for the last applied
        ubatch: from its stream's first cell, the used cells padded to 256, at most the stream
        (llama_kv_cache::get_n_kv; llama.cpp's flash attention splits one-token decodes by it)."""
        streams = np.unique(self.last_cells // self.n_cells) if len(self.last_cells) else [0]
        n_kv = 0
        for st in streams:
            used = self.cells[int(st)].used_max_p1()
            n_kv = max(n_kv, min(self.n_cells, max(256, -(-used // 256) * 256)))
        return int(streams[0]) * self.n_cells, n_kv

    def kv_view_rows(self, layer=None) -> list[tuple[int, int]]:
        """kv_view as a one-token decode of each row of the last applied ubatch would see it:
        the cells used before the ubatch plus those of its rows up to that one."""
        out, used = [], list(self._used_before)
        for c in self.last_cells.tolist():
            st, idx = divmod(int(c), self.n_cells)
            used[st] = u = max(used[st], idx + 1)
            out.append((st * self.n_cells, min(self.n_cells, max(256, -(-u // 256) * 256))))
        return out

    def k_offset(self, layer) -> np.ndarray | None:
        """f32[n_embd_k] to subtract from the layer's K rows before they are stored, or None."""
        return self.k_center.get(layer)

    def used_cells(self) -> int:
        return sum(c.used() for c in self.cells)

    def can_shift(self) -> bool:
        return True

    def memory_breakdown(self) -> dict:
        n = self.n_stream * self.n_cells
        k = sum(n * row_bytes(self.type_k, self.n_embd_k[il]) for il in self.layers)
        v = 0 if self.v_in_k else sum(n * row_bytes(self.type_v, self.n_embd_v[il])
                                      for il in self.layers)
        return {"cells": self.n_cells, "n_stream": self.n_stream, "layers": len(self.layers),
                "k_bytes": k, "v_bytes": v, "swa_extra": self.swa_extra}

    # -- slot search ----------------------------------------------------------------------------
    def _usable(self, cells: KVCells, pos_max=None) -> np.ndarray:
        """Empty cells, plus single-owner cells masked for the owner's next position and the
        swa_extra before it (swa.is_expired; --swa-extra, docs/architecture.md). pos_max: each
        sequence's pos_max to mask for (default: the current ones)."""
        usable = cells.empty()
        if self.swa_type == SWA_NONE:
            return usable
        single = cells.seq_count() == 1
        if single.any():
            pm = cells.pos_max_all() if pos_max is None else pos_max
            owner_pmax = pm[cells.has.argmax(axis=0)]
            usable |= single & is_expired(self.n_swa, self.swa_extra, self.swa_type, cells.pos,
                                          owner_pmax + 1)
        return usable

    def _find_slot_stream(self, st: int, n_tokens: int, pos_max=None):
        cells = self.cells[st]
        head = self.head[st]
        if head > cells.used() + 2 * n_tokens:
            head = 0
        if n_tokens > cells.size:
            return None
        usable = self._usable(cells, pos_max)   # walk order: head .. size-1, then 0 .. head-1
        sel = np.flatnonzero(usable[head:])[:n_tokens] + head
        if len(sel) < n_tokens:
            sel = np.concatenate((sel, np.flatnonzero(usable[:head])[:n_tokens - len(sel)]))
        return sel if len(sel) == n_tokens else None

    def _groups(self, ub: UBatch):
        """[(stream, a, b)]: ubatch tokens a..b go to stream (equal split: one group per seq set)."""
        if self.n_stream == 1:
            return [(0, 0, ub.n_tokens)]
        if ub.equal_seqs:
            nst = ub.n_seq_tokens
            return [(self.seq_to_stream(ub.seq_ids[g * nst][0]), g * nst, (g + 1) * nst)
                    for g in range(ub.n_seqs)]
        streams = {self.seq_to_stream(s) for s in ub.seq_id_unq}
        if len(streams) != 1:
            raise ContextError("a multi-stream cache needs ubatches from split_equal")
        return [(streams.pop(), 0, ub.n_tokens)]

    def find_slot(self, ub: UBatch):
        """[(stream, a, b, cell idx int[b-a])] or None when some stream has no room. Slots found
        by `prepare` are reused while the cells are in the same state (same version)."""
        key = (id(ub), self._version)
        hit = self._slots.get(key)
        if hit is not None and hit[0] is ub:
            return hit[1]
        out = self._find_slot_rows(ub) if getattr(ub, "one_row", False) else []
        if out is None:
            return None
        for st, a, b in ([] if out else self._groups(ub)):
            idx = self._find_slot_stream(st, b - a)
            if idx is None:
                return None
            out.append((st, a, b, idx))
        self._slots[key] = (ub, out)
        return out

    def _find_slot_rows(self, ub: UBatch):
        """A one_row ubatch (speculative verification) is placed row by row as consecutive
        one-token decodes place their tokens: each row's slot search starts where the row before
        it left the head, with the one-token heuristics, so the rows land in the cells plain
        decoding gives them (the cell order is the summation order of llama.cpp's attention).
        A cell still visible to an earlier row of the ubatch is never taken: the SWA masks are
        those of the ubatch's first position of each sequence, as llama.cpp's find_slot has them
        for a whole ubatch. [(stream, i, i + 1, cell idx int[1])] per row, or None."""
        snap = self._snapshot()
        pos_max = {}
        out = []
        try:
            for i in range(ub.n_tokens):
                st = self.seq_to_stream(ub.seq_ids[i][0])
                if st not in pos_max:
                    pos_max[st] = self.cells[st].pos_max_all()
                idx = self._find_slot_stream(st, 1, pos_max[st])
                if idx is None:
                    return None
                self._apply_group(st, idx, ub, i, i + 1)
                out.append((st, i, i + 1, idx))
        finally:
            self._restore(snap)
        return out

    # -- batch placement --------------------------------------------------------------------------
    def split(self, batch, n_ubatch: int):
        if self.n_stream == 1:
            return split_simple(batch, n_ubatch)
        try:
            return split_equal(batch, n_ubatch, sequential=True)
        except ContextError:
            return None

    def init_batch(self, batch, n_ubatch: int, one_row: bool = False):
        """Split the (validated) batch and check every ubatch finds a slot; None = no slot.
        one_row: the ubatches are placed row by row (_find_slot_rows)."""
        ubs = self.split(batch, n_ubatch)
        if ubs is None:
            return None
        mark_one_row(ubs, one_row)
        return ubs if self.prepare(ubs) else None

    def prepare(self, ubatches) -> bool:
        """Simulate find_slot + apply of every ubatch in order, then undo everything."""
        self._slots.clear()
        if len(ubatches) == 1:                  # nothing to simulate after the only ubatch
            return self.find_slot(ubatches[0]) is not None
        snap = self._snapshot()
        try:
            for ub in ubatches:
                slot = self.find_slot(ub)
                if slot is None:
                    return False
                self._apply_slot(ub, slot)
            return True
        finally:
            self._restore(snap)

    def apply_ubatch(self, ub: UBatch) -> np.ndarray:
        """Place the ubatch: int32[n_tokens] global cell per token (K/V rows to write)."""
        slot = self.find_slot(ub)
        if slot is None:
            raise ContextError("no KV slot for the ubatch (call init_batch first)")
        self._used_before = [c.used_max_p1() for c in self.cells]
        if getattr(ub, "one_row", False):
            self._log_rows(ub, slot)
        else:
            self._undo = None
        self.last_cells = self._apply_slot(ub, slot)
        return self.last_cells

    # -- exact rollback of one_row rows (speculative verification) --------------------------------
    def _log_rows(self, ub: UBatch, slot) -> None:
        """Before a one_row ubatch is placed: note its rows, the state of their streams before
        the first such ubatch and the K/V rows of the occupied cells they are going to take."""
        if self._undo is None:
            self._undo, self._n_saved = {}, 0
        for st, a, _, idx in slot:
            log = self._undo.get(st)
            if log is None:
                log = self._undo[st] = {"snap": self.cells[st].snapshot(), "head": self.head[st],
                                        "rows": [], "data": {}}
            c = int(idx[0])
            if log["snap"][0][c] >= 0 and c not in log["data"] and self.k:
                log["data"][c] = self._save_rows(st * self.n_cells + c)
            log["rows"].append((ub, a, c))

    def _buffers(self):
        """(key, buffer) of every K and V buffer (MLA: K only)."""
        return [(("k", il), b) for il, b in self.k.items()] + [(("v", il), b) for il, b in self.v.items()]

    def _save_rows(self, g: int) -> int:
        """Copy global cell g's K/V rows of every layer aside; returns their row in the buffers
        (grown by doubling, reused from row 0 whenever the log starts over)."""
        n = self._n_saved
        for key, buf in self._buffers():
            sb = self._save.get(key)
            if sb is None or n >= len(sb):
                nb = np.empty((max(16, 2 * n),) + buf.shape[1:], buf.dtype)
                if sb is not None:
                    nb[:n] = sb[:n]
                self._save[key] = sb = nb
            sb[n] = buf[g]
        self._n_saved = n + 1
        return n

    def _undo_rm(self, seq_id: int, p0: int) -> bool:
        """seq_rm(seq_id, p0, -1) when every cell it would free holds a row of the one_row log:
        the stream goes back to its state before the log, the kept rows are placed again in
        their cells and the dropped rows' cells get back what they held (bookkeeping and K/V),
        so the memory is what consecutive one-token decodes of the kept rows leave (also the
        head and the cells the dropped rows took from expired positions). False: not the case."""
        st = self.seq_to_stream(seq_id)
        log = self._undo.get(st) if self._undo else None
        if log is None:
            return False
        drop = [ub.seq_ids[i] == (seq_id,) and int(ub.pos[i]) >= p0 for ub, i, _ in log["rows"]]
        cells = self.cells[st]
        held = np.count_nonzero(cells.has[seq_id] & (cells.pos >= p0))
        if not any(drop) or held != sum(drop) or any(
                seq_id in ub.seq_ids[i] and int(ub.pos[i]) >= p0 and not d
                for (ub, i, _), d in zip(log["rows"], drop)):
            return False
        cells.restore(log["snap"])
        self.head[st] = log["head"]
        kept = []
        for (ub, i, c), d in zip(log["rows"], drop):
            if not d:
                self._apply_group(st, np.array([c]), ub, i, i + 1)
                kept.append((ub, i, c))
            elif c in log["data"]:
                n, g = log["data"].pop(c), st * self.n_cells + c
                for key, buf in self._buffers():
                    buf[g] = self._save[key][n]
        log["rows"] = kept
        return True

    def _apply_slot(self, ub: UBatch, slot) -> np.ndarray:
        out = np.empty(ub.n_tokens, dtype=np.int32)
        for st, a, b, idx in slot:
            self._apply_group(st, idx, ub, a, b)
            out[a:b] = st * self.n_cells + idx
        self._version = hash((self._version, id(ub)))   # same chain in prepare and for real
        return out

    def _bump(self) -> None:
        """New state id after any change other than placing a ubatch (ends the one_row log)."""
        self._version = next(_STATE_IDS)
        self._undo = None

    def _apply_group(self, st, idx, ub, a, b):
        cells = self.cells[st]
        occ = idx[cells.pos[idx] >= 0]
        lost = {}
        for s in np.flatnonzero(cells.has[:, occ].any(axis=1)) if len(occ) else ():
            lost[int(s)] = int(cells.pos[occ][cells.has[s, occ]].max())
        cells.clear_cells(occ)
        cells.pos[idx] = ub.pos[a:b]
        rows = [s for ids in ub.seq_ids[a:b] for s in ids]
        cols = [c for c, ids in zip(idx.tolist(), ub.seq_ids[a:b]) for _ in ids]
        cells.has[rows, cols] = True
        for s, pmax in lost.items():      # contiguity purge: keep [pos_min, pos_max] complete
            if 0 <= cells.seq_pos_min(s) <= pmax:
                self._seq_rm_stream(st, s, 0, pmax + 1)
        self.head[st] = int(idx[-1]) + 1

    def _snapshot(self):
        return [c.snapshot() for c in self.cells], list(self.head), self._version

    def _restore(self, snap):
        cells, heads, version = snap
        for c, s in zip(self.cells, cells):
            c.restore(s)
        self.head = heads
        self._version = version

    # -- attention plan ---------------------------------------------------------------------------
    def attn_plan(self, ub: UBatch, layer=None):
        """(kv_cells int32[L], q_start int32[n], q_end int32[n]): token i attends to
        kv_cells[q_start[i]:q_end[i]], its first seq's cells with pos <= its pos inside the
        n_swa window, in ascending position order; one sorted list per sequence."""
        key = (id(ub), self._version)
        if self._plan[0] == key and self._plan[1] is ub:
            return self._plan[2]
        first = np.array([ids[0] for ids in ub.seq_ids], dtype=np.int64)
        if len(ub.seq_id_unq) == 1:
            seqs, toks = [ub.seq_id_unq[0]], [slice(None)]
        else:
            seqs = np.unique(first).tolist()
            toks = [np.flatnonzero(first == s) for s in seqs]
        qs = np.empty(ub.n_tokens, dtype=np.int32)
        qe = np.empty(ub.n_tokens, dtype=np.int32)
        parts, off = [], 0
        for s, tok in zip(seqs, toks):
            st = self.seq_to_stream(s)
            c, p = self.cells[st].seq_cells_sorted(s)
            pt = ub.pos[tok]
            qs[tok] = off + np.searchsorted(p, window_start(self.n_swa, self.swa_type, pt), "left")
            qe[tok] = off + np.searchsorted(p, pt, "right")
            parts.append(st * self.n_cells + c)
            off += len(c)
        kv = np.concatenate(parts).astype(np.int32)
        self._plan = (key, ub, (kv, qs, qe))
        return kv, qs, qe

    # -- sequence operations (half-open [p0, p1), negative = unbounded) ----------------------------
    def _streams_of(self, s: int):
        return range(self.n_stream) if s < 0 else [self.seq_to_stream(s)]

    def _seq_rm_stream(self, st, s, p0, p1) -> None:
        cells = self.cells[st]
        m = cells.in_range(p0, p1)
        if s >= 0:
            cells.has[s, m] = False
            freed = cells.drop_orphans(m)
        else:
            freed = np.flatnonzero(m)
            cells.clear_cells(freed)
        if len(freed) and freed[0] < self.head[st]:
            self.head[st] = int(freed[0])

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1) -> bool:
        p0, p1 = _range(p0, p1)
        if self._undo and seq_id >= 0 and p1 == INF_POS and self._undo_rm(seq_id, p0):
            undo = self._undo
            self._bump()
            self._undo = undo             # the other rows stay undoable (several slots)
            return True
        if seq_id >= 0 and not any((c.has[seq_id] & c.in_range(p0, p1)).any()
                                   for c in (self.cells[st] for st in self._streams_of(seq_id))):
            return True                   # nothing to remove: the state (and the log) stay
        for st in self._streams_of(seq_id):
            self._seq_rm_stream(st, seq_id, p0, p1)
        self._bump()
        return True

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        if src == dst:
            return
        p0, p1 = _range(p0, p1)
        s0, s1 = self.seq_to_stream(src), self.seq_to_stream(dst)
        if s0 == s1:
            cells = self.cells[s0]
            cells.has[dst, cells.has[src] & cells.in_range(p0, p1)] = True
        else:
            self._seq_cp_stream(src, dst, s0, s1, p0, p1)
        self._bump()

    def _seq_cp_stream(self, src, dst, s0, s1, p0, p1):
        if (p0, p1) != (0, INF_POS):
            raise ContextError("seq_cp between streams copies whole sequences only")
        a, b = self.cells[s0], self.cells[s1]
        b.reset()
        m = a.has[src]
        b.pos[m], b.shift[m] = a.pos[m], a.shift[m]
        b.has[dst, m] = True
        b.has_shift = bool(b.shift.any())
        self.head[s1] = self.head[s0]
        self._copies.append((s0, s1))

    def seq_keep(self, seq_id: int) -> None:
        st = self.seq_to_stream(seq_id)
        cells = self.cells[st]
        keep = cells.has[seq_id].copy()
        freed = np.flatnonzero((cells.pos >= 0) & ~keep)
        cells.clear_cells(freed)
        cells.has[:, keep] = False
        cells.has[seq_id, keep] = True
        if len(freed) and freed[0] < self.head[st]:
            self.head[st] = int(freed[0])
        self._bump()

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        p0, p1 = _range(p0, p1)
        if delta == 0 or p0 == p1:
            return
        st = self.seq_to_stream(seq_id)
        cells = self.cells[st]
        m = cells.has[seq_id] & cells.in_range(p0, p1)
        cells.pos[m] += delta
        cells.shift[m] += delta
        cells.has_shift |= bool(m.any())
        freed = np.flatnonzero(m & (cells.pos < 0))
        cells.clear_cells(freed)
        self.head[st] = int(freed[0]) if len(freed) else 0
        self._bump()

    def seq_div(self, seq_id: int, p0: int, p1: int, d: int) -> None:
        """pos //= d. The K-shift delta recorded is new - old (llama.cpp records old - new, a
        sign bug that rotates keys the wrong way; positions are identical)."""
        p0, p1 = _range(p0, p1)
        if d == 1 or p0 == p1:
            return
        cells = self.cells[self.seq_to_stream(seq_id)]
        m = cells.has[seq_id] & cells.in_range(p0, p1)
        old = cells.pos[m]
        cells.pos[m] = old // d
        cells.shift[m] += cells.pos[m] - old
        cells.has_shift |= bool(m.any())
        self._bump()

    def seq_pos_min(self, seq_id: int) -> int:
        return self.cells[self.seq_to_stream(seq_id)].seq_pos_min(seq_id)

    def seq_pos_max(self, seq_id: int) -> int:
        return self.cells[self.seq_to_stream(seq_id)].seq_pos_max(seq_id)

    def clear(self, data: bool = True) -> None:
        for c in self.cells:
            c.reset()
        self.head = [0] * self.n_stream
        self._copies.clear()
        if data:
            for buf in (*self.k.values(), *self.v.values()):
                buf[...] = 0
        self._bump()

    # -- update: K-shift and stream copies --------------------------------------------------------
    def update(self) -> bool:
        """Apply pending stream copies and K-shifts; True if anything was done."""
        done = bool(self._copies)
        for s0, s1 in self._copies:
            self._copy_stream(s0, s1)
        self._copies.clear()
        for st, cells in enumerate(self.cells):
            if cells.has_shift:
                self._k_shift(st, cells)
                done = True
        return done

    def _copy_stream(self, s0, s1):
        a, b = slice(s0 * self.n_cells, (s0 + 1) * self.n_cells), slice(s1 * self.n_cells, (s1 + 1) * self.n_cells)
        for buf in (*self.k.values(), *self.v.values()):
            buf[b] = buf[a]

    def _k_shift(self, st, cells):
        idx = np.flatnonzero((cells.pos >= 0) & (cells.shift != 0))
        if len(idx) and self.k:
            if self.rope is None:
                raise ContextError("K-shift needs a rope callable")
            g = st * self.n_cells + idx
            for il in self.layers:
                self._k_shift_layer(il, g, cells.shift[idx].copy())
        cells.shift[:] = 0
        cells.has_shift = False
        self._bump()

    def _k_shift_layer(self, il, g, delta):
        """Rotate K rows g by delta. Quantized / bf16 K: dequantize, rope in f32, requantize as
        set_rows does (llama.cpp: ggml_cast to f32, [Hadamard back], rope, [Hadamard], ggml_cpy
        back)."""
        k = self.k[il]
        if self.type_k in ("f16", "f32"):
            rows = k[g].astype(np.float32).reshape(len(g), self.n_head_kv[il], -1)
            k[g] = self._rope_rows(rows, delta, il).reshape(len(g), -1)
            return
        rows = kv_decode(k[g], self.type_k).reshape(len(g), self.n_head_kv[il], -1)
        c = self.k_center.get(il)
        c = None if c is None else c.reshape(self.n_head_kv[il], -1)
        if self.rot_k:                        # stored rotated: back, rope, forward (H @ H = I)
            rows = hadamard(rows, self.rot_k)
        if c is not None:                     # stored k - c: rope(k) - c
            rows = rows + c
        rot = self._rope_rows(rows, delta, il)
        if c is not None:
            rot = rot - c
        if self.rot_k:
            rot = hadamard(rot, self.rot_k)
        k[g] = kv_encode(rot.reshape(len(g), -1), self.type_k)

    def _rope_rows(self, rows, delta, il) -> np.ndarray:
        """rows [m, n_head_kv, head_dim] f32 with the RoPE part of each head (from rope_offset)
        rotated by delta."""
        if not self.rope_offset:
            return np.asarray(self.rope(rows, delta, il), dtype=np.float32)
        out = np.array(rows, dtype=np.float32)
        out[..., self.rope_offset:] = self.rope(
            np.ascontiguousarray(out[..., self.rope_offset:]), delta, il)
        return out

    # -- state ---------------------------------------------------------------------------------
    def state_cells(self, st: int, seq_id: int) -> np.ndarray:
        """Cells a state write saves: all non-empty, or seq_id's minus those outside the
        retention window of its pos_max."""
        cells = self.cells[st]
        if seq_id < 0:
            return np.flatnonzero(cells.pos >= 0)
        m = cells.has[seq_id].copy()
        if self.swa_type != SWA_NONE and m.any():
            m &= ~is_expired(self.n_swa, self.swa_extra, self.swa_type, cells.pos,
                              cells.seq_pos_max(seq_id))
        return np.flatnonzero(m)

    def state_write(self, seq_id: int = -1, flags: int = 0) -> bytes:
        return write_state(self, seq_id)

    def state_read(self, data: bytes, seq_id: int = -1, flags: int = 0) -> int:
        """Restore; returns the number of bytes consumed. Raises ContextError on mismatch."""
        return read_state(self, memoryview(data), seq_id)
