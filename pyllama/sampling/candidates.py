"""The candidate list one sampling step works on: llama.cpp's `llama_token_data_array`.

A `Candidates` holds parallel arrays `ids` [n] int32, `logits` [n] float32 and `p` [n] float32
(valid only after a softmax), a `sorted` flag (descending logit order) and `selected` (index into
the arrays, -1 until a selecting sampler ran). Samplers replace the arrays (filtering) or edit
them in place; the order of the arrays matters, exactly as in llama.cpp: `dist` walks the
candidates in their current order, so an unsorted list is walked in token-id order.

Ties: llama.cpp sorts with an unstable comparator on the logit alone; here every sort is
descending logit, then ascending id, so equal logits always come out lowest id first.
"""
import numpy as np


class Candidates:
    __slots__ = ("ids", "logits", "p", "sorted", "selected", "identity", "ascending")

    def __init__(self, ids: np.ndarray, logits: np.ndarray, *, identity: bool = False):
        self.ids = ids
        self.logits = logits  # never written in place: samplers store edited copies
        self.p = None  # set by a softmax
        self.sorted = False
        self.selected = -1
        self.identity = identity  # ids[i] == i: a token's position is its id
        self.ascending = identity  # ids strictly increasing (cheaper tie-breaking sorts)

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> "Candidates":
        logits = np.asarray(logits, dtype=np.float32).reshape(-1)  # read only, no copy needed
        return cls(_arange(len(logits)), logits, identity=True)

    @property
    def size(self) -> int:
        return len(self.ids)

    def keep(self, idx, in_order: bool = False) -> None:
        """Keep the candidates at `idx` (index array or slice), in that order. in_order: idx is
        increasing (a filter that keeps the current order)."""
        if isinstance(idx, slice):
            in_order, prefix = True, not idx.start
        else:
            prefix = in_order and (len(idx) == 0 or idx[-1] == len(idx) - 1)
        self.ids = self.ids[idx]
        self.logits = self.logits[idx]
        self.p = None if self.p is None else self.p[idx]
        self.identity = self.identity and prefix
        self.ascending = self.ascending and in_order

    def positions_of(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in the arrays, mask into `tokens`) of those `tokens` present here."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if self.identity:
            found = (tokens >= 0) & (tokens < self.size)
            return tokens[found], found
        if self.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(len(tokens), dtype=bool)
        order = None if self.ascending else np.argsort(self.ids, kind="stable")
        sorted_ids = self.ids if order is None else self.ids[order]
        at = np.minimum(np.searchsorted(sorted_ids, tokens), self.size - 1)
        found = sorted_ids[at] == tokens
        at = at[found]
        return (at if order is None else order[at]), found


_ARANGE: dict[int, np.ndarray] = {}


def _arange(n: int) -> np.ndarray:
    """A shared read-only 0..n-1 id array (one per vocabulary size)."""
    a = _ARANGE.get(n)
    if a is None:
        a = np.arange(n, dtype=np.int32)
        a.flags.writeable = False
        _ARANGE[n] = a
    return a


