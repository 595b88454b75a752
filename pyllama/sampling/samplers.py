"""The individual samplers of llama.cpp's chain (src/llama-sampler.cpp), one class each.

Every sampler has `apply(cur)`; stateful ones also `accept(token)`, `reset()` and `clone()`.
Formulas and edge cases follow llama.cpp: float32 arithmetic, the same disabled values
(top_k <= 0, top_p >= 1, min_p <= 0, typ_p >= 1, top_n_sigma <= 0, ...), the same min_keep rules.
DRY lives in dry.py.
"""
import math
from collections import Counter, deque

import numpy as np

from pyllama.sampling.candidates import (
    Candidates, apply_temperature, discrete_select, softmax, sort_descending, top_k_indices)

F32 = np.float32


class Sampler:
    name = "?"

    def apply(self, cur: Candidates) -> None:
        raise NotImplementedError

    def accept(self, token: int) -> None:
        pass

    def reset(self) -> None:
        pass

    def clone(self) -> "Sampler":
        return self  # stateless samplers are immutable


class TopK(Sampler):
    name = "top-k"

    def __init__(self, k: int):
        self.k = int(k)

    def apply(self, cur: Candidates) -> None:
        top_k(cur, self.k)


def top_k(cur: Candidates, k: int) -> None:
    """llama_sampler_top_k_impl: k <= 0 is a no-op; keeps the k best, sorted."""
    if k <= 0:
        return
    k = min(k, cur.size)
    if not cur.sorted:
        cur.keep(top_k_indices(cur.logits, cur.ids, k))
        cur.sorted = True
    else:
        cur.keep(slice(0, k))
        cur.sorted = True


class TopP(Sampler):
    name = "top-p"

    def __init__(self, p: float, min_keep: int):
        self.p, self.min_keep = F32(p), int(min_keep)

    def apply(self, cur: Candidates) -> None:
        """Smallest prefix (descending) whose cumulative p >= top_p, at least min_keep long."""
        if self.p >= 1.0:
            return
        softmax(cur, do_sort=False)
        n = cur.size
        if cur.sorted:
            last = self._cut(cur.p)
            cur.keep(slice(0, last if last else n))
            return
        # llama.cpp sorts the best 256 first and everything when they do not reach p; an upper
        # bound from a logit histogram (like its bucket sort) gives the same prefix sooner
        order, last = self._try(cur, 256 if n > 1024 else n)
        if not last and len(order) < n:
            order, last = self._try(cur, self._mass_bound(cur))
        if not last and len(order) < n:
            order, last = self._try(cur, n)
        cur.keep(order[:last] if last else order)
        cur.sorted = True

    def _try(self, cur: Candidates, k: int) -> tuple[np.ndarray, int]:
        order = top_k_indices(cur.logits, cur.ids, min(k, cur.size))
        return order, self._cut(cur.p[order])

    def _mass_bound(self, cur: Candidates, buckets: int = 1024) -> int:
        """Tokens in the top logit buckets that hold mass >= top_p, one bucket of slack."""
        live = cur.logits > -np.inf
        if not live.any():
            return cur.size
        lo, hi = float(cur.logits[live].min()), float(cur.logits.max())
        scale = (buckets - 1) / (hi - lo) if hi > lo else 0.0
        b = np.zeros(cur.size, dtype=np.intp)
        b[live] = ((cur.logits[live] - lo) * scale).astype(np.intp)
        mass = np.bincount(b, weights=cur.p, minlength=buckets)[::-1].cumsum()
        count = np.bincount(b, minlength=buckets)[::-1].cumsum()
        j = min(int(np.searchsorted(mass, float(self.p), side="left")) + 1, buckets - 1)
        return max(int(count[j]), self.min_keep)

    def _cut(self, p_desc: np.ndarray) -> int:
        """Length of the kept prefix, 0 when these candidates never reach top_p."""
        cum = np.cumsum(p_desc, dtype=np.float32)
        ok = (cum >= self.p) & (np.arange(1, len(cum) + 1) >= self.min_keep)
        hit = np.flatnonzero(ok)
        return int(hit[0]) + 1 if len(hit) else 0


