"""Perplexity and KL-divergence over a Context, computed exactly as llama.cpp's llama-perplexity
(tools/perplexity/perplexity.cpp): the text is cut into n_ctx-token chunks, each evaluated from an
empty cache with BOS replacing its first token when the vocab adds BOS, and only the second half of
each chunk is scored (the model always has n_ctx/2 tokens of context). `n_seq = n_batch // n_ctx`
chunks go through one batch as separate sequences. The ± estimate is the standard error of the mean
negative log-likelihood times PPL. KLD base files use llama.cpp's `_logits_` format.
`--ppl-stride` is perplexity_v2 (`strided_chunks`): windows of the whole context every `stride`
tokens, the last `stride` predictions of each scored with a float softmax. The float helpers
below (`expf`, `logf`, `token_logprobs`, `softmax_probs`) reproduce the C code's libm calls and
its float/double accumulation order, for the scoring tasks (pyllama.scoring) as well.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import math
import struct
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator

import numpy as np

from .batch import Batch
from .errors import ContextError, PyllamaError

MAGIC = b"_logits_"


# ---- the numbers, row by row (float32 logits, float64 sums, as the C++ code) -----------------
def _max_lse(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row max (float32) and float32 log of the float64 sum of expf(l - max)."""
    mx = logits.max(axis=1)
    s = np.exp(logits - mx[:, None], dtype=np.float32).sum(axis=1, dtype=np.float64)
    return mx, np.log(s).astype(np.float32)


