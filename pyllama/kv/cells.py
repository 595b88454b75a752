"""Cell bookkeeping of one KV stream (llama.cpp src/llama-kv-cells.h `llama_kv_cells`).

No tensors: positions, accumulated shifts and sequence membership of `size` cells, held in
numpy arrays so the slot search and the attention plan are a few vector operations.
"""
from __future__ import annotations

import numpy as np

INF_POS = np.iinfo(np.int32).max


class KVCells:
    def __init__(self, size: int, n_seq_max: int):
        self.size = size
        self.pos = np.full(size, -1, dtype=np.int32)     # [size], -1 = empty
        self.shift = np.zeros(size, dtype=np.int32)      # [size], delta since the last K-shift
        self.has = np.zeros((n_seq_max, size), dtype=bool)   # [n_seq_max, size] membership
        self.has_shift = False

    # -- queries ----------------------------------------------------------------------------
    def empty(self) -> np.ndarray:
        return self.pos < 0

    def used(self) -> int:
        return int(np.count_nonzero(self.pos >= 0))

    def used_max_p1(self) -> int:
        nz = np.flatnonzero(self.pos >= 0)
        return int(nz[-1]) + 1 if len(nz) else 0

    def seq_count(self) -> np.ndarray:
        return self.has.sum(axis=0)

    def seq_pos_min(self, s: int) -> int:
        p = self.pos[self.has[s]]
        return int(p.min()) if len(p) else -1

    def seq_pos_max(self, s: int) -> int:
        p = self.pos[self.has[s]]
        return int(p.max()) if len(p) else -1

    def pos_max_all(self) -> np.ndarray:
        """int32[n_seq_max]: seq_pos_max of every sequence (-1 if absent)."""
        return np.where(self.has, self.pos[None, :], -1).max(axis=1)

    def in_range(self, p0: int, p1: int) -> np.ndarray:
        return (self.pos >= p0) & (self.pos < p1)

    def seq_cells_sorted(self, s: int) -> tuple[np.ndarray, np.ndarray]:
        """(cells, positions) of sequence s ordered by (pos, cell)."""
        c = np.flatnonzero(self.has[s])
        p = self.pos[c]
        o = np.lexsort((c, p))
        return c[o], p[o]

    # -- mutators ---------------------------------------------------------------------------
    def clear_cells(self, idx) -> None:
        self.pos[idx] = -1
        self.shift[idx] = 0
        self.has[:, idx] = False

    def reset(self) -> None:
        self.clear_cells(slice(None))
        self.has_shift = False

    def drop_orphans(self, mask: np.ndarray) -> np.ndarray:
        """Empty the cells in mask that no sequence holds any more; returns their indices."""
        freed = np.flatnonzero(mask & (self.pos >= 0) & ~self.has.any(axis=0))
        self.clear_cells(freed)
        return freed

    def snapshot(self):
        return self.pos.copy(), self.shift.copy(), self.has.copy(), self.has_shift

    def restore(self, snap) -> None:
        pos, shift, has, has_shift = snap
        self.pos[:] = pos
        self.shift[:] = shift
        self.has[:] = has
        self.has_shift = has_shift