class MinP(Sampler):
    name = "min-p"

    def __init__(self, p: float, min_keep: int):
        self.p, self.min_keep = F32(p), int(min_keep)

    def apply(self, cur: Candidates) -> None:
        """Keep logits >= max + log(min_p) (p_i >= min_p * p_max), at least min_keep."""
        if self.p <= 0.0 or cur.size == 0:
            return
        if not cur.sorted:
            min_logit = F32(cur.logits.max() + F32(math.log(self.p)))
            keep = np.flatnonzero(cur.logits >= min_logit)
            if len(keep) and len(keep) >= self.min_keep:
                cur.keep(keep, in_order=True)
                return
            sort_descending(cur)
        min_logit = F32(cur.logits[0] + F32(math.log(self.p)))
        below = (cur.logits < min_logit) & (np.arange(cur.size) >= self.min_keep)
        below[0] = False  # the first token always matches
        hit = np.flatnonzero(below)
        cur.keep(slice(0, int(hit[0]) if len(hit) else cur.size))
        cur.sorted = True


class Typical(Sampler):
    name = "typical"

    def __init__(self, p: float, min_keep: int):
        self.p, self.min_keep = F32(p), int(min_keep)

    def apply(self, cur: Candidates) -> None:
        """Locally typical: order by |-log p - H|, keep until cumulative p > typ_p."""
        if self.p >= 1.0:
            return
        softmax(cur, do_sort=True)
        with np.errstate(divide="ignore"):
            logp = np.log(cur.p)
        # zero-probability candidates (masked earlier) add nothing to the entropy; llama.cpp's
        # -0 * log(0) would make it NaN and its order undefined
        terms = np.where(cur.p > 0, -cur.p * np.where(cur.p > 0, logp, 0), 0).astype(np.float32)
        entropy = F32(terms.sum(dtype=np.float64))
        shifted = np.abs(-logp - entropy)
        order = np.argsort(shifted, kind="stable")
        cum = np.cumsum(cur.p[order], dtype=np.float32)
        i = np.arange(len(order))
        ok = (cum > self.p) & ((self.min_keep == 0) | (i >= self.min_keep - 1))
        hit = np.flatnonzero(ok)
        last = int(hit[0]) + 1 if len(hit) else len(order)
        cur.keep(order[:last])
        cur.sorted = False


class TopNSigma(Sampler):
    name = "top-n-sigma"

    def __init__(self, n: float):
        self.n = F32(n)

    def apply(self, cur: Candidates) -> None:
        """Mask logits below max - n * std (over the finite logits) to -inf; nothing removed."""
        if self.n <= 0.0 or cur.size <= 1:
            return
        valid = cur.logits != -np.inf
        vals = cur.logits[valid]
        mx = vals.max() if len(vals) else cur.logits[0]
        mean = F32(vals.mean(dtype=np.float64)) if len(vals) else F32(0)
        std = F32(math.sqrt(np.mean((vals - mean).astype(np.float64) ** 2))) if len(vals) else F32(0)
        logits = cur.logits.copy()
        logits[logits < F32(mx - self.n * std)] = -np.inf
        cur.logits = logits


class TempExt(Sampler):
    name = "temp-ext"

    def __init__(self, temp: float, delta: float, exponent: float):
        self.temp, self.delta, self.exponent = F32(temp), F32(delta), F32(exponent)

    def apply(self, cur: Candidates) -> None:
        if self.delta <= 0:
            apply_temperature(cur, float(self.temp))
            return
        if cur.size <= 1:
            return
        dyn = self.dynamic_temp(cur)
        apply_temperature(cur, dyn)
        p = np.exp(cur.logits.astype(np.float64) - float(cur.logits[0]))
        cur.p = (p / p.sum()).astype(np.float32)

    def dynamic_temp(self, cur: Candidates) -> float:
        """min_t + (max_t - min_t) * (H / log n)^exponent, H the entropy of the sorted softmax."""
        min_t = max(F32(0), F32(self.temp - self.delta))
        max_t = F32(self.temp + self.delta)
        max_entropy = F32(-math.log(1.0 / cur.size))
        softmax(cur, do_sort=True)
        p = cur.p[cur.p > 0]
        entropy = F32(-(p * np.log(p)).sum(dtype=np.float64))
        return float(F32(min_t + (max_t - min_t) * F32((entropy / max_entropy) ** self.exponent)))


