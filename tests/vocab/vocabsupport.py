"""Helpers shared by the tests in this folder (importable by a unique name; pytest loads
every folder's conftest.py as the same module name `conftest`)."""
import heapq
import json
import os

import pytest

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")


def load_data(name: str):
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return json.load(f)


def merge_symbols(text: str, score: dict[str, float]) -> tuple[list[str], tuple[str, str] | None]:
    """llama.cpp's SPM merge loop (llm_tokenizer_spm_session) in plain Python, the oracle for
    pyllama/vocab/_merge.pyx: repeatedly merge the adjacent pair whose concatenation is the
    vocab entry with the best score (ties: leftmost); characters are the initial symbols.
    Returns (final symbols, last merge done)."""
    sym = list(text)
    n = len(sym)
    nxt = list(range(1, n + 1))
    nxt[-1:] = [-1] if n else []
    prv = list(range(-1, n - 1))
    heap: list[tuple[float, int, int, str]] = []

    def push(left: int, right: int) -> None:
        if left < 0 or right < 0:
            return
        cat = sym[left] + sym[right]
        s = score.get(cat)
        if s is not None:
            heapq.heappush(heap, (-s, left, len(cat), cat))

    for i in range(1, n):
        push(i - 1, i)
    last = None
    while heap:
        _, left, size, cat = heapq.heappop(heap)
        right = nxt[left]
        if right < 0 or not sym[left] or sym[left] + sym[right] != cat:
            continue
        last = (sym[left], sym[right])
        sym[left], sym[right] = cat, ""
        nxt[left] = nxt[right]
        if nxt[right] >= 0:
            prv[nxt[right]] = left
        push(prv[left], left)
        push(left, nxt[left])
    return [s for s in sym if s], last


def bpe_merge(word, ranks):
    """llama.cpp's llm_tokenizer_bpe_session merge loop on one pre-tokenized word."""
    sym = list(word)
    while len(sym) > 1:
        best = min(((ranks.get((sym[i], sym[i + 1]), 1 << 30), i) for i in range(len(sym) - 1)))
        if best[0] == 1 << 30:
            break
        i = best[1]
        sym[i:i + 2] = [sym[i] + sym[i + 1]]
    return sym
