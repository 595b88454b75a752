"""Interleaved SWA memory: two KVCache instances, base (dense layers) and swa (window layers)
(llama.cpp src/llama-kv-cache-iswa.cpp `llama_kv_cache_iswa`). Same interface as KVCache; per-layer
calls take the model layer index and go to the layer's cache."""
from __future__ import annotations


import numpy as np

from ..batch import split_equal, split_simple
from ..errors import ContextError
from .cache import KVCache, mark_one_row
from .layout import KVLayout
from .swa import SWA_NONE, ctx_geometry, swa_cells

STATE_SEQ_FLAGS_PARTIAL_ONLY = 1


class ISWACache:
    def __init__(self, layout: KVLayout, *, n_ctx_seq, n_seq_max, n_ubatch, kv_unified=False,
                 swa_full=False, swa_extra=0, type_k="f16", type_v="f16", alloc=None, rope=None):
        self.kv_unified = kv_unified
        n_stream = 1 if kv_unified else n_seq_max
        common = dict(n_seq_max=n_seq_max, n_stream=n_stream, type_k=type_k, type_v=type_v,
                      alloc=alloc, rope=rope)
        size_swa = swa_cells(n_ctx_seq, n_seq_max, n_ubatch, layout.n_swa, swa_full, swa_extra, kv_unified)
        self.base = KVCache(n_cells=n_ctx_seq, swa_type=SWA_NONE, n_swa=0, swa_extra=0,
                            **layout.cache_kwargs(layout.layers(False)), **common)
        self.swa = KVCache(n_cells=size_swa, swa_type=layout.swa_type, n_swa=layout.n_swa,
                           swa_extra=swa_extra, **layout.cache_kwargs(layout.layers(True)), **common)
        self._route = {il: (self.swa if layout.is_swa[il] else self.base) for il in range(layout.n_layer)}
        self.k = {**self.base.k, **self.swa.k}
        self.v = {**self.base.v, **self.swa.v}
        self.n_stream, self.n_seq_max = n_stream, n_seq_max

    @property
    def caches(self) -> dict[str, KVCache]:
        return {"base": self.base, "swa": self.swa}

    @property
    def n_cells(self) -> int:
        return self.base.n_cells

    def seq_to_stream(self, s: int) -> int:
        return self.base.seq_to_stream(s)

    def cache_for(self, layer) -> KVCache:
        return self._route[layer]

    def cells_for(self, layer) -> np.ndarray:
        return self._route[layer].last_cells

    def attn_rot(self, layer) -> tuple[int, int]:
        return self._route[layer].attn_rot(layer)

    def kv_view(self, layer) -> tuple[int, int]:
        return self._route[layer].kv_view(layer)

    def kv_view_rows(self, layer) -> list[tuple[int, int]]:
        return self._route[layer].kv_view_rows(layer)

    def k_offset(self, layer):
        return self._route[layer].k_offset(layer)

    def used_cells(self) -> int:
        return self.base.used_cells()

    def can_shift(self) -> bool:
        return self.base.can_shift() and self.swa.can_shift() and self.base.n_cells == self.swa.n_cells

    def memory_breakdown(self) -> dict:
        return {name: c.memory_breakdown() for name, c in self.caches.items()}

    # -- batches --------------------------------------------------------------------------------
    def init_batch(self, batch, n_ubatch: int, one_row: bool = False):
        """Unified: split_simple first; then split_equal (sequential = not unified). Both caches
        must place the same ubatches; None = no slot. one_row: placed row by row (KVCache)."""
        if self.kv_unified:
            ubs = split_simple(batch, n_ubatch)
            mark_one_row(ubs, one_row)
            if self.base.prepare(ubs) and self.swa.prepare(ubs):
                return ubs
        try:
            ubs = split_equal(batch, n_ubatch, sequential=not self.kv_unified)
        except ContextError:
            return None
        mark_one_row(ubs, one_row)
        if self.base.prepare(ubs) and self.swa.prepare(ubs):
            return ubs
        return None

    def apply_ubatch(self, ub) -> dict[str, np.ndarray]:
        """{'base': cells, 'swa': cells} (global cell per token in each cache)."""
        return {name: c.apply_ubatch(ub) for name, c in self.caches.items()}

    def attn_plan(self, ub, layer):
        return self._route[layer].attn_plan(ub)

    def update(self) -> bool:
        a = self.base.update()
        b = self.swa.update()
        return a or b

    # -- sequence operations ------------------------------------------------------------------
    def seq_rm(self, seq_id, p0=-1, p1=-1) -> bool:
        a = self.base.seq_rm(seq_id, p0, p1)
        b = self.swa.seq_rm(seq_id, p0, p1)
        return a and b

    def seq_cp(self, src, dst, p0=-1, p1=-1) -> None:
        self.base.seq_cp(src, dst, p0, p1)
        self.swa.seq_cp(src, dst, p0, p1)

    def seq_keep(self, seq_id) -> None:
        self.base.seq_keep(seq_id)
        self.swa.seq_keep(seq_id)

    def seq_add(self, seq_id, p0, p1, delta) -> None:
        self.base.seq_add(seq_id, p0, p1, delta)
        self.swa.seq_add(seq_id, p0, p1, delta)

    def seq_div(self, seq_id, p0, p1, d) -> None:
        self.base.seq_div(seq_id, p0, p1, d)
        self.swa.seq_div(seq_id, p0, p1, d)

    def seq_pos_min(self, seq_id) -> int:
        return self.swa.seq_pos_min(seq_id)

    def seq_pos_max(self, seq_id) -> int:
        return self.swa.seq_pos_max(seq_id)

    def clear(self, data=True) -> None:
        self.base.clear(data)
        self.swa.clear(data)

    # -- state: base then swa, or swa only with PARTIAL_ONLY -------------------------------------
    def _state_caches(self, flags):
        return [self.swa] if flags & STATE_SEQ_FLAGS_PARTIAL_ONLY else [self.base, self.swa]

    def state_write(self, seq_id=-1, flags=0) -> bytes:
        """The caches' states one after the other, as llama_kv_cache_iswa::state_write (each is
        self-delimiting: llama.cpp's bytes, so state and slot files move between the two)."""
        return b"".join(c.state_write(seq_id, flags) for c in self._state_caches(flags))

    def state_read(self, data: bytes, seq_id=-1, flags=0) -> int:
        mv, off = memoryview(data), 0
        for c in self._state_caches(flags):
            off += c.state_read(mv[off:], seq_id, flags)
        return off


def make_memory(layout: KVLayout, *, n_ctx, n_seq_max=1, n_ubatch=512, kv_unified=False,
                swa_full=False, swa_extra=0, type_k="f16", type_v="f16", alloc=None, rope=None):
    """The Context's memory: KVCache for a model without SWA layers, else ISWACache. n_ctx is the
    context's (already 256-padded or not: it is padded here the same way)."""
    _, n_ctx_seq, n_stream = ctx_geometry(n_ctx, n_seq_max, kv_unified)
    if not layout.has_swa:
        return KVCache(n_cells=n_ctx_seq, n_seq_max=n_seq_max, n_stream=n_stream, type_k=type_k,
                       type_v=type_v, alloc=alloc, rope=rope, **layout.cache_kwargs(list(range(layout.n_layer))))
    return ISWACache(layout, n_ctx_seq=n_ctx_seq, n_seq_max=n_seq_max, n_ubatch=n_ubatch,
                     kv_unified=kv_unified, swa_full=swa_full, swa_extra=swa_extra, type_k=type_k,
                     type_v=type_v, alloc=alloc, rope=rope)