class Temp(Sampler):
    """Plain temperature (used in front of mirostat)."""
    name = "temp"

    def __init__(self, temp: float):
        self.temp = float(F32(temp))

    def apply(self, cur: Candidates) -> None:
        apply_temperature(cur, self.temp)


class Penalties(Sampler):
    name = "penalties"

    def __init__(self, last_n: int, repeat: float, freq: float, present: float):
        self.last_n = max(int(last_n), 0)
        self.repeat, self.freq, self.present = F32(repeat), F32(freq), F32(present)
        self.prev: deque = deque(maxlen=self.last_n or None)
        self.count: Counter = Counter()

    def accept(self, token: int) -> None:
        if self.last_n == 0:
            return
        if len(self.prev) >= self.last_n:
            old = self.prev[0]
            self.count[old] -= 1
            if self.count[old] == 0:
                del self.count[old]
        self.count[token] += 1
        self.prev.append(token)

    def apply(self, cur: Candidates) -> None:
        """logit /= repeat (or *= when <= 0), then -= count * freq + present, over the window."""
        if self.last_n == 0 or not self.count or (
                self.repeat == 1.0 and self.freq == 0.0 and self.present == 0.0):
            return
        toks = np.fromiter(self.count.keys(), dtype=np.int64, count=len(self.count))
        cnts = np.fromiter(self.count.values(), dtype=np.float32, count=len(self.count))
        pos, found = cur.positions_of(toks)
        cnts = cnts[found]
        logits = cur.logits.copy()
        l = logits[pos]
        l = np.where(l <= 0, l * self.repeat, l / self.repeat).astype(np.float32)
        logits[pos] = l - (cnts * self.freq + self.present)
        cur.logits = logits
        cur.sorted = False

    def reset(self) -> None:
        self.prev.clear()
        self.count.clear()

    def clone(self) -> "Penalties":
        c = Penalties(self.last_n, self.repeat, self.freq, self.present)
        c.prev.extend(self.prev)
        c.count = Counter(self.count)
        return c


class LogitBias(Sampler):
    name = "logit-bias"

    def __init__(self, pairs):
        """pairs: (token, bias) in order; a token may repeat (its biases add up, like llama.cpp)."""
        pairs = list(pairs)
        self.tokens = np.array([t for t, _ in pairs], dtype=np.int64)
        self.values = np.array([b for _, b in pairs], dtype=np.float32)

    def apply(self, cur: Candidates) -> None:
        if len(self.tokens) == 0:
            return
        pos, found = cur.positions_of(self.tokens)
        logits = cur.logits.copy()
        np.add.at(logits, pos, self.values[found])
        cur.logits = logits


class XTC(Sampler):
    """Exclude Top Choices: with probability xtc_probability drop every candidate with
    p >= threshold except the least likely of them. Has its own RNG (llama.cpp: its own
    mt19937), so the chain's `dist` draw count stays one per sample."""
    name = "xtc"

    def __init__(self, probability: float, threshold: float, min_keep: int, rng):
        self.probability, self.threshold = F32(probability), F32(threshold)
        self.min_keep, self.rng, self.rng_seed = int(min_keep), rng, None

    def apply(self, cur: Candidates) -> None:
        if self.probability <= 0 or self.threshold > 0.5 or cur.size < 2:
            return
        if F32(self.rng.random_float()) > self.probability:
            return
        softmax(cur, do_sort=True)
        above = np.flatnonzero(cur.p < self.threshold)
        n_above = int(above[0]) if len(above) else cur.size
        pos_last = n_above - 1 if n_above > 0 else 0
        if cur.size - pos_last >= self.min_keep and pos_last > 0:
            cur.keep(slice(pos_last, None))

    def clone(self) -> "XTC":
        return XTC(self.probability, self.threshold, self.min_keep, self.rng.copy())