def descending_order(logits: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Indices sorting by logit descending, then id ascending. Large arrays: an unstable argsort
    (several times faster than a stable one), then each run of equal logits re-sorted by id."""
    if len(logits) <= 256:
        return np.lexsort((ids, -logits))
    order = np.argsort(-logits)
    v = logits[order]
    eq = v[1:] == v[:-1]
    if not eq.any():
        return order
    in_run = np.zeros(len(v), dtype=bool)
    in_run[1:] |= eq
    in_run[:-1] |= eq
    at = np.flatnonzero(in_run)
    run = np.concatenate([[0], np.cumsum(~eq)])[at]  # runs are contiguous in `at`
    sub = order[at]
    order[at] = sub[np.lexsort((ids[sub], run))]
    return order


def sort_descending(cur: Candidates) -> None:
    """Full sort; -inf candidates (masked) only go to the end, in id order, unsorted further."""
    if cur.sorted:
        return
    masked = cur.logits == -np.inf
    if masked.any():
        live, dead = np.flatnonzero(~masked), np.flatnonzero(masked)
        live = live[descending_order(cur.logits[live], cur.ids[live])]
        if not cur.ascending:
            dead = dead[np.argsort(cur.ids[dead], kind="stable")]
        order = np.concatenate([live, dead])
    else:
        order = descending_order(cur.logits, cur.ids)
    cur.keep(order)
    cur.sorted = True


_BLOCK = 1024
_PREFILTER_MIN = 1 << 16


def top_k_indices(logits: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best (logit desc, id asc) without a full sort: argpartition + tie fix."""
    n = len(logits)
    if k >= n:
        return descending_order(logits, ids)  # ids may be in any order here
    live = logits > -np.inf
    n_live = int(np.count_nonzero(live))
    if n_live < n:  # masked (-inf) runs make argpartition crawl: select among the live ones
        at = np.flatnonzero(live)
        if n_live >= k:
            return at[top_k_indices(logits[at], ids[at], k)]
        return np.concatenate([at[descending_order(logits[at], ids[at])],
                               lowest_ids(np.flatnonzero(~live), ids, k - n_live)])
    if n >= _PREFILTER_MIN and k * _BLOCK <= n:
        # the k-th largest of the block maxima is <= the k-th largest logit, so every candidate
        # (ties at the cut included) is >= it: select among those few (a large-vocabulary step)
        nb = n // _BLOCK
        bmax = logits[:nb * _BLOCK].reshape(nb, _BLOCK).max(axis=1)
        if nb * _BLOCK < n:
            bmax = np.append(bmax, logits[nb * _BLOCK:].max())
        t = np.partition(bmax, len(bmax) - k)[len(bmax) - k]
        at = np.flatnonzero(logits >= t)
        if len(at) < n // 2:
            return at[top_k_indices(logits[at], ids[at], k)]
    part = np.argpartition(logits, n - k)[n - k:]
    thr = logits[part].min()
    n_eq_all = np.count_nonzero(logits == thr)
    if n_eq_all != np.count_nonzero(logits[part] == thr):
        # the cut falls inside a run of equal logits: keep the lowest ids of that run
        above = np.flatnonzero(logits > thr)
        eq = np.flatnonzero(logits == thr)
        eq = eq[np.argsort(ids[eq], kind="stable")][: k - len(above)]
        part = np.concatenate([above, eq])
    return part[descending_order(logits[part], ids[part])]


def lowest_ids(at: np.ndarray, ids: np.ndarray, r: int) -> np.ndarray:
    """The r positions of `at` with the lowest ids, in id order (ids are unique)."""
    if r < len(at):
        at = at[np.argpartition(ids[at], r - 1)[:r]]
    return at[np.argsort(ids[at])]


def softmax(cur: Candidates, do_sort: bool) -> None:
    """llama_sampler_softmax_impl: optional sort, p = exp(l - max) / sum (float32, in order)."""
    if cur.size == 0:
        raise ValueError("softmax over an empty candidate list")
    if do_sort:
        sort_descending(cur)
    max_l = cur.logits[0] if cur.sorted else cur.logits.max()
    p = np.exp(cur.logits - max_l, dtype=np.float32)
    cur.p = p / np.cumsum(p, dtype=np.float32)[-1]  # sequential float sum, as the C loop


def apply_temperature(cur: Candidates, temp: float) -> None:
    """llama_sampler_temp_impl: divide by temp; temp <= 0 keeps only the first maximum."""
    if temp <= 0.0:
        if cur.size:
            best = int(np.argmax(cur.logits))  # first maximum in the current order
            keep = cur.logits[best]
            cur.logits = np.full(cur.size, -np.inf, dtype=np.float32)
            cur.logits[best] = keep
        return
    cur.logits = cur.logits / np.float32(temp)


def dist_select(cur: Candidates, u: float) -> None:
    """llama_sampler_dist_apply with uniform `u` in [0, 1): softmax in the current order, pick
    the first candidate whose running (double) sum of p reaches u * sum; p normalised."""
    if cur.size == 0:
        raise ValueError("no candidates left to sample from")
    cur.selected = 0
    if cur.size == 1:
        cur.p = np.ones(1, dtype=np.float32)
        return
    max_l = cur.logits[0] if cur.sorted else cur.logits.max()
    p = np.exp(cur.logits - max_l, dtype=np.float32)
    i, total = first_reaching(p, u)
    cur.selected = i
    cur.p = (p / total).astype(np.float32)


BLOCK = 4096


def first_reaching(p: np.ndarray, u: float) -> tuple[int, float]:
    """(first i whose running double sum of p reaches u * sum, the sum), never a zero p.
    Long arrays are summed per block first so only one block needs a running sum."""
    if len(p) <= BLOCK:
        run = np.cumsum(p, dtype=np.float64)
        base, total = 0, run[-1]
    else:
        blocks = np.add.reduceat(p.astype(np.float64), np.arange(0, len(p), BLOCK))
        ends = np.cumsum(blocks)
        total = ends[-1]
        b = min(int(np.searchsorted(ends, total * u, side="left")), len(blocks) - 1)
        base = b * BLOCK
        run = np.cumsum(p[base:base + BLOCK], dtype=np.float64) + (ends[b - 1] if b else 0.0)
    i = min(int(np.searchsorted(run, total * u, side="left")), len(run) - 1)
    i += base
    if p[i] == 0.0:  # u == 0 exactly: never pick a zero-probability (filtered) candidate
        i += int(np.flatnonzero(p[i:])[0])
    return i, total


def discrete_select(cur: Candidates, draw) -> int:
    """std::discrete_distribution<int>(p) (libstdc++): a single candidate is returned without a
    draw; otherwise cumulative p / sum in double with the last set to 1, then the first
    position whose cumulative value is >= the uniform `draw()`."""
    if cur.size <= 1:
        return 0
    p = cur.p.astype(np.float64)
    run = np.cumsum(p / np.cumsum(p)[-1])  # accumulate, normalise, partial_sum
    run[-1] = 1.0
    return min(int(np.searchsorted(run, draw(), side="left")), cur.size - 1)
