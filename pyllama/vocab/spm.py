"""llama.cpp's SPM merge loop in Python (llm_tokenizer_spm_session), and the BPE merge list
that makes a `tokenizers` BPE model reproduce it.

SPM repeatedly merges the adjacent pair of symbols whose concatenation is the vocab entry with
the highest score (ties: leftmost). A symbol that is formed in any text is formed exactly as
when its own text is tokenized alone (no pair crossing its span can have won), so each token
needs one merge: the last merge of SPM on its own text. Ranked by score, those merges make a
plain BPE model produce SPM's ids (build.spm_merge_ids). Extra merges of other splits are
harmless: SPM never picks them, so neither does the BPE model.
"""
from __future__ import annotations

import heapq


def merge_symbols(text: str, score: dict[str, float]) -> tuple[list[str], tuple[str, str] | None]:
    """SPM on `text` (characters as the initial symbols): (final symbols, last merge done)."""
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


def last_split(text: str, score: dict[str, float]) -> int | None:
    """Where SPM on `text` alone makes its last merge (the length of the left part), or None
    when it does not end in one symbol. Same choice rule as merge_symbols (best score, then
    leftmost), by rescanning: faster for the short strings vocab entries are."""
    syms = list(text)
    while len(syms) > 2:
        best, at = None, -1
        for i in range(len(syms) - 1):
            sc = score.get(syms[i] + syms[i + 1])
            if sc is not None and (best is None or sc > best):
                best, at = sc, i
        if at < 0:
            return None
        syms[at:at + 2] = [syms[at] + syms[at + 1]]
    return len(syms[0]) if len(syms) == 2 else None
