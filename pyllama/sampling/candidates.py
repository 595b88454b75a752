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
    __slots__ = ("ids", "logits", "p", "sorted", "selected", "identity")

    def __init__(self, ids: np.ndarray, logits: np.ndarray, *, identity: bool = False):
        self.ids = ids
        self.logits = logits  # never written in place: samplers store edited copies
        self.p = None  # set by a softmax
        self.sorted = False
        self.selected = -1
        self.identity = identity  # ids == arange(n): ids[i] == i, so a token's index is its id

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> "Candidates":
        logits = np.asarray(logits, dtype=np.float32).reshape(-1)  # read only, no copy needed
        return cls(_arange(len(logits)), logits, identity=True)

    @property
    def size(self) -> int:
        return len(self.ids)

    def keep(self, idx) -> None:
        """Keep the candidates at `idx` (an index array or slice), in that order."""
        self.ids = self.ids[idx]
        self.logits = self.logits[idx]
        self.p = None if self.p is None else self.p[idx]
        self.identity = False

    def positions_of(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(positions in the arrays, mask into `tokens`) of those `tokens` present here."""
        tokens = np.asarray(tokens, dtype=np.int64)
        if self.identity:
            found = (tokens >= 0) & (tokens < self.size)
            return tokens[found], found
        order = np.argsort(self.ids, kind="stable")
        sorted_ids = self.ids[order]
        at = np.searchsorted(sorted_ids, tokens)
        at_c = np.minimum(at, max(self.size - 1, 0))
        found = (at < self.size) & (sorted_ids[at_c] == tokens) if self.size else np.zeros(
            len(tokens), dtype=bool)
        return order[at_c[found]], found

    def copy(self) -> "Candidates":
        c = Candidates(self.ids.copy(), self.logits.copy(), identity=self.identity)
        c.p = None if self.p is None else self.p.copy()
        c.sorted, c.selected = self.sorted, self.selected
        return c


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
    """Indices sorting by logit descending, then id ascending."""
    return np.lexsort((ids, -logits.astype(np.float64)))


def sort_descending(cur: Candidates) -> None:
    if not cur.sorted:
        cur.keep(descending_order(cur.logits, cur.ids))
        cur.sorted = True


def top_k_indices(logits: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k best (logit desc, id asc) without a full sort: argpartition + tie fix."""
    n = len(logits)
    if k >= n:
        return descending_order(logits, ids)
    part = np.argpartition(logits, n - k)[n - k:]
    thr = logits[part].min()
    n_eq_all = np.count_nonzero(logits == thr)
    if n_eq_all != np.count_nonzero(logits[part] == thr):
        # the cut falls inside a run of equal logits: keep the lowest ids of that run
        above = np.flatnonzero(logits > thr)
        eq = np.flatnonzero(logits == thr)
        eq = eq[np.argsort(ids[eq], kind="stable")][: k - len(above)]
        part = np.concatenate([above, eq])
    sub = descending_order(logits[part], ids[part])
    return part[sub]


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
