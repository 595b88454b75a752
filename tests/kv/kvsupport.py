"""Helpers shared by the tests in this folder (importable by a unique name; pytest loads
every folder's conftest.py as the same module name `conftest`)."""
import numpy as np
import pytest

from pyllama.batch import Batch, validate
from pyllama.kv import KVLayout, is_masked_swa

N_VOCAB = 1000


def gemma270m_layout(n_embd=256):
    """Gemma 3 270M geometry: 18 layers, il % 6 == 5 dense, n_swa 512, MQA head_dim 256."""
    return KVLayout(n_embd_k_gqa=[n_embd] * 18, n_embd_v_gqa=[n_embd] * 18, n_head_kv=[1] * 18,
                    is_swa=[il % 6 != 5 for il in range(18)], swa_type=1, n_swa=512)


def decode(mem, batch, n_ubatch, n_seq_max=None):
    """Validate + init_batch + apply every ubatch. Returns the ubatches, or an int error code
    (-1 invalid, 1 no slot) like llama_decode."""
    n_seq_max = n_seq_max or mem.n_seq_max
    rc, _ = validate(batch, N_VOCAB, n_seq_max, mem)
    if rc:
        return rc
    ubs = mem.init_batch(batch, n_ubatch)
    if ubs is None:
        return 1
    for ub in ubs:
        mem.apply_ubatch(ub)
    return ubs


def prompt(n, seq=0):
    return Batch(np.arange(n, dtype=np.int32) % N_VOCAB, seq_ids=[[seq]] * n)


def seq_positions(cache, s):
    st = cache.seq_to_stream(s)
    cells = cache.cells[st]
    return np.sort(cells.pos[cells.has[s]])


def window_ok(cache, s, p_new):
    """Every position the query at p_new needs (its window minus itself) is in the cache."""
    lo = max(0, p_new - cache.n_swa + 1) if cache.n_swa else 0
    have = set(seq_positions(cache, s).tolist())
    return all(p in have for p in range(lo, p_new))


def oracle_plan(cache, ub):
    """Brute-force visible cells per token: [(global cells sorted by (pos, cell))]."""
    out = []
    for p, ids in zip(ub.pos.tolist(), ub.seq_ids):
        s = ids[0]
        st = cache.seq_to_stream(s)
        cells = cache.cells[st]
        m = cells.has[s] & (cells.pos >= 0) & (cells.pos <= p)
        m &= ~is_masked_swa(cache.n_swa, cache.swa_type, cells.pos, p)
        c = np.flatnonzero(m)
        c = c[np.lexsort((c, cells.pos[c]))]
        out.append((st * cache.n_cells + c).tolist())
    return out


def plan_lists(cache, ub):
    kv, qs, qe = cache.attn_plan(ub)
    return [kv[a:b].tolist() for a, b in zip(qs, qe)]
