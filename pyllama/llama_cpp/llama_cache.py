"""Prompt caches for `Llama.set_cache` (llama-cpp-python's llama_cpp/llama_cache.py).

A cache maps token sequences to LlamaState snapshots; lookup returns the entry sharing the
longest prefix with the key. LlamaRAMCache keeps them in memory (LRU order, oldest dropped past
capacity_bytes); LlamaDiskCache keeps one pickle file per entry under cache_dir (llama-cpp-python
uses the `diskcache` package; the behaviour is the same: a hit removes the entry, the oldest
entries go first past capacity_bytes).
"""
from __future__ import annotations

import hashlib
import os
import pickle
from abc import ABC, abstractmethod
from collections import OrderedDict
from typing import Optional, Sequence, Tuple


def _longest_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _best_key(keys, key: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
    best, best_len = None, 0
    for k in keys:
        n = _longest_prefix(k, key)
        if n > best_len:
            best, best_len = k, n
    return best


class BaseLlamaCache(ABC):
    def __init__(self, capacity_bytes: int = (2 << 30)):
        self.capacity_bytes = capacity_bytes

    @property
    @abstractmethod
    def cache_size(self) -> int:
        raise NotImplementedError

    def _find_longest_prefix_key(self, key: Tuple[int, ...]) -> Optional[Tuple[int, ...]]:
        pass

    @abstractmethod
    def __getitem__(self, key: Sequence[int]):
        raise NotImplementedError

    @abstractmethod
    def __contains__(self, key: Sequence[int]) -> bool:
        raise NotImplementedError

    @abstractmethod
    def __setitem__(self, key: Sequence[int], value) -> None:
        raise NotImplementedError


class LlamaRAMCache(BaseLlamaCache):
    def __init__(self, capacity_bytes: int = (2 << 30)):
        super().__init__(capacity_bytes)
        self.cache_state: "OrderedDict[Tuple[int, ...], object]" = OrderedDict()

    @property
    def cache_size(self) -> int:
        return sum(s.llama_state_size for s in self.cache_state.values())

    def _find_longest_prefix_key(self, key):
        return _best_key(self.cache_state.keys(), key)

    def __getitem__(self, key):
        k = self._find_longest_prefix_key(tuple(key))
        if k is None:
            raise KeyError("Key not found")
        self.cache_state.move_to_end(k)
        return self.cache_state[k]

    def __contains__(self, key) -> bool:
        return self._find_longest_prefix_key(tuple(key)) is not None

    def __setitem__(self, key, value) -> None:
        key = tuple(key)
        self.cache_state.pop(key, None)
        self.cache_state[key] = value
        while self.cache_size > self.capacity_bytes and self.cache_state:
            self.cache_state.popitem(last=False)


LlamaCache = LlamaRAMCache


class LlamaDiskCache(BaseLlamaCache):
    def __init__(self, cache_dir: str = ".cache/llama_cache", capacity_bytes: int = (2 << 30)):
        super().__init__(capacity_bytes)
        self.cache_dir = cache_dir
        os.makedirs(cache_dir, exist_ok=True)

    def _path(self, key: Tuple[int, ...]) -> str:
        h = hashlib.sha256(repr(key).encode()).hexdigest()
        return os.path.join(self.cache_dir, h + ".llamastate")

    def _entries(self) -> list[str]:
        """Entry files, oldest first."""
        names = [os.path.join(self.cache_dir, n) for n in os.listdir(self.cache_dir)
                 if n.endswith(".llamastate")]
        return sorted(names, key=lambda p: os.stat(p).st_mtime_ns)

    def _keys(self):
        for p in self._entries():
            with open(p, "rb") as f:
                yield pickle.load(f)

    @property
    def cache_size(self) -> int:
        return sum(os.path.getsize(p) for p in self._entries())

    def _find_longest_prefix_key(self, key):
        return _best_key(self._keys(), key)

    def __getitem__(self, key):
        k = self._find_longest_prefix_key(tuple(key))
        if k is None:
            raise KeyError("Key not found")
        p = self._path(k)
        with open(p, "rb") as f:
            pickle.load(f)
            value = pickle.load(f)
        os.unlink(p)          # llama-cpp-python pops the entry from its diskcache
        return value

    def __contains__(self, key) -> bool:
        return self._find_longest_prefix_key(tuple(key)) is not None

    def __setitem__(self, key, value) -> None:
        key = tuple(key)
        p = self._path(key)
        tmp = p + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(key, f)          # the key first: lookups read only that
            pickle.dump(value, f)
        os.replace(tmp, p)
        entries = self._entries()
        while entries and sum(os.path.getsize(e) for e in entries) > self.capacity_bytes:
            os.unlink(entries.pop(0))
