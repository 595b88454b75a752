"""Speculative decoding: drafts (draft model, n-gram lookup, self-draft) verified by the target.

Greedy speculative output equals greedy plain output token for token, with bit-identical logits
(the target's logits do not depend on the batch shape, docs/architecture.md), with or without
swa_full; seeded sampling with the target's chain reproduces plain seeded sampling (each emitted token
consumes one RNG draw from the same logits).
"""
from .compat import check_vocab_compatible
from .drafters import DraftModelDrafter, Drafter, DrafterChain, NgramDrafter, truncated_model
from .ngram import NgramMapDrafter, NgramModDrafter, NgramModPool, drafter_chain
from .policy import (POLICIES, CostAware, DraftPolicy, VerifyCost, draft_cost_ratio,
                     measure_verify_cost, with_policy)
from .loop import SpecParams, SpecStats, speculative_generate

__all__ = ["check_vocab_compatible", "Drafter", "DrafterChain", "DraftModelDrafter", "NgramDrafter",
           "NgramMapDrafter", "NgramModDrafter", "NgramModPool", "drafter_chain",
           "truncated_model", "DraftPolicy", "VerifyCost", "measure_verify_cost", "POLICIES",
           "CostAware", "draft_cost_ratio", "with_policy",
           "SpecParams", "SpecStats", "speculative_generate"]
