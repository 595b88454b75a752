"""Serialisation of one KVCache (llama.cpp src/llama-kv-cache.cpp `state_write` / `state_read`).

Layout (little-endian): u32 n_stream; per stream: u32 cell_count; per cell i32 pos, u32 n_seq,
i32 seq ids; then u32 v_trans, u32 n_layer; per layer i32 K type, u64 K row bytes, the K rows of
the saved cells; then per layer the V section: with v_trans 0 (flash attention on) as K's; with
v_trans 1 (flash attention off: llama.cpp's V tensor is transposed) i32 V type, u32 element
bytes, u32 n_embd_v_gqa, then for each V dimension its value in every saved cell (the V rows
transposed), which is what llama.cpp writes and reads. A state whose word differs from the
cache's is refused ("incompatible V transposition", as llama.cpp). A cache whose V is a view of
K (MLA, KVLayout.v_in_k) has no V section, and either word is read back.
"""
from __future__ import annotations

import struct

import numpy as np

from ..batch import Batch, UBatch
from ..backend.base import KV_BLOCK
from ..errors import ContextError

GGML_TYPE = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8, "bf16": 30}   # row bytes: ggml_row_size


class _Reader:
    def __init__(self, mv: memoryview):
        self.mv, self.off = mv, 0

    def take(self, fmt: str):
        vals = struct.unpack_from("<" + fmt, self.mv, self.off)
        self.off += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def array(self, dtype, count: int) -> np.ndarray:
        a = np.frombuffer(self.mv, dtype=dtype, count=count, offset=self.off)
        self.off += a.nbytes
        return a


def write_state(cache, seq_id: int) -> bytes:
    out = [struct.pack("<I", cache.n_stream)]
    for st in range(cache.n_stream):
        idx = cache.state_cells(st, seq_id)
        out.append(struct.pack("<I", len(idx)))
        if len(idx):
            out.append(_meta_bytes(cache.cells[st], idx, seq_id))
            out.append(_data_bytes(cache, st * cache.n_cells + idx))
    return b"".join(out)


def _meta_bytes(cells, idx, seq_id) -> bytes:
    parts = []
    for i in idx.tolist():
        seqs = [seq_id] if seq_id >= 0 else np.flatnonzero(cells.has[:, i]).tolist()
        parts.append(struct.pack(f"<iI{len(seqs)}i", int(cells.pos[i]), len(seqs), *seqs))
    return b"".join(parts)


# bit 1 of llama.cpp's v_trans word: K rows stored centered (kv_k_center; llama.cpp refuses it)
K_CENTERED = 2


def _v_trans_word(cache) -> int:
    return (K_CENTERED if cache.k_center else 0) | (1 if cache.v_trans else 0)


def _v_transposed(cache) -> bool:
    """The V section is written transposed (a cache with V buffers and v_trans)."""
    if cache.v_trans and not cache.v_in_k and KV_BLOCK[cache.type_v] != 1:
        raise ContextError(f"quantized V cache ({cache.type_v}) needs flash attention")
    return cache.v_trans and not cache.v_in_k


def _data_bytes(cache, g) -> bytes:
    parts = [struct.pack("<II", _v_trans_word(cache), len(cache.k))]
    v_t = _v_transposed(cache)
    for kind, bufs, typ in (("k", cache.k, cache.type_k), ("v", cache.v, cache.type_v)):
        for il in cache.layers:
            if il in bufs:
                rows = bufs[il][g]
                if kind == "v" and v_t:
                    parts.append(struct.pack("<iII", GGML_TYPE[typ], rows.itemsize,
                                             rows.shape[1]))
                    parts.append(np.ascontiguousarray(rows.T).tobytes())
                else:
                    parts.append(struct.pack("<iQ", GGML_TYPE[typ], rows.shape[1] * rows.itemsize))
                    parts.append(np.ascontiguousarray(rows).tobytes())
    return b"".join(parts)


def read_state(cache, mv: memoryview, seq_id: int) -> int:
    r = _Reader(mv)
    n_stream = r.take("I")
    if seq_id < 0 and n_stream != cache.n_stream:
        raise ContextError(f"state has {n_stream} streams, cache has {cache.n_stream}")
    records = [_read_stream(cache, r) for _ in range(n_stream)]
    if seq_id < 0:
        _restore_whole(cache, records)
    else:
        _restore_seq(cache, records, seq_id)
    return r.off


