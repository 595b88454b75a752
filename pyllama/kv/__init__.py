"""KV memory: cells bookkeeping, the KV cache, the iSWA pair (LLAMACPP_INTERNALS §2-3)."""
from .cache import KVCache
from .cells import KVCells
from .iswa import STATE_SEQ_FLAGS_PARTIAL_ONLY, ISWACache, make_memory
from .layout import KVLayout
from .swa import (SWA_CHUNKED, SWA_NONE, SWA_STANDARD, SWA_SYMMETRIC, cache_sizes, ctx_geometry,
                  is_masked_swa, pad256, swa_cells)

__all__ = ["KVCache", "KVCells", "ISWACache", "KVLayout", "make_memory", "cache_sizes", "ctx_geometry",
           "is_masked_swa", "pad256", "swa_cells", "STATE_SEQ_FLAGS_PARTIAL_ONLY",
           "SWA_NONE", "SWA_STANDARD", "SWA_CHUNKED", "SWA_SYMMETRIC"]