def nll_rows(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Negative log-likelihood of targets[i] under logits[i] ([n, n_vocab] float32) → float64[n]."""
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    mx, lse = _max_lse(logits)
    tl = logits[np.arange(len(targets)), targets]
    return (mx + lse - tl).astype(np.float64)


def row_units(n_vocab: int) -> int:
    """uint16 units per row in a KLD base file: 2 floats (scale, min log-prob) + n_vocab, even."""
    return 2 * ((n_vocab + 1) // 2) + 4


def quantize_log_probs(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp's log_softmax(..., uint16_t *log_prob, tok): rows of row_units(n_vocab) uint16
    (log-probs in [max-16, max] quantized to 16 bits) and the float64 NLL of each target."""
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    n, V = logits.shape
    mx, lse = _max_lse(logits)
    mn = np.maximum(logits.min(axis=1), mx - np.float32(16))
    min_log_prob = (mn - mx - lse).astype(np.float32)
    scale = ((mx - mn) / np.float32(65535)).astype(np.float32)
    out = np.zeros((n, row_units(V)), dtype=np.uint16)
    out[:, :4].view(np.float32)[:, 0] = scale
    out[:, :4].view(np.float32)[:, 1] = min_log_prob
    with np.errstate(divide="ignore"):
        inv = np.where(scale != 0, np.float32(1) / scale, np.float32(0)).astype(np.float32)
    q = np.rint(inv[:, None] * (logits - mn[:, None])).astype(np.int64)
    q = np.where(logits > mn[:, None], q, 0)
    out[:, 4:4 + V] = np.clip(q, 0, 65535).astype(np.uint16)
    nll = (mx + lse - logits[np.arange(n), targets]).astype(np.float64)
    return out, nll


@dataclass
class KldStats:
    """kl_divergence_result: running sums over scored tokens."""
    sum_nll: float = 0.0
    sum_nll2: float = 0.0
    sum_nll_base: float = 0.0
    sum_nll_base2: float = 0.0
    sum_nll_nll_base: float = 0.0
    sum_kld: float = 0.0
    sum_kld2: float = 0.0
    sum_p_diff: float = 0.0
    sum_p_diff2: float = 0.0
    sum_p_diff4: float = 0.0
    max_p_diff: float = 0.0
    n_same_top: int = 0
    count: int = 0
    kld_values: list = field(default_factory=list)
    p_diff_values: list = field(default_factory=list)


def kld_rows(logits: np.ndarray, base: np.ndarray, targets: np.ndarray, st: KldStats) -> None:
    """Add rows to st: KLD(base || current), NLLs of both, Δp of the target, same-top counts."""
    logits = np.ascontiguousarray(logits, dtype=np.float32)
    n, V = logits.shape
    mx, lse = _max_lse(logits)
    imax = logits.argmax(axis=1)
    hdr = np.ascontiguousarray(base[:, :4]).view(np.float32)
    scale, min_lp = hdr[:, 0], hdr[:, 1]
    p_log_base = (scale[:, None] * base[:, 4:4 + V].astype(np.float32) + min_lp[:, None])
    p_log_base = p_log_base.astype(np.float32)
    rows = np.arange(n)
    nll = (mx + lse - logits[rows, targets]).astype(np.float32)
    nll_base = (-p_log_base[rows, targets]).astype(np.float32)
    mxl = (mx + lse).astype(np.float32)
    live = p_log_base > np.float32(-16)
    p_base = np.where(live, np.exp(p_log_base), np.float32(0)).astype(np.float32)
    term = (p_log_base - logits + mxl[:, None]).astype(np.float32)
    kld = (p_base.astype(np.float64) * np.where(live, term, 0)).sum(axis=1)
    p_diff = (np.exp(-nll) - np.exp(-nll_base)).astype(np.float32)
    _accumulate(st, nll.astype(np.float64), nll_base.astype(np.float64), kld, p_diff,
                int(np.count_nonzero(imax == p_log_base.argmax(axis=1))))


def _accumulate(st: KldStats, nll, nll_base, kld, p_diff, same_top: int) -> None:
    st.sum_nll += float(nll.sum())
    st.sum_nll2 += float((nll * nll).sum())
    st.sum_nll_base += float(nll_base.sum())
    st.sum_nll_base2 += float((nll_base * nll_base).sum())
    st.sum_nll_nll_base += float((nll * nll_base).sum())
    st.sum_kld += float(kld.sum())
    st.sum_kld2 += float((kld * kld).sum())
    pd = p_diff.astype(np.float64)
    st.sum_p_diff += float(pd.sum())
    st.sum_p_diff2 += float((pd * pd).sum())
    st.sum_p_diff4 += float((pd ** 4).sum())
    st.max_p_diff = max(st.max_p_diff, float(np.abs(p_diff).max(initial=0)))
    st.n_same_top += same_top
    st.count += len(nll)
    st.kld_values.extend(kld.astype(np.float32).tolist())
    st.p_diff_values.extend(p_diff.tolist())


# ---- estimates ------------------------------------------------------------------------------
def mean_and_uncertainty(s: float, s2: float, count: int) -> tuple[float, float]:
    """(mean, standard error) as kl_divergence's helper (0 uncertainty for count <= 10)."""
    if count < 1:
        return 0.0, 0.0
    f = s / count
    df = s2 / count - f * f
    return f, (math.sqrt(df / (count - 1)) if df > 0 and count > 10 else 0.0)


def covariance(sa: float, sb: float, sab: float, count: int) -> float:
    if count < 10:
        return 0.0
    return (sab / count - (sa / count) * (sb / count)) / (count - 1)


@dataclass
class PplAccumulator:
    nll: float = 0.0
    nll2: float = 0.0
    count: int = 0

    def add(self, nll: np.ndarray) -> None:
        self.nll += float(nll.sum())
        self.nll2 += float((nll * nll).sum())
        self.count += len(nll)

    @property
    def ppl(self) -> float:
        return math.exp(self.nll / self.count)

    def final(self) -> tuple[float, float | None]:
        """(PPL, ± estimate) as `Final estimate: PPL = %.4lf +/- %.5lf`; None when var <= 0."""
        mean = self.nll / self.count
        var = self.nll2 / self.count - mean * mean
        if var <= 0:
            return math.exp(mean), None
        return math.exp(mean), math.sqrt(var / (self.count - 1)) * math.exp(mean)

    def running(self) -> tuple[float, float, float]:
        """(PPL, mean NLL, its uncertainty) for --ppl-output-type 1."""
        av = self.nll / self.count
        av2 = self.nll2 / self.count - av * av
        if av2 > 0:
            av2 = math.sqrt(av2 / (self.count - 1))
        return math.exp(av), av, av2


# ---- chunked evaluation ---------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    n_ctx: int       # chunk length
    n_batch: int
    n_seq: int       # chunks per batch group
    n_chunk: int
    first: int       # first scored position within a chunk (n_ctx // 2)

    @property
    def num_batches(self) -> int:
        return (self.n_ctx + self.n_batch - 1) // self.n_batch


def plan(n_tokens: int, n_ctx: int, n_batch: int, n_chunks: int = -1) -> Plan:
    """The chunking llama-perplexity uses for n_tokens of text (n_batch as given on the command
    line; the context must hold n_seq * n_ctx cells with n_seq sequences)."""
    n_seq = max(1, n_batch // n_ctx)
    n_batch = min(n_batch, n_seq * n_ctx)
    if not (n_batch < n_ctx or n_batch % n_ctx == 0):
        raise ContextError(f"n_batch {n_batch} must be < n_ctx {n_ctx} or a multiple of it")
    n_max = n_tokens // n_ctx
    return Plan(n_ctx, n_batch, n_seq, n_max if n_chunks < 0 else min(n_chunks, n_max),
                n_ctx // 2)


def chunk_logits(ctx, tokens: np.ndarray, pl: Plan, i: int, bos: int | None) -> list[np.ndarray]:
    """Evaluate chunks i .. i+n_seq-1 from an empty cache; per chunk the [n_ctx - first, n_vocab]
    logits of positions first .. n_ctx-1 (the last row predicts nothing and is not scored)."""
    n_seq_batch = min(pl.n_seq, pl.n_chunk - i)
    ctx.memory.clear()
    out: list[list[np.ndarray]] = [[] for _ in range(n_seq_batch)]
    for j in range(pl.num_batches):
        bsize = min(pl.n_ctx - j * pl.n_batch, pl.n_batch)
        toks, pos, seqs = [], [], []
        for s in range(n_seq_batch):
            start = (i + s) * pl.n_ctx + j * pl.n_batch
            t = np.array(tokens[start:start + bsize], dtype=np.int32)
            if bos is not None and j == 0:
                t[0] = bos
            toks.append(t)
            pos.append(np.arange(j * pl.n_batch, j * pl.n_batch + bsize, dtype=np.int32))
            seqs += [s] * bsize
        pos_all = np.concatenate(pos)
        rc = ctx.decode(Batch(np.concatenate(toks), pos=pos_all, seq_ids=seqs,
                              logits=pos_all >= pl.first))
        if rc != 0:
            raise ContextError(f"failed to decode (code {rc})")
        _collect(ctx, out, pos_all, bsize, pl.first)
    return [np.concatenate(rows) for rows in out]


def _collect(ctx, out, pos_all, bsize: int, first: int) -> None:
    logits = ctx.get_logits()
    per_seq = int(np.count_nonzero(pos_all[:bsize] >= first))
    for s in range(len(out)):
        if per_seq:
            out[s].append(logits[s * per_seq:(s + 1) * per_seq].copy())


@dataclass
class ChunkResult:
    index: int                 # 0-based chunk index
    nll: np.ndarray            # NLL of each scored token
    log_probs: np.ndarray | None = None   # quantized rows for a KLD base file


def perplexity_chunks(ctx, tokens, pl: Plan, bos: int | None,
                      save_log_probs: bool = False) -> Iterator[ChunkResult]:
    """Yield each chunk's scored NLLs (and KLD-file rows when asked), in chunk order."""
    tokens = np.asarray(tokens, dtype=np.int32)
    for i in range(0, pl.n_chunk, pl.n_seq):
        per_chunk = chunk_logits(ctx, tokens, pl, i, bos)
        for s, logits in enumerate(per_chunk):
            c0 = (i + s) * pl.n_ctx
            targets = tokens[c0 + pl.first + 1:c0 + pl.n_ctx]
            rows = logits[:len(targets)]
            if save_log_probs:
                lp, nll = quantize_log_probs(rows, targets)
                yield ChunkResult(i + s, nll, lp)
            else:
                yield ChunkResult(i + s, nll_rows(rows, targets))


# ---- KLD base files ---------------------------------------------------------------------------
def write_header(f: BinaryIO, n_ctx: int, n_vocab: int, n_chunk: int, tokens) -> None:
    """`_logits_`, int32 n_ctx, int32 n_vocab, int32 n_chunk, int32 tokens[n_chunk * n_ctx]."""
    f.write(MAGIC + struct.pack("<iii", n_ctx, n_vocab, n_chunk))
    f.write(np.asarray(tokens[:n_chunk * n_ctx], dtype="<i4").tobytes())


@dataclass
class BaseFile:
    n_ctx: int
    n_vocab: int
    n_chunk: int
    tokens: np.ndarray
    f: BinaryIO

    def chunk_rows(self) -> np.ndarray:
        """The next chunk's [n_ctx - 1 - n_ctx/2, row_units] uint16 log-prob rows."""
        n_rows = self.n_ctx - 1 - self.n_ctx // 2
        units = row_units(self.n_vocab)
        data = self.f.read(n_rows * units * 2)
        if len(data) != n_rows * units * 2:
            raise PyllamaError("failed reading log-probs for a chunk")
        return np.frombuffer(data, dtype="<u2").reshape(n_rows, units)


def open_base(f: BinaryIO, path: str = "") -> BaseFile:
    if f.read(8) != MAGIC:
        raise PyllamaError(f"{path} does not look like a file containing log-probabilities")
    head = f.read(12)
    if len(head) != 12:
        raise PyllamaError(f"failed reading n_vocab, n_chunk from {path}")
    n_ctx, n_vocab, n_chunk = struct.unpack("<iii", head)
    raw = f.read(4 * n_ctx * n_chunk)
    if len(raw) != 4 * n_ctx * n_chunk:
        raise PyllamaError(f"failed reading evaluation tokens from {path}")
    return BaseFile(n_ctx, n_vocab, n_chunk, np.frombuffer(raw, dtype="<i4").copy(), f)


def kld_chunks(ctx, base: BaseFile, n_batch: int, bos: int | None,
               on_chunk: Callable[[int, KldStats], None] | None = None) -> KldStats:
    """Re-evaluate the base file's chunks (one sequence) and compare with its log-probs."""
    pl = Plan(base.n_ctx, min(n_batch, base.n_ctx), 1, base.n_chunk, base.n_ctx // 2)
    st = KldStats()
    for i in range(base.n_chunk):
        rows = base.chunk_rows()
        logits = chunk_logits(ctx, base.tokens, pl, i, bos)[0]
        c0 = i * base.n_ctx
        targets = base.tokens[c0 + pl.first + 1:c0 + base.n_ctx]
        kld_rows(logits[:len(targets)], rows, targets, st)
        if on_chunk is not None:
            on_chunk(i, st)
    return st


def percentile(sorted_values: list, fraction: float) -> float:
    if fraction <= 0:
        return sorted_values[0]
    if fraction >= 1:
        return sorted_values[-1]
    p = fraction * (len(sorted_values) - 1)
    ip = int(p)
    p -= ip
    return (1 - p) * sorted_values[ip] + p * sorted_values[min(ip + 1, len(sorted_values) - 1)]


def median(sorted_values: list) -> float:
    n = len(sorted_values)
    return 0.5 * (sorted_values[n // 2] + sorted_values[n // 2 - 1]) if n % 2 == 0 \
        else sorted_values[n // 2]


# ---- libm's float functions and the C code's float softmaxes --------------------------------
def _libm(name: str):
    """The C library's float function `name` (glibc's expf/logf are not always correctly
    rounded: llama-perplexity calls them), or None where there is no C library to load."""
    try:
        f = getattr(ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6"), name)
    except (OSError, AttributeError):
        return None
    f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
    return f


_EXPF, _LOGF = _libm("expf"), _libm("logf")
_EXPF_V = None if _EXPF is None else np.frompyfunc(_EXPF, 1, 1)
_F32 = np.float32
# glibc's expf: relative error 1.69 * 2^-34 before its final rounding to float (e_expf.c), i.e.
# under 0.00165 float ulp: only a double exp this close to a rounding tie can round the other way
_TIE = 0.0025


def expf(x: np.ndarray) -> np.ndarray:
    """libm's expf elementwise over float32 x: exp in float64 rounded to float32, and libm's own
    expf where that double lies within _TIE ulp of a tie between two floats (there glibc, which is
    not correctly rounded, may round the other way; about 0.5% of elements)."""
    x = np.asarray(x, dtype=_F32)
    d = np.exp(x.astype(np.float64))
    f = d.astype(_F32)
    if _EXPF is None:
        return f
    f64 = f.astype(np.float64)
    side = np.where(d >= f64, _F32(np.inf), _F32(-np.inf)).astype(_F32)
    nb = np.nextafter(f, side).astype(np.float64)
    with np.errstate(invalid="ignore"):
        frac = (d - f64) / (nb - f64)        # in [0, 0.5]: where d lies between f and its neighbour
        near = np.abs(frac - 0.5) < _TIE
    idx = np.flatnonzero(near)
    if len(idx):
        f.flat[idx] = np.asarray(_EXPF_V(x.flat[idx].astype(np.float64)), dtype=_F32)
    return f


def logf(v) -> np.float32:
    """libm's logf of one float (std::log of a float in the C++ code)."""
    if _LOGF is None:
        return _F32(np.log(np.float64(_F32(v))))
    return _F32(_LOGF(float(_F32(v))))


def _block_rows(n_vocab: int) -> int:
    return max(1, (1 << 22) // max(1, n_vocab))      # ~4M elements per pass


def _row_blocks(logits: np.ndarray, rows, tokens):
    """The (row, token) pairs in blocks of ~4M logits: yields (start, lg, mx, e, tok) with
    lg the block's float32 rows, mx their maxima, e = expf(lg - mx) and tok the block's tokens."""
    rows = np.asarray(rows, dtype=np.int64)
    tokens = np.asarray(tokens, dtype=np.int64)
    step = _block_rows(logits.shape[1])
    for b in range(0, len(rows), step):
        lg = np.ascontiguousarray(logits[rows[b:b + step]], dtype=_F32)
        mx = lg.max(axis=1)
        yield b, lg, mx, expf(lg - mx[:, None]), tokens[b:b + step]


def token_logprobs(logits: np.ndarray, rows, tokens) -> np.ndarray:
    """compute_logprobs (llama-perplexity's multiple-choice tasks): for each (row, token) pair
    logit[token] - max - logf(sum), the sum of expf(l - max) in float, in vocab order -> float32."""
    out = np.empty(len(rows), dtype=_F32)
    for b, lg, mx, e, tok in _row_blocks(logits, rows, tokens):
        s = np.cumsum(e, axis=1, dtype=_F32)[:, -1]          # sequential float sum
        tl = lg[np.arange(len(lg)), tok]
        for k in range(len(lg)):
            out[b + k] = _F32(_F32(tl[k] - mx[k]) - logf(s[k]))
    return out


def softmax_probs(logits: np.ndarray, rows, tokens) -> np.ndarray:
    """llama-perplexity's softmax(): p[token] = expf(l - max) / sum (the sum in double, in vocab
    order), rounded to float, for each (row, token) pair -> float32."""
    out = np.empty(len(rows), dtype=_F32)
    for b, lg, _, e, tok in _row_blocks(logits, rows, tokens):
        s = np.cumsum(e, axis=1, dtype=np.float64)[:, -1]    # sequential double sum
        et = e[np.arange(len(lg)), tok].astype(np.float64)
        out[b:b + len(lg)] = (et / s).astype(_F32)
    return out


# ---- strided perplexity (--ppl-stride: perplexity_v2) ---------------------------------------
@dataclass(frozen=True)
class StridePlan:
    n_ctx: int       # window length (the context's n_ctx: llama_n_ctx)
    n_batch: int
    stride: int
    n_chunk: int
    n_seq: int       # only printed, as llama.cpp does

    @property
    def first(self) -> int:
        """First scored row of a window (llama.cpp: n_ctx - stride - 1)."""
        return self.n_ctx - self.stride - 1


def stride_plan(n_tokens: int, n_ctx: int, n_batch: int, stride: int,
                n_chunks: int = -1) -> StridePlan:
    """perplexity_v2's windows over n_tokens of text with the context's n_ctx (padded, and
    grown by stride/2 as llama-perplexity grows it) and the command line's n_batch."""
    n_max = (n_tokens - n_ctx + stride - 1) // stride
    return StridePlan(n_ctx, n_batch, stride, n_max if n_chunks < 0 else min(n_chunks, n_max),
                      max(1, n_batch // n_ctx))


def strided_chunks(ctx, tokens, pl: StridePlan) -> Iterator[tuple[int, float, int]]:
    """perplexity_v2: window i = tokens[i*stride : i*stride + n_ctx] from an empty cache, every
    row an output (as llama.cpp asks; its BOS substitution happens after the decode, so the window
    is evaluated as it is), rows first .. n_ctx-2 scored: nll += -logf(softmax(row)[next token]) in
    double. Yields (window index, running nll, running count) after each window."""
    tokens = np.asarray(tokens, dtype=np.int32)
    if pl.first < 0:
        raise ContextError(f"stride {pl.stride} does not fit in a context of {pl.n_ctx}")
    nll, count = 0.0, 0
    num_batches = (pl.n_ctx + pl.n_batch - 1) // pl.n_batch
    for i in range(pl.n_chunk):
        start = i * pl.stride
        end = start + pl.n_ctx
        ctx.memory.clear()
        rows = []
        for j in range(num_batches):
            b0 = start + j * pl.n_batch
            size = min(end - b0, pl.n_batch)
            pos = np.arange(j * pl.n_batch, j * pl.n_batch + size, dtype=np.int32)
            rc = ctx.decode(Batch(tokens[b0:b0 + size], pos=pos, seq_ids=[0] * size,
                                  logits=np.ones(size, dtype=bool)))
            if rc != 0:
                raise ContextError(f"failed to decode window {i + 1} (code {rc}): it needs "
                                   f"{pl.n_ctx} cells in one sequence")
            rows.append(ctx.get_logits()[:size].copy())
        logits = np.concatenate(rows)
        js = np.arange(pl.first, pl.n_ctx - 1)
        probs = softmax_probs(logits, js, tokens[start + js + 1])
        for p in probs:
            nll += float(-logf(p))
            count += 1
        yield i, nll, count
