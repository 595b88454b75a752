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


def descending_order(logits: np.ndarray, ids: np.ndarray, ids_ascending: bool = False) -> np.ndarray:
    """Indices sorting by logit descending, then id ascending."""
    if ids_ascending:
        return np.argsort(-logits, kind="stable")
    return np.lexsort((ids, -logits))


def sort_descending(cur: Candidates) -> None:
    """Full sort; -inf candidates (masked) only go to the end, in id order, unsorted further."""
    if cur.sorted:
        return
    masked = cur.logits == -np.inf
    if masked.any():
        live, dead = np.flatnonzero(~masked), np.flatnonzero(masked)
        live = live[descending_order(cur.logits[live], cur.ids[live], cur.ascending)]
        if not cur.ascending:
            dead = dead[np.argsort(cur.ids[dead], kind="stable")]
        order = np.concatenate([live, dead])
    else:
        order = descending_order(cur.logits, cur.ids, cur.ascending)
    cur.keep(order)
    cur.sorted = True


def top_k_indices(logits: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best (logit desc, id asc) without a full sort: argpartition + tie fix."""
    n = len(logits)
    if k >= n:
        return descending_order(logits, ids)  # ids may be in any order here
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


def softmax(cur: Candidates, do_sort: bool) -> None:
    """llama_sampler_softmax_impl: optional sort, p = exp(l - max) / sum (float32, in order)."""
    if cur.size == 0:
        raise ValueError("softmax over an empty candidate list")
    if do_sort:
        sort_descending(cur)
    max_l = cur.logits[0] if cur.sorted else cur.logits.max()
    p = np.exp(cur.logits - max_l, dtype=np.float32)
    total = np.cumsum(p, dtype=np.float32)[-1]  # sequential float sum, like the C loop
    cur.p = p / total


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
    run = np.cumsum(p, dtype=np.float64)
    total = run[-1]
    i = int(np.searchsorted(run, total * u, side="left"))
    i = min(i, cur.size - 1)
    if p[i] == 0.0:  # u == 0 exactly: never pick a zero-probability (filtered) candidate
        i += int(np.flatnonzero(p[i:])[0])
    cur.selected = i
    cur.p = (p / total).astype(np.float32)


def discrete_select(cur: Candidates, u: float) -> int:
    """std::discrete_distribution over cur.p (already normalised) with uniform u."""
    run = np.cumsum(cur.p, dtype=np.float64)
    i = int(np.searchsorted(run, run[-1] * u, side="right"))
    return min(i, cur.size - 1)