class Mirostat(Sampler):
    """Mirostat v1 (m = 100): estimate the Zipf exponent, top-k to the target surprise, draw."""
    name = "mirostat"

    def __init__(self, n_vocab: int, tau: float, eta: float, m: int = 100):
        self.n_vocab, self.tau, self.eta, self.m = n_vocab, F32(tau), F32(eta), m
        self.mu = F32(2 * self.tau)

    def apply(self, cur: Candidates, draw) -> None:
        softmax(cur, do_sort=False)  # the m best suffice: no need to sort the whole vocabulary
        best = cur.p[top_k_indices(cur.logits, cur.ids, min(self.m, cur.size))]
        n = min(self.m - 1, cur.size - 1)
        i = np.arange(n, dtype=np.float32)
        t = np.log((i + 2) / (i + 1), dtype=np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.log(best[:n] / best[1:n + 1], dtype=np.float32)
            s_hat = F32((t * b).sum(dtype=np.float32) / (t * t).sum(dtype=np.float32)) \
                if n > 0 else F32(np.nan)
            eps = F32(s_hat - 1)
            k = F32((eps * F32(2.0) ** self.mu) / (1 - F32(self.n_vocab) ** -eps)) ** (1 / s_hat)
        top_k(cur, max(_c_int(k), 1))
        softmax(cur, do_sort=True)
        cur.selected = discrete_select(cur, draw)
        self._update(cur)

    def _update(self, cur: Candidates) -> None:
        surprise = -F32(math.log2(float(cur.p[cur.selected]))) if cur.p[cur.selected] > 0 else F32(np.inf)
        self.mu = F32(self.mu - self.eta * (surprise - self.tau))

    def reset(self) -> None:
        self.mu = F32(2 * self.tau)

    def clone(self) -> "Mirostat":
        c = Mirostat(self.n_vocab, self.tau, self.eta, self.m)
        c.mu = self.mu
        return c


class MirostatV2(Mirostat):
    name = "mirostat-v2"

    def __init__(self, tau: float, eta: float):
        super().__init__(0, tau, eta)

    def apply(self, cur: Candidates, draw) -> None:
        """Drop candidates whose surprise -log2 p exceeds mu (keep at least one), draw."""
        softmax(cur, do_sort=False)
        with np.errstate(divide="ignore"):
            keep = np.flatnonzero(~(-np.log2(cur.p) > self.mu))  # the sorted prefix, as a set
        if len(keep) == 0:
            keep = top_k_indices(cur.logits, cur.ids, 1)
        cur.keep(keep, in_order=True)
        softmax(cur, do_sort=True)
        cur.selected = discrete_select(cur, draw)
        self._update(cur)

    def clone(self) -> "MirostatV2":
        c = MirostatV2(self.tau, self.eta)
        c.mu = self.mu
        return c


class AdaptiveP(Sampler):
    """adaptive-p (llama.cpp PR 17927): reshape logits around an EMA-adapted target probability,
    then draw. Like mirostat it selects the token itself and replaces `dist`."""
    name = "adaptive-p"
    WIDTH, PEAK, SHARPNESS = F32(0.3), F32(5.0), F32(10.0)

    def __init__(self, target: float, decay: float):
        self.target, self.decay = F32(target), F32(min(max(decay, 0.0), 0.99))
        self.reset()

    def reset(self) -> None:
        self.weighted_sum = F32(self.target / (1 - self.decay))
        self.total_weight = F32(1 / (1 - self.decay))
        self.pending = None  # (token, original p)

    def apply(self, cur: Candidates, draw) -> None:
        softmax(cur, do_sort=False)
        if self.target < 0:
            cur.selected = discrete_select(cur, draw)
            return
        original = cur.p.copy()
        tgt = F32(min(max(self.target, 0), 1))
        adapted = tgt if self.total_weight == 0 else F32(2 * tgt - self.weighted_sum / self.total_weight)
        adapted = F32(min(max(adapted, 0), 1))
        d = np.abs((cur.p - adapted) * (1 / self.WIDTH)).astype(np.float32)
        new = (self.PEAK - self.SHARPNESS * d * d / (1 + d)).astype(np.float32)
        cur.logits = np.where(cur.logits == -np.inf, cur.logits, new).astype(np.float32)
        softmax(cur, do_sort=False)
        cur.selected = discrete_select(cur, draw)
        self.pending = (int(cur.ids[cur.selected]), original[cur.selected])

    def accept(self, token: int) -> None:
        if self.pending is not None and self.pending[0] == token:
            self.weighted_sum = F32(self.pending[1] + self.decay * self.weighted_sum)
            self.total_weight = F32(1 + self.decay * self.total_weight)
        self.pending = None

    def clone(self) -> "AdaptiveP":
        c = AdaptiveP(float(self.target), float(self.decay))
        c.weighted_sum, c.total_weight, c.pending = self.weighted_sum, self.total_weight, self.pending
        return c


def _c_int(x) -> int:
    """int(float) as the C cast does on x86: NaN, inf and out-of-range values give INT_MIN."""
    if np.isfinite(x) and -2.0 ** 31 <= x < 2.0 ** 31:
        return int(x)
    return -2 ** 31


class Infill(Sampler):
    """llama.cpp's infill sampler (for FIM): prefer end-of-generation when text tokens are weak,
    merge tokens whose text is a prefix of another's, drop low-probability text tokens."""
    name = "infill"

    def __init__(self, eog_ids, token_pieces, eot_id: int):
        self.eog = frozenset(int(t) for t in eog_ids)
        self.pieces, self.eot_id = token_pieces, int(eot_id)

    def apply(self, cur: Candidates) -> None:
        softmax(cur, do_sort=True)
        is_eog = np.fromiter((int(t) in self.eog for t in cur.ids), dtype=bool, count=cur.size)
        p_eog = F32(cur.p[is_eog].sum(dtype=np.float64))
        p_txt = F32(cur.p[~is_eog].sum(dtype=np.float64))
        if 3 * p_eog * cur.size > p_txt:  # text too unlikely: keep only the EOG tokens
            self._keep(cur, np.flatnonzero(is_eog))
            return
        self._merge_prefixes(cur)
        keep = np.flatnonzero((cur.p >= F32(0.2)) | is_eog)
        n_text = int(np.count_nonzero(~is_eog[keep]))
        if n_text == 0:  # nothing but EOG left: a single end-of-text token
            cur.ids = np.array([self.eot_id], dtype=np.int32)
            cur.logits = np.ones(1, dtype=np.float32)
            cur.p = cur.p[:1].copy()
            cur.identity = cur.ascending = False
            return
        self._keep(cur, keep)
        is_eog = is_eog[keep]
        self._keep(cur, np.flatnonzero((cur.p >= F32(1.0 / (n_text + 1))) | is_eog))

    @staticmethod
    def _keep(cur: Candidates, idx: np.ndarray) -> None:
        cur.keep(idx, in_order=True)
        if cur.size:
            cur.p = (cur.p / F32(cur.p.sum(dtype=np.float64))).astype(np.float32)

    def _merge_prefixes(self, cur: Candidates) -> None:
        """Token i0's text a prefix of token i1's: the likelier of the two takes the other's p."""
        text = [self.pieces(int(t)) for t in cur.ids]
        logits, p = cur.logits.copy(), cur.p.copy()
        for i0 in range(cur.size):
            for i1 in range(cur.size):
                if logits[i0] == -np.inf:
                    break
                if i0 == i1 or logits[i1] == -np.inf:
                    continue
                if text[i0] and text[i1].startswith(text[i0]):
                    dst, src = (i1, i0) if p[i1] > p[i0] else (i0, i1)
                    p[dst] += p[src]
                    logits[src], p[src] = -np.inf, 0.0
        cur.logits, cur.p = logits, p
