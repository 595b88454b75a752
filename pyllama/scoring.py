"""HellaSwag, Winogrande and multiple-choice scores over a Context, computed exactly as llama.cpp's
llama-perplexity (tools/perplexity/perplexity.cpp: hellaswag_score, winogrande_score,
multiple_choice_score).

Each task is a shared prefix and 2..N continuations, one sequence each. Tasks are packed into one
batch while their tokens fit in n_ctx and their sequences in n_seq_max (at most 32 HellaSwag or
multiple-choice tasks, 128 Winogrande tasks), the prefix once with every sequence id, then each
continuation; the batch is decoded from an empty cache in n_batch pieces and the logits are read
back in llama.cpp's index arithmetic (its quirks included: Winogrande's second choice reads "the
wrong first logits" when the choice word is not skipped, see its FIXME). A continuation scores the
mean log-probability of its tokens: the first from a float softmax of the prefix's last logits
(then libm logf), the rest from `compute_logprobs` (float sums of libm expf in vocab order), with
llama.cpp's float/double accumulation per task type. Task selection is llama.cpp's: std::mt19937
seeded with 1, HellaSwag drawing with libstdc++'s uniform_int_distribution (Lemire's method over
the 32-bit generator), Winogrande and multiple-choice scaling a draw by 2^-32 in float.

Input formats: HellaSwag, 6 lines per task (context, gold ending index, 4 endings); Winogrande,
CSV lines `index,sentence with _,choice1,choice2,answer` (the sentence may be double-quoted; lines
that do not parse are reported and skipped, and a last line without its newline is not read, as
llama.cpp's getline loop does); multiple choice, llama.cpp's binary format: uint32 n_task, uint32
offsets[n_task], then per task a string (uint32 length + bytes) question and two answer sets
(uint32 n <= 100, n strings, int32 labels[n]); only the first set (one correct answer) is scored.
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from .batch import Batch
from .errors import PyllamaError
from .perplexity import logf, softmax_probs, token_logprobs

_F32 = np.float32
_M32 = 0xFFFFFFFF


class TaskError(PyllamaError):
    """Task data that llama-perplexity cannot score; str() is llama.cpp's message."""


# ---- llama.cpp's random task selection ------------------------------------------------------
class MT19937:
    """std::mt19937 (32-bit Mersenne Twister, init_genrand seeding)."""

    max = _M32

    def __init__(self, seed: int = 5489):
        mt = [seed & _M32]
        for i in range(1, 624):
            mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & _M32)
        self._mt, self._i = mt, 624

    def _twist(self) -> None:
        mt = self._mt
        for i in range(624):
            y = (mt[i] & 0x80000000) | (mt[(i + 1) % 624] & 0x7FFFFFFF)
            mt[i] = mt[(i + 397) % 624] ^ (y >> 1) ^ (0x9908B0DF if y & 1 else 0)
        self._i = 0

    def __call__(self) -> int:
        if self._i >= 624:
            self._twist()
        y = self._mt[self._i]
        self._i += 1
        y ^= y >> 11
        y ^= (y << 7) & 0x9D2C5680
        y ^= (y << 15) & 0xEFC60000
        return y ^ (y >> 18)


def uniform_index(rng: MT19937, n: int) -> int:
    """std::uniform_int_distribution<size_t>(0, n - 1)(rng) as libstdc++ computes it for a 32-bit
    generator: Lemire's nearly divisionless method with a 64-bit product."""
    if not 1 <= n <= _M32:
        raise ValueError("uniform_index needs 1 <= n < 2^32")
    product = rng() * n
    low = product & _M32
    if low < n:
        threshold = ((1 << 32) - n) % n
        while low < threshold:
            product = rng() * n
            low = product & _M32
    return product >> 32


def scaled_index(rng: MT19937, n: int) -> int:
    """int(scale * rng() * n) with scale = 1/(1 + max) in float, as llama.cpp picks Winogrande
    and multiple-choice tasks (a draw that rounds up to 2^32 would index n: clamped)."""
    j = int(_F32(_F32(_F32(2.0 ** -32) * _F32(rng())) * _F32(n)))
    return min(j, n - 1)


