"""The host-memory prompt cache of llama-server (`--cache-ram N` MiB, default 8192, 0 = off, -1 = no
limit; `--cache-idle-slots`), as llama.cpp 0c1e570 server_prompt_cache (tools/server/server-task.cpp)
and its use in server-context.cpp.

An entry is a slot's cached tokens, its SWA context checkpoints and the bytes of its sequence state
(`Context.state_seq_get`, llama.cpp's llama_state_seq_get_data). A slot picked by LRU, or by
similarity while it would lose more than half of its tokens, first saves its prompt here, then
takes the entry that keeps the most of the new prompt (the best f_keep and f_sim together, never an
entry with f_keep < 0.25): a prompt seen before is restored from RAM instead of being processed
again. With `--cache-idle-slots` (on by default when the cache is) every idle slot is saved after a
task is launched and, with a unified KV cache, cleared so that the running slots get its room.
Entries fully contained in a new one are dropped; past the size limit the oldest go first; the
token limit is the context size, raised to what fits the size limit at the average entry size.
"""
from __future__ import annotations

from ..log import get_logger

log = get_logger("server")
_MIB = 1024.0 * 1024.0


def _lcp(a: list[int], b: list[int]) -> int:
    n, lim = 0, min(len(a), len(b))
    while n < lim and a[n] == b[n]:
        n += 1
    return n


class Entry:
    __slots__ = ("tokens", "checkpoints", "data")

    def __init__(self, tokens: list[int], checkpoints: list, data: tuple):
        self.tokens, self.checkpoints, self.data = tokens, checkpoints, data

    def size(self) -> int:
        return sum(len(d) for d in self.data) + _ckpt_size(self.checkpoints)


def _ckpt_size(checkpoints) -> int:
    return sum(len(c.data) + len(c.draft or b"") for c in checkpoints)


class PromptCache:
    def __init__(self, limit_mib: int, limit_tokens: int):
        self.limit_size = 0 if limit_mib < 0 else limit_mib * 1024 * 1024   # 0 = no limit
        self.limit_tokens = limit_tokens
        self.states: list[Entry] = []       # oldest first

    def size(self) -> int:
        return sum(s.size() for s in self.states)

    def n_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.states)

    def save(self, tokens: list[int], checkpoints: list, get_state) -> bool:
        """server_slot::prompt_save + server_prompt_cache::alloc; `get_state()` returns the
        sequence's state bytes, (target, draft) (called only when the entry can be kept)."""
        if not tokens:
            return False
        for s in self.states:
            if _lcp(s.tokens, tokens) == len(tokens):
                log.debug("srv  alloc:  - prompt is already in the cache, skipping")
                return False
        data = get_state()
        new_size = sum(len(d) for d in data) + _ckpt_size(checkpoints)
        log.debug(f"srv  prompt_save:  - saving prompt with length {len(tokens)}, total state "
                  f"size = {new_size / _MIB:.3f} MiB")
        if self.limit_size > 0 and new_size > self.limit_size:
            log.warning(f"srv  alloc:  - prompt state size {new_size / _MIB:.3f} MiB exceeds "
                        f"cache size limit {self.limit_size / _MIB:.3f} MiB, skipping")
            return False
        kept = []
        for s in self.states:
            if _lcp(s.tokens, tokens) == len(s.tokens):
                log.debug(f"srv  alloc:  - removing obsolete cached prompt with length "
                          f"{len(s.tokens)}")
            else:
                kept.append(s)
        self.states = kept
        if self.limit_size > 0:
            while self.states and self.size() + new_size > self.limit_size:
                log.warning("srv  alloc:  - making room for prompt cache entry, removing oldest "
                            f"entry (size = {self.states[0].size() / _MIB:.3f} MiB)")
                self.states.pop(0)
        self.states.append(Entry(list(tokens), list(checkpoints), data))
        return True

    def load(self, tokens: list[int], new: list[int], set_state):
        """server_prompt_cache::load: the entry better than the slot's own `tokens` for the
        prompt `new`, restored with `set_state((target, draft)) -> bool`. Returns (ok, entry or None)."""
        lcp_best = _lcp(tokens, new)
        f_keep_best = lcp_best / len(tokens) if tokens else -1.0
        f_sim_best = lcp_best / max(len(new), 1)
        log.debug(f"srv  load:  - looking for better prompt, base f_keep = {f_keep_best:.3f}, "
                  f"f_sim = {f_sim_best:.3f}")
        best = None
        for s in self.states:
            lcp = _lcp(s.tokens, new)
            f_keep, f_sim = lcp / len(s.tokens), lcp / max(len(new), 1)
            if f_keep < 0.25:
                continue
            if f_keep_best < f_keep and f_sim_best < f_sim:
                f_keep_best, f_sim_best, best = f_keep, f_sim, s
        if best is None:
            return True, None
        log.debug(f"srv  load:  - found better prompt with f_keep = {f_keep_best:.3f}, f_sim = "
                  f"{f_sim_best:.3f}")
        if not set_state(best.data):
            log.error(f"srv  load: failed to restore state with size {len(best.data[0])}")
            return False, None
        self.states.remove(best)
        return True, best

    def update(self) -> None:
        if self.limit_size > 0:
            while self.states and self.size() > self.limit_size:
                log.warning("srv  update:  - cache size limit reached, removing oldest entry "
                            f"(size = {self.states[0].size() / _MIB:.3f} MiB)")
                self.states.pop(0)
        per_token = max(1.0, self.size() / max(1, self.n_tokens()))
        limit_cur = max(self.limit_tokens, int(self.limit_size / per_token)) \
            if self.limit_size > 0 else self.limit_tokens
        if self.limit_tokens > 0:
            while self.states and self.n_tokens() > limit_cur:
                log.warning(f"srv  update:  - cache token limit ({self.limit_tokens}, est: "
                            f"{limit_cur}) reached, removing oldest entry (size = "
                            f"{self.states[0].size() / _MIB:.3f} MiB)")
                self.states.pop(0)
        log.debug(f"srv  update:  - cache state: {len(self.states)} prompts, "
                  f"{self.size() / _MIB:.3f} MiB (limits: {self.limit_size / _MIB:.3f} MiB, "
                  f"{self.limit_tokens} tokens, {limit_cur} est)")
