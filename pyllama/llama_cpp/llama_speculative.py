"""Draft models for `Llama(draft_model=...)` (llama-cpp-python's llama_cpp/llama_speculative.py).

A draft model maps the token history (int32 [n]) to proposed next tokens; `Llama.generate`
evaluates them after the last sampled token in one batch and keeps the prefix its own sampler
reproduces. LlamaPromptLookupDecoding is prompt lookup: the continuation of the earliest earlier
occurrence of the history's last n-gram (n from max_ngram_size down to 1).
"""
from __future__ import annotations

import abc

import numpy as np


class LlamaDraftModel(abc.ABC):
    @abc.abstractmethod
    def __call__(self, input_ids: np.ndarray, /, **kwargs) -> np.ndarray:
        raise NotImplementedError()


class LlamaPromptLookupDecoding(LlamaDraftModel):
    def __init__(self, max_ngram_size: int = 2, num_pred_tokens: int = 10):
        self.max_ngram_size = max_ngram_size
        self.num_pred_tokens = num_pred_tokens

    @staticmethod
    def find_candidate_pred_tokens(input_ids: np.ndarray, max_ngram_size: int,
                                   num_pred_tokens: int) -> np.ndarray:
        ids = np.asarray(input_ids)
        n = ids.shape[0]
        for size in range(min(max_ngram_size, n - 1), 0, -1):
            win = np.lib.stride_tricks.sliding_window_view(ids, (size,))
            for at in np.flatnonzero((win == ids[-size:]).all(axis=1)):
                start = at + size
                end = min(start + num_pred_tokens, n)
                if start < end:
                    return ids[start:end]
        return np.array([], dtype=np.intc)

    def __call__(self, input_ids: np.ndarray, /, **kwargs) -> np.ndarray:
        return self.find_candidate_pred_tokens(input_ids, self.max_ngram_size,
                                               self.num_pred_tokens)


class PyllamaDraft(LlamaDraftModel):
    """pyllama's drafters (pyllama.speculative: NgramDrafter, DraftModelDrafter over a draft
    model's Context) as a draft_model: up to num_pred_tokens proposals for the history. A
    pyllama extension; with numerics="invariant" the verified output equals plain decoding."""

    def __init__(self, drafter, num_pred_tokens: int = 10):
        self.drafter, self.num_pred_tokens = drafter, num_pred_tokens

    def __call__(self, input_ids: np.ndarray, /, **kwargs) -> np.ndarray:
        ids = [int(t) for t in input_ids]
        return np.asarray(self.drafter.draft(ids, self.num_pred_tokens), dtype=np.intc)