# ---- batches as common_batch builds them -----------------------------------------------------
class _Batch:
    def __init__(self):
        self.tokens: list[int] = []
        self.pos: list[int] = []
        self.seqs: list[tuple] = []
        self.out: list[bool] = []

    def add(self, token: int, pos: int, seqs, output: bool) -> None:
        self.tokens.append(int(token))
        self.pos.append(int(pos))
        self.seqs.append(tuple(seqs) if isinstance(seqs, (tuple, list)) else (int(seqs),))
        self.out.append(bool(output))

    def set_last_output(self) -> None:
        """batch.set_output(batch.size() - 1, true) (a no-op on an empty batch)."""
        if self.out:
            self.out[-1] = True

    def __len__(self) -> int:
        return len(self.tokens)


class _Logits:
    """llama.cpp's batch_logits vector: zero-initialised rows that each decode overwrites from row
    0 up; rows past what the last decode wrote keep older contents."""

    def __init__(self, n_vocab: int):
        self.a = np.zeros((0, n_vocab), dtype=_F32)

    def write(self, at: int, rows: np.ndarray) -> None:
        need = at + len(rows)
        if need > len(self.a):
            grown = np.zeros((max(need, 2 * len(self.a)), self.a.shape[1]), dtype=_F32)
            grown[:len(self.a)] = self.a
            self.a = grown
        self.a[at:need] = rows

    def view(self, n_rows: int) -> np.ndarray:
        if n_rows > len(self.a):
            self.write(len(self.a), np.zeros((n_rows - len(self.a), self.a.shape[1]), _F32))
        return self.a


def _decode(ctx, b: _Batch, n_batch: int, buf: _Logits) -> None:
    """decode_helper: clear the cache, decode in n_batch pieces, outputs copied in order."""
    ctx.memory.clear()
    prev = 0
    for i in range(0, len(b), n_batch):
        n = min(n_batch, len(b) - i)
        out = np.array(b.out[i:i + n], dtype=bool)
        rc = ctx.decode(Batch(np.array(b.tokens[i:i + n], dtype=np.int32),
                              pos=np.array(b.pos[i:i + n], dtype=np.int32),
                              seq_ids=b.seqs[i:i + n], logits=out))
        if rc != 0:
            raise TaskError(f"failed to decode the batch, n_batch = {n_batch}, ret = {rc}")
        n_out = int(out.sum())
        if n_out:
            buf.write(prev, ctx.get_logits()[:n_out])
        prev += n_out


def _common_prefix(seqs: list[list[int]], limit: int) -> int:
    n = 0
    for k in range(limit):
        t = seqs[0][k]
        if any(k >= len(s) or s[k] != t for s in seqs[1:]):
            break
        n += 1
    return n


@dataclass
class _Task:
    """One task's token sequences (common_prefix shared, required_tokens to evaluate all)."""
    seq_tokens: list
    common_prefix: int = 0
    required_tokens: int = 0
    i_logits: int = 0

    def __post_init__(self):
        self.required_tokens = self.common_prefix + sum(len(s) - self.common_prefix
                                                        for s in self.seq_tokens)


def _pack(tasks, i0: int, n_ctx: int, max_seq: int, add_task) -> tuple[_Batch, int]:
    """Fill a batch with tasks i0.. while they fit (llama.cpp's while loop); -> (batch, i1)."""
    b = _Batch()
    n_cur, i1, i_logits, s0 = 0, i0, 0, 0
    while n_cur + tasks[i1].required_tokens <= n_ctx:
        t = tasks[i1]
        n_seq = len(t.seq_tokens)
        if s0 + n_seq > max_seq:
            break
        t.i_logits = i_logits
        i_logits += add_task(b, t, s0)
        s0 += n_seq
        n_cur += t.required_tokens
        i1 += 1
        if i1 == len(tasks):
            break
    return b, i1


