"""KV caches with real arrays: state save/restore (`llama_kv_cache::state_write`/`state_read`), K-shift (`llama_kv_cache::update`), stream
copies, clear."""
import numpy as np
import pytest

from pyllama.batch import Batch, validate
from pyllama.errors import ContextError
from pyllama.kv import STATE_SEQ_FLAGS_PARTIAL_ONLY, KVCache, make_memory

from kvsupport import N_VOCAB, gemma270m_layout, prompt, seq_positions

HEAD_DIM, N_HEAD_KV = 8, 2


def alloc(n, row, dtype):
    return np.zeros((n, row), dtype={"f16": np.float16, "f32": np.float32}[dtype])


def neox(x, pos, base=10000.0):
    """x [m, h, d] rotated to positions pos [m] (NEOX pairs (i, i + d/2)), float64 math."""
    d = x.shape[-1]
    theta = pos[:, None].astype(np.float64) * base ** (-np.arange(d // 2) * 2.0 / d)
    c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
    a, b = x[..., : d // 2].astype(np.float64), x[..., d // 2:].astype(np.float64)
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1).astype(np.float32)


def raw_k(layer, pos, seq):
    """The unrotated key of (layer, pos, seq): deterministic, [m, N_HEAD_KV, HEAD_DIM]."""
    m = len(pos)
    base = (layer * 7 + pos[:, None, None] * 0.37 + seq[:, None, None] * 11.0) % 5.0
    return (base + np.arange(N_HEAD_KV * HEAD_DIM).reshape(1, N_HEAD_KV, HEAD_DIM) * 0.01).astype(np.float32) \
        + np.zeros((m, 1, 1), np.float32)


def decode_data(mem, batch, n_ubatch=8):
    """Decode and write K = rope(raw_k, pos), V = raw_k (flattened) for every layer."""
    assert validate(batch, N_VOCAB, mem.n_seq_max, mem)[0] == 0
    ubs = mem.init_batch(batch, n_ubatch)
    assert ubs is not None
    for ub in ubs:
        mem.apply_ubatch(ub)
        seq = np.array([ids[0] for ids in ub.seq_ids])
        for il in sorted(mem.k):
            cells = mem.cells_for(il)
            k0 = raw_k(il, ub.pos, seq)
            mem.k[il][cells] = neox(k0, ub.pos).reshape(len(cells), -1)
            mem.v[il][cells] = k0.reshape(len(cells), -1)
    return ubs


def rows_by_pos(cache, seq, layer):
    """{pos: (k row, v row)} of seq in the layer's cache."""
    cache = cache.cache_for(layer)
    st = cache.seq_to_stream(seq)
    c = np.flatnonzero(cache.cells[st].has[seq])
    g = st * cache.n_cells + c
    return {int(p): (cache.k[layer][gi].copy(), cache.v[layer][gi].copy())
            for p, gi in zip(cache.cells[st].pos[c], g)}


def same_rows(a, b):
    return a.keys() == b.keys() and all((a[p][0] == b[p][0]).all() and (a[p][1] == b[p][1]).all() for p in a)


def small(n_cells=32, n_seq_max=3, n_stream=1, type_k="f32", **kw):
    return KVCache(n_cells=n_cells, layers=[0, 1], n_embd_k=[16, 16], n_embd_v=[16, 16],
                   n_head_kv=[N_HEAD_KV] * 2, n_seq_max=n_seq_max, n_stream=n_stream, type_k=type_k,
                   type_v="f16", alloc=alloc, rope=lambda x, d, il: neox(x, d), **kw)


def two_seqs(mem):
    decode_data(mem, prompt(6, seq=0))
    mem.seq_cp(0, 1, 0, 4)                       # shared prefix 0..3
    decode_data(mem, Batch(np.ones(3, np.int32), np.arange(4, 7), [[1]] * 3))
    decode_data(mem, prompt(5, seq=2))


def test_whole_state_round_trip():
    a = small()
    two_seqs(a)
    a.seq_rm(2, 0, 2)                            # holes: restored compacted
    data = a.state_write()
    b = small()
    decode_data(b, prompt(3, seq=0))             # overwritten by the restore
    assert b.state_read(data) == len(data)
    assert b.used_cells() == a.used_cells() and b.head == [0]
    assert b.cells[0].pos[:a.used_cells()].tolist() == a.cells[0].pos[a.cells[0].pos >= 0].tolist()
    for s in range(3):
        for il in (0, 1):
            assert same_rows(rows_by_pos(a, s, il), rows_by_pos(b, s, il))


def test_single_sequence_round_trip_into_other_seq():
    a = small()
    two_seqs(a)
    data = a.state_write(seq_id=1)
    b = small()
    decode_data(b, prompt(4, seq=2))
    decode_data(b, prompt(2, seq=0))
    b.state_read(data, seq_id=0)
    assert seq_positions(b, 0).tolist() == list(range(7))
    assert seq_positions(b, 2).tolist() == [0, 1, 2, 3]
    for il in (0, 1):
        assert same_rows(rows_by_pos(a, 1, il), rows_by_pos(b, 0, il))


def test_state_mismatch_raises_and_keeps_cache():
    a = small()
    two_seqs(a)
    b = KVCache(n_cells=32, layers=[0], n_embd_k=[16], n_embd_v=[16], n_seq_max=3, n_stream=1, alloc=alloc)
    decode_data(b, prompt(3))
    before = b.cells[0].pos.copy()
    with pytest.raises(ContextError):
        b.state_read(a.state_write())
    assert (b.cells[0].pos == before).all()


def test_restore_into_full_cache_fails():
    a = small()
    decode_data(a, prompt(10, seq=0))
    b = small(n_cells=8)
    with pytest.raises(ContextError):
        b.state_read(a.state_write(seq_id=0), seq_id=1)


def test_k_shift_rotates_keys_to_new_positions():
    mem = small()
    decode_data(mem, prompt(10, seq=0))
    mem.seq_rm(0, 2, 5)
    mem.seq_add(0, 5, -1, -3)                   # context shift: 5..9 -> 2..6
    assert mem.cells[0].has_shift and mem.can_shift()
    assert mem.update() is True and not mem.cells[0].has_shift
    for il in (0, 1):
        rows = rows_by_pos(mem, 0, il)
        assert sorted(rows) == list(range(7))
        for p, (k, v) in rows.items():
            old = p + 3 if p >= 2 else p
            k0 = raw_k(il, np.array([old]), np.array([0]))
            np.testing.assert_allclose(k.reshape(1, N_HEAD_KV, HEAD_DIM), neox(k0, np.array([p])), atol=2e-5)
            np.testing.assert_array_equal(v, k0.reshape(-1).astype(np.float16))   # V untouched


def test_seq_div_shift_sign_is_new_minus_old():
    mem = small()
    decode_data(mem, prompt(8, seq=0))
    mem.seq_div(0, 4, -1, 2)                    # 4..7 -> 2, 2, 3, 3
    mem.update()
    cells = mem.cells[0]
    for i in range(4, 8):
        k0 = raw_k(0, np.array([i]), np.array([0]))
        np.testing.assert_allclose(mem.k[0][i].reshape(1, N_HEAD_KV, HEAD_DIM),
                                   neox(k0, np.array([cells.pos[i]])), atol=2e-5)


def test_cross_stream_seq_cp_copies_buffers_on_update():
    mem = small(n_cells=16, n_seq_max=2, n_stream=2)
    decode_data(mem, prompt(5, seq=0))
    mem.seq_cp(0, 1)
    assert mem.seq_pos_max(1) == 4 and mem.head[1] == mem.head[0]
    assert not (mem.k[0][16:21] == mem.k[0][0:5]).all()
    mem.update()
    for il in (0, 1):
        assert same_rows(rows_by_pos(mem, 0, il), rows_by_pos(mem, 1, il))
    with pytest.raises(ContextError):
        mem.seq_cp(0, 1, 0, 2)


def test_clear_zeroes_data():
    mem = small()
    decode_data(mem, prompt(5))
    mem.clear(data=False)
    assert mem.used_cells() == 0 and mem.k[0].any()
    mem.clear()
    assert not mem.k[0].any() and mem.head == [0]


# -- iSWA state ---------------------------------------------------------------------------------

def small_gemma(**kw):
    lay = gemma270m_layout(n_embd=N_HEAD_KV * HEAD_DIM)
    lay.n_head_kv = [N_HEAD_KV] * 18
    return make_memory(lay, n_ctx=2048, n_ubatch=64, type_k="f32",
                       alloc=alloc, **kw)


def test_iswa_single_seq_state_keeps_last_n_swa_of_swa_part():
    a = small_gemma()
    decode_data(a, prompt(900, seq=0), 64)
    assert a.seq_pos_min(0) > 0          # ring recycled (SWA 768 cells)
    b = small_gemma()
    b.state_read(a.state_write(seq_id=0), seq_id=0)
    assert seq_positions(b.swa, 0).tolist() == list(range(900 - 512, 900))
    assert seq_positions(b.base, 0).tolist() == list(range(900))
    assert b.seq_pos_min(0) == 900 - 512
    for il in (0, 5):
        want = {p: r for p, r in rows_by_pos(a, 0, il).items() if p >= (0 if il == 5 else 388)}
        assert same_rows(want, rows_by_pos(b, 0, il))


def test_iswa_partial_only_touches_swa_part():
    a = small_gemma()
    decode_data(a, prompt(300, seq=0), 64)
    part = a.state_write(seq_id=0, flags=STATE_SEQ_FLAGS_PARTIAL_ONLY)
    assert len(part) < len(a.state_write(seq_id=0))
    a.seq_rm(0, 200, -1)
    decode_data(a, Batch(np.ones(50, np.int32), np.arange(200, 250)), 64)
    base_before = rows_by_pos(a.base, 0, 5)
    a.state_read(part, seq_id=0, flags=STATE_SEQ_FLAGS_PARTIAL_ONLY)
    assert a.swa.seq_pos_max(0) == 299 and a.base.seq_pos_max(0) == 249
    assert same_rows(base_before, rows_by_pos(a.base, 0, 5))


def test_iswa_whole_state_round_trip():
    a = small_gemma(n_seq_max=2, kv_unified=True)
    decode_data(a, prompt(100, seq=0), 64)
    decode_data(a, prompt(40, seq=1), 64)
    b = small_gemma(n_seq_max=2, kv_unified=True)
    b.state_read(a.state_write())
    for s in (0, 1):
        for il in (0, 5):
            assert same_rows(rows_by_pos(a, s, il), rows_by_pos(b, s, il))