def _read_stream(cache, r: _Reader):
    count = r.take("I")
    if count == 0:
        return [], [], {}
    pos, seqs = [], []
    for _ in range(count):
        p, n = r.take("iI")
        pos.append(p)
        seqs.append(tuple(int(x) for x in r.array("<i4", n)))
    return pos, seqs, _read_data(cache, r, count)


def _read_data(cache, r: _Reader, count: int) -> dict:
    v_trans, n_layer = r.take("II")
    if n_layer != len(cache.k):
        raise ContextError(f"state layer count {n_layer} != cache layer count {len(cache.k)}")
    if v_trans & ~(K_CENTERED | 1) or (not cache.v_in_k and bool(v_trans & 1) != cache.v_trans):
        raise ContextError("incompatible V transposition (state written with flash attention "
                           + ("on" if cache.v_trans else "off") + ", this context has it "
                           + ("off" if cache.v_trans else "on") + ")")
    centered = bool(v_trans & K_CENTERED)
    if centered != bool(cache.k_center):
        raise ContextError("state K rows are " + ("" if centered else "not ") + "centered "
                           "(kv_k_center) but this context's are " + ("" if cache.k_center
                                                                      else "not"))
    rows = {}
    v_t = _v_transposed(cache)
    for kind, bufs, typ in (("k", cache.k, cache.type_k), ("v", cache.v, cache.type_v)):
        for il in cache.layers:
            if il not in bufs:
                continue
            buf = bufs[il]
            n = buf.shape[1]
            if kind == "v" and v_t:
                t, el_bytes, n_embd = r.take("iII")
                if t != GGML_TYPE[typ] or el_bytes != buf.itemsize or n_embd != n:
                    raise ContextError(f"state v type/element size/width mismatch at layer {il}")
                rows[kind, il] = r.array(buf.dtype, count * n).reshape(n, count).T
                continue
            t, row_bytes = r.take("iQ")
            if t != GGML_TYPE[typ] or row_bytes != n * buf.itemsize:
                raise ContextError(f"state {kind} type/row size mismatch at layer {il}")
            rows[kind, il] = r.array(buf.dtype, count * n).reshape(count, n)
    return rows


def _restore_whole(cache, records) -> None:
    cache.clear(data=False)
    for st, (pos, seqs, rows) in enumerate(records):
        if len(pos) > cache.n_cells:
            raise ContextError(f"state has {len(pos)} cells, stream holds {cache.n_cells}")
        cells = cache.cells[st]
        for i, (p, ss) in enumerate(zip(pos, seqs)):
            if any(s < 0 or s >= cache.n_seq_max for s in ss):
                raise ContextError(f"invalid seq_id in state: {ss}")
            cells.pos[i] = p
            cells.has[list(ss), i] = True
        _copy_rows(cache, rows, st * cache.n_cells + np.arange(len(pos)))
    cache.head = [0] * cache.n_stream
    cache._bump()


def _restore_seq(cache, records, seq_id) -> None:
    pos = [p for rec in records for p in rec[0]]
    if any(len(ss) != 1 for rec in records for ss in rec[1]):
        raise ContextError("invalid seq_id-agnostic kv cell")
    cache.seq_rm(seq_id, -1, -1)
    if not pos:
        return
    batch = Batch(np.zeros(len(pos), np.int32), pos, [[seq_id]] * len(pos), None)
    ub = UBatch(batch, np.arange(len(pos)))
    if cache.find_slot(ub) is None:
        raise ContextError("failed to find a KV slot to restore the sequence")
    g = cache.apply_ubatch(ub)
    rows = {}
    for rec in records:
        for key, arr in rec[2].items():
            rows.setdefault(key, []).append(arr)
    _copy_rows(cache, {k: np.concatenate(v) for k, v in rows.items()}, g)


def _copy_rows(cache, rows: dict, g: np.ndarray) -> None:
    for (kind, il), arr in rows.items():
        (cache.k if kind == "k" else cache.v)[il][g] = arr