def _add_prefix_and_endings(b: _Batch, t: _Task, s0: int) -> int:
    """HellaSwag / multiple choice: the prefix once (its last token an output), then each
    continuation with outputs on all but its last token; -> logits counted."""
    seqs = tuple(range(s0, s0 + len(t.seq_tokens)))
    for i in range(t.common_prefix):
        b.add(t.seq_tokens[0][i], i, seqs, False)
    b.set_last_output()
    n = 1
    for s, toks in enumerate(t.seq_tokens):
        for i in range(t.common_prefix, len(toks)):
            need = i < len(toks) - 1
            b.add(toks[i], i, s0 + s, need)
            n += need
    return n


def _ending_pairs(tasks, i0: int, i1: int) -> tuple[list[int], list[int]]:
    rows, toks = [], []
    for t in tasks[i0:i1]:
        li = 1
        for s in t.seq_tokens:
            for j in range(t.common_prefix, len(s) - 1):
                rows.append(t.i_logits + li)
                toks.append(s[j + 1])
                li += 1
    return rows, toks


def _first_logprobs(logits, t: _Task) -> list:
    """logf(softmax(prefix's last logits)[first continuation token]) per continuation."""
    toks = [s[t.common_prefix] if t.common_prefix < len(s) else 0 for s in t.seq_tokens]
    p = softmax_probs(logits, [t.i_logits] * len(toks), toks)
    return [logf(v) for v in p]


def _n_vocab(ctx) -> int:
    return int(ctx.model.n_vocab)


# ---- HellaSwag ------------------------------------------------------------------------------
def split_lines(text: str) -> list[str]:
    """std::getline(stream, line, '\\n') over text: no empty piece after a final newline."""
    if not text:
        return []
    parts = text.split("\n")
    return parts[:-1] if parts[-1] == "" else parts


def stoi(s: str) -> int:
    """std::stoi: leading whitespace, a sign, digits (the rest ignored); else TaskError."""
    t = s.lstrip(" \t\n\v\f\r")
    k = 1 if t[:1] in ("+", "-") else 0
    while k < len(t) and "0" <= t[k] <= "9":
        k += 1
    if k == 0 or not t[:k].lstrip("+-"):
        raise TaskError(f"invalid gold ending index <{s}> (std::stoi)")
    v = int(t[:k])
    if not -2 ** 31 <= v < 2 ** 31:
        raise TaskError(f"gold ending index <{s}> out of range (std::stoi)")
    return v


@dataclass
class HsTask(_Task):
    context: str = ""
    gold: int = 0
    endings: list = field(default_factory=list)


def hellaswag_lines(text: str) -> list[str]:
    lines = split_lines(text)
    if len(lines) % 6:
        raise TaskError("hellaswag_score : number of lines in prompt not a multiple of 6.")
    return lines


def hellaswag_select(lines: list[str], n_tasks: int, tokenize: Callable) -> list[HsTask]:
    """Pick min(n_tasks, available) tasks at random (each drawn from those left), tokenized as
    context + " " + ending with the special tokens."""
    lines = list(lines)
    count = min(n_tasks, len(lines) // 6)
    rng = MT19937(1)
    out = []
    for _ in range(count):
        idx = uniform_index(rng, len(lines) // 6)
        ctx_line = lines[idx * 6]
        gold = stoi(lines[idx * 6 + 1])
        endings = lines[idx * 6 + 2:idx * 6 + 6]
        seqs = [list(tokenize(ctx_line + " " + e)) for e in endings]
        out.append(HsTask(seqs, _common_prefix(seqs, len(seqs[0])), context=ctx_line,
                          gold=gold if gold >= 0 else -1, endings=endings))
        del lines[idx * 6:idx * 6 + 6]
    return out


@dataclass
class HsResult:
    index: int          # 1-based task count
    acc_norm: float     # running accuracy (fraction)
    lo: float           # Wilson 95% interval
    hi: float


def hellaswag_score(ctx, tasks: list[HsTask], n_batch: int) -> Iterator[HsResult]:
    """Score the tasks in order, yielding the running accuracy after each (acc_norm: the ending
    with the highest mean log-probability, double sums)."""
    n_ctx = ctx.n_ctx
    max_seq = min(4 * 32, ctx.n_seq_max)
    buf = _Logits(_n_vocab(ctx))
    acc = 0.0
    i0 = 0
    while i0 < len(tasks):
        b, i1 = _pack(tasks, i0, n_ctx, max_seq, _add_prefix_and_endings)
        if i1 == i0:
            raise TaskError(f"hellaswag_score : task {i0} does not fit in the context window "
                            f"(requires {tasks[i0].required_tokens} tokens)")
        _decode(ctx, b, n_batch, buf)
        rows, toks = _ending_pairs(tasks, i0, i1)
        logits = buf.view(max(rows + [t.i_logits for t in tasks[i0:i1]]) + 1)
        ev = token_logprobs(logits, rows, toks)
        ir = 0
        for i in range(i0, i1):
            t = tasks[i]
            first = _first_logprobs(logits, t)
            lp = []
            for s, seq in enumerate(t.seq_tokens):
                v, n = float(first[s]), 1
                for _ in range(t.common_prefix, len(seq) - 1):
                    v += float(ev[ir])
                    ir += 1
                    n += 1
                lp.append(v / n)
            best = 0
            for s in range(1, 4):
                if lp[s] > lp[best]:
                    best = s
            if best == t.gold:
                acc += 1.0
            yield HsResult(i + 1, *wilson(acc, i + 1))
        i0 = i1


def wilson(acc: float, n: int) -> tuple[float, float, float]:
    """(freq, lo, hi): the accuracy and its Wilson score interval, llama.cpp's expression order."""
    freq = acc / float(n)
    za = 1.95996398454
    z = za * za / float(n)
    cnf = z * math.sqrt(float(n) * (4.0 * freq * (1 - freq) + z)) / (za + za)
    return freq, (freq + z * 0.5 - cnf) / (1.0 + z), (freq + z * 0.5 + cnf) / (1.0 + z)


# ---- Winogrande -----------------------------------------------------------------------------
@dataclass
class WgTask(_Task):
    first: str = ""
    second: str = ""
    choices: tuple = ("", "")
    answer: int = 0
    n_base: tuple = (0, 0)      # tokens of first + choice (n_base1, n_base2)


def winogrande_rows(text: str) -> tuple[list[tuple], list[str]]:
    """load_winogrande_from_csv: -> ([(first, second, choice1, choice2, answer)], [messages for
    skipped lines, llama.cpp's words])."""
    out, errors = [], []
    for line in text.split("\n")[:-1]:     # getline until it hits the end (eof: not read)
        commas, quote = [], False
        for i, ch in enumerate(line):
            if not quote:
                if ch == ",":
                    commas.append(i)
                    if len(commas) == 4:
                        break
                elif ch == '"':
                    quote = True
            elif ch == '"':
                quote = False
        if len(commas) != 4:
            errors.append(f"load_winogrande_from_csv: failed to find comma separators in <{line}>")
            continue
        c0, c1, c2, c3 = commas
        sentence = (line[c0 + 2:c0 + 2 + (c1 - c0 - 3)] if line[c0 + 1] == '"'
                    else line[c0 + 1:c1])
        choice1, choice2, answer = line[c1 + 1:c2], line[c2 + 1:c3], line[c3 + 1:]
        where = sentence.find("_")
        if where < 0:
            errors.append(f"load_winogrande_from_csv: no _ in <{sentence}>")
            continue
        a = _istream_int(answer)
        if a is None or a < 1 or a > 2:
            errors.append(f"load_winogrande_from_csv: failed to parse answer <{answer}>")
            continue
        out.append((sentence[:where], sentence[where + 1:], choice1, choice2, a))
    return out, errors


def _istream_int(s: str):
    """`std::istringstream(s) >> int`: whitespace, sign, digits; None when that fails."""
    t = s.lstrip(" \t\n\v\f\r")
    k = 1 if t[:1] in ("+", "-") else 0
    d = k
    while d < len(t) and "0" <= t[d] <= "9":
        d += 1
    if d == k:
        return None
    v = int(t[:d])
    return v if -2 ** 31 <= v < 2 ** 31 else None


def winogrande_select(rows: list[tuple], n_tasks: int) -> list[tuple]:
    """All rows, or n_tasks of them picked at random (0 or >= len: all, in order)."""
    if not (0 < n_tasks < len(rows)):
        return list(rows)
    rng = MT19937(1)
    aux = list(range(len(rows)))
    out = []
    for _ in range(n_tasks):
        j = scaled_index(rng, len(aux))
        out.append(rows[aux[j]])
        aux[j] = aux[-1]
        aux.pop()
    return out


def winogrande_tasks(rows: list[tuple], tokenize: Callable) -> list[WgTask]:
    out = []
    for first, second, c1, c2, answer in rows:
        seqs = [list(tokenize(first + c1 + second)), list(tokenize(first + c2 + second))]
        out.append(WgTask(seqs, _common_prefix(seqs, len(seqs[0])), first=first, second=second,
                          choices=(c1, c2), answer=answer,
                          n_base=(len(tokenize(first + c1)), len(tokenize(first + c2)))))
    return out


def _add_winogrande(b: _Batch, t: _Task, s0: int) -> int:
    for i in range(t.common_prefix):
        b.add(t.seq_tokens[0][i], i, (s0, s0 + 1), False)
    b.set_last_output()
    n = 1
    for s in range(2):
        for i in range(t.common_prefix, len(t.seq_tokens[s])):
            b.add(t.seq_tokens[s][i], i, s0 + s, True)
            n += 1
    return n


def _wg_spans(t: WgTask) -> list[tuple[int, int, int, int]]:
    """Per choice (n_base, last, first logit index, n scored) as winogrande_score computes them:
    the choice word itself is skipped when both continuations have more than 3 tokens."""
    cp = t.common_prefix
    l0, l1 = len(t.seq_tokens[0]), len(t.seq_tokens[1])
    skip = l0 - cp > 3 and l1 - cp > 3
    spans = []
    for s, ln in enumerate((l0, l1)):
        nb = t.n_base[s] if skip else cp
        last = 1 if (ln - nb) % (1 << 64) > 1 else 0      # size_t arithmetic
        li = nb - cp if s == 0 else l0 - cp + nb - cp   # the second: llama.cpp's FIXME included
        if li < 0:
            raise TaskError(f"winogrande_score: the tokens of <{t.first}{t.choices[s]}> are "
                            f"shorter than the common prefix of the two sentences")
        spans.append((nb, last, li, max(0, (ln - 1 - last) - (nb - 1))))
    return spans


@dataclass
class WgResult:
    index: int
    accuracy: float     # running, percent
    score1: np.float32
    score2: np.float32
    result: int
    answer: int


def winogrande_score(ctx, tasks: list[WgTask], n_batch: int) -> Iterator[WgResult]:
    n_ctx = ctx.n_ctx
    max_seq = min(2 * 128, ctx.n_seq_max)
    buf = _Logits(_n_vocab(ctx))
    n_correct = n_done = 0
    i0 = 0
    while i0 < len(tasks):
        b, i1 = _pack(tasks, i0, n_ctx, max_seq, _add_winogrande)
        if i1 == i0:
            raise TaskError(f"winogrande_score : task {i0} does not fit in the context window "
                            f"(requires {tasks[i0].required_tokens} tokens)")
        _decode(ctx, b, n_batch, buf)
        rows, toks = [], []
        for t in tasks[i0:i1]:
            for s, (nb, last, li, n) in enumerate(_wg_spans(t)):
                seq = t.seq_tokens[s]
                for k in range(n):
                    rows.append(t.i_logits + li + k)
                    toks.append(seq[nb + k])
        logits = buf.view(max(rows + [0]) + 1)
        ev = token_logprobs(logits, rows, toks) if rows else np.zeros(0, _F32)
        ir = 0
        for i in range(i0, i1):
            t = tasks[i]
            scores = []
            for s, (nb, last, li, n) in enumerate(_wg_spans(t)):
                v = _F32(0)
                for _ in range(n):
                    v = _F32(v + ev[ir])
                    ir += 1
                den = (len(t.seq_tokens[s]) - nb - last) % (1 << 64)   # size_t arithmetic
                with np.errstate(divide="ignore", invalid="ignore"):
                    scores.append(_F32(v / _F32(den)))
            result = 1 if scores[0] > scores[1] else 2
            n_correct += result == t.answer
            n_done += 1
            yield WgResult(i + 1, 100.0 * n_correct / n_done, scores[0], scores[1], result,
                           t.answer)
        i0 = i1


def winogrande_final(n_correct: int, n_done: int) -> tuple[float, float]:
    """(100 p, sigma) in float as the final line computes them (printed for >= 100 tasks)."""
    p = _F32(_F32(n_correct) / _F32(n_done))
    sigma = _F32(np.float64(100.0) * math.sqrt(float(_F32(p * (_F32(1) - p) / _F32(n_done - 1)))))
    return float(_F32(100) * p), float(sigma)


# ---- multiple choice ------------------------------------------------------------------------
class _Reader:
    """An istringstream over bytes: reads either succeed whole or leave it failed."""

    def __init__(self, data: bytes):
        self.data, self.pos, self.fail = data, 0, False

    def read(self, n: int) -> bytes | None:
        if self.fail or self.pos + n > len(self.data):
            self.fail = True
            return None
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def u32(self) -> int | None:
        b = self.read(4)
        return None if b is None else struct.unpack("<I", b)[0]

    def seek(self, pos: int) -> None:
        if pos > len(self.data):
            self.fail = True
        elif not self.fail:
            self.pos = pos

    def string(self) -> bytes | None:
        n = self.u32()
        return None if n is None else self.read(n)

    def answers(self):
        n = self.u32()
        if n is None or n > 100:
            return None
        answers = []
        for _ in range(n):
            a = self.string()
            if a is None:
                return None
            answers.append(a)
        raw = self.read(4 * n)
        return None if raw is None else (answers, list(struct.unpack(f"<{n}i", raw)))

    def task(self):
        q = self.string()
        if q is None:
            return None
        mc1 = self.answers()
        if mc1 is None:
            return None
        return None if self.answers() is None else (q, mc1[0], mc1[1])


@dataclass
class McTask(_Task):
    question: bytes = b""
    answers: list = field(default_factory=list)
    labels: list = field(default_factory=list)


def mc_read(data: bytes, n_tasks: int, on_count: Callable | None = None,
            on_start: Callable | None = None, on_dot: Callable | None = None):
    """-> (n_task in the file, [(question, answers, labels)]) as multiple_choice_score reads them:
    all tasks in file order (n_tasks 0 or >= n_task; on_dot() as llama.cpp prints its progress
    dots), else n_tasks picked at random through the offset table. Progress as llama.cpp logs it:
    on_count(n_task) once the count is read, on_start(n_task) once the offsets are. TaskError on
    bad data."""
    r = _Reader(data)
    n_task = r.u32()
    if n_task is None or n_task == 0:
        raise TaskError("multiple_choice_score: no tasks")
    if on_count is not None:
        on_count(n_task)
    raw = r.read(4 * n_task)
    if raw is None:
        raise TaskError("multiple_choice_score: failed to read task positions from prompt")
    if on_start is not None:
        on_start(n_task)
    offsets = struct.unpack(f"<{n_task}I", raw)
    out = []
    if n_tasks == 0 or n_tasks >= n_task:
        n_dot = max(n_task // 100, 1)
        for i in range(1, n_task + 1):
            t = r.task()
            if t is None:
                raise TaskError(f"multiple_choice_score: failed to read task {i} of {n_task}")
            out.append(t)
            if on_dot is not None and i % n_dot == 0:
                on_dot()
        return n_task, out
    rng = MT19937(1)
    aux = list(range(n_task))
    for _ in range(n_tasks):
        j = scaled_index(rng, len(aux))
        idx = aux[j]
        aux[j] = aux[-1]
        aux.pop()
        r.seek(offsets[idx])
        t = r.task()
        if t is None:
            raise TaskError(f"multiple_choice_score: failed to read task {idx} at position "
                            f"{offsets[idx]}")
        out.append(t)
    return n_task, out


def mc_prepare(raw_tasks, tokenize: Callable, on_dot: Callable | None = None) -> list[McTask]:
    """multiple_choice_prepare_one_task for each: question + " " + answer tokenized."""
    out = []
    many = len(raw_tasks) > 500      # llama.cpp's threaded path: counts the bad ones first
    n_bad = 0
    n_dot = max(len(raw_tasks) // 100, 1)
    for k, (q, answers, labels) in enumerate(raw_tasks, 1):
        why = None
        if not q or not answers:
            why = "found bad task with empty question and/or answers"
        elif not all(answers):
            why = "found empty answer"
        if why is not None:
            if not many:
                raise TaskError(f"multiple_choice_prepare_one_task: {why}")
            n_bad += 1
            continue
        seqs = [list(tokenize((q + b" " + a).decode("utf-8", errors="replace")))
                for a in answers]
        cp = _common_prefix(seqs, min(len(s) for s in seqs))
        out.append(McTask(seqs, cp, question=q, answers=answers, labels=labels))
        if on_dot is not None and not many and k % n_dot == 0:
            on_dot()
    if n_bad:
        raise TaskError(f"multiple_choice_score: found {n_bad} malformed tasks")
    return out


@dataclass
class McResult:
    index: int
    accuracy: float     # running, percent
    n_answers: int      # answers of this task (for the random-chance line)
    correct: bool


def mc_score(ctx, tasks: list[McTask], n_batch: int) -> Iterator[McResult]:
    n_ctx = ctx.n_ctx
    max_seq = min(4 * 32, ctx.n_seq_max)
    buf = _Logits(_n_vocab(ctx))
    n_done = n_correct = 0
    i0 = 0
    while i0 < len(tasks):
        if len(tasks[i0].seq_tokens) > max_seq and \
                tasks[i0].required_tokens <= n_ctx:
            raise TaskError(f"multiple_choice_score : task {i0} requires a higher -np|--parallel "
                            f"value (at least {len(tasks[i0].seq_tokens)})")
        b, i1 = _pack(tasks, i0, n_ctx, max_seq, _add_prefix_and_endings)
        if i1 == i0:
            raise TaskError(f"multiple_choice_score : task {i0} does not fit in the context "
                            f"window (requires {tasks[i0].required_tokens} tokens)")
        _decode(ctx, b, n_batch, buf)
        rows, toks = _ending_pairs(tasks, i0, i1)
        logits = buf.view(max(rows + [t.i_logits for t in tasks[i0:i1]]) + 1)
        ev = token_logprobs(logits, rows, toks) if rows else np.zeros(0, _F32)
        ir = 0
        for i in range(i0, i1):
            t = tasks[i]
            first = _first_logprobs(logits, t)
            lps = []
            for s, seq in enumerate(t.seq_tokens):
                v, n = first[s], 1
                for _ in range(t.common_prefix, len(seq) - 1):
                    n += 1
                    v = _F32(v + ev[ir])
                    ir += 1
                lps.append(_F32(v / _F32(n)))
            best = 0
            for s in range(1, len(lps)):
                if lps[s] > lps[best]:
                    best = s
            ok = t.labels[best] == 1
            n_correct += ok
            n_done += 1
            yield McResult(n_done, 100.0 * n_correct / n_done, len(lps), ok)
        i0 = i1


def mc_final(n_correct: int, n_done: int, n_answers: int) -> tuple[float, float, float, float]:
    """(result, ±, random chance, ±) in percent, float arithmetic as llama.cpp's last lines."""
    def pm(p):
        sigma = _F32(math.sqrt(float(_F32(_F32(p * (_F32(1) - p)) / _F32(n_done - 1)))))
        return float(_F32(100) * p), float(_F32(100) * sigma)
    r = pm(_F32(_F32(n_correct) / _F32(n_done)))
    c = pm(_F32(_F32(n_done) / _F32(n_answers)))
    return r + c
