"""llama-cpp-python's high-level API on pyllama: `import pyllama.llama_cpp as llama_cpp`.

Existing llama-cpp-python code runs with one import changed, or, for code (and libraries such
as LangChain's LlamaCpp) that imports `llama_cpp` itself, with one alias line first:

    import sys, pyllama.llama_cpp
    sys.modules["llama_cpp"] = pyllama.llama_cpp

After that alias `import llama_cpp.llama_chat_format` (any submodule) gives pyllama's module,
the same object as `pyllama.llama_cpp.llama_chat_format` (a finder maps the names). The
low-level ctypes bindings of llama.h (llama_cpp.llama_cpp.*) are not provided: pyllama's own
low-level API is pyllama.load_model / Context / Batch.
"""
import importlib
import importlib.abc
import importlib.util
import sys

from .llama import (  # noqa: F401
    LLAMA_DEFAULT_SEED, BaseLlamaTokenizer, Llama, LlamaState, LlamaTokenizer,
    LogitsProcessor, LogitsProcessorList, MinTokensLogitsProcessor, StoppingCriteria,
    StoppingCriteriaList)
from .llama_cache import BaseLlamaCache, LlamaCache, LlamaDiskCache, LlamaRAMCache  # noqa: F401
from .llama_grammar import LlamaGrammar  # noqa: F401
from .llama_speculative import LlamaDraftModel, LlamaPromptLookupDecoding  # noqa: F401
from . import llama_chat_format, llama_grammar, llama_cache, llama_speculative  # noqa: F401

__version__ = "0.3.36"      # the llama-cpp-python API this package follows

# ggml types for type_k / type_v, as llama_cpp exports them
GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_Q4_0, GGML_TYPE_Q8_0, GGML_TYPE_BF16 = 0, 1, 2, 8, 30
LLAMA_POOLING_TYPE_UNSPECIFIED, LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_MEAN = -1, 0, 1
LLAMA_POOLING_TYPE_CLS, LLAMA_POOLING_TYPE_LAST, LLAMA_POOLING_TYPE_RANK = 2, 3, 4
LLAMA_SPLIT_MODE_NONE, LLAMA_SPLIT_MODE_LAYER, LLAMA_SPLIT_MODE_ROW = 0, 1, 2


class _AliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """`llama_cpp.X` -> `pyllama.llama_cpp.X` while sys.modules["llama_cpp"] is this package."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("llama_cpp.") or sys.modules.get("llama_cpp") is not \
                sys.modules[__name__]:
            return None
        real = __name__ + fullname[len("llama_cpp"):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return importlib.import_module(__name__ + spec.name[len("llama_cpp"):])

    def exec_module(self, module):
        pass


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())

__all__ = ["Llama", "LlamaGrammar", "LlamaRAMCache", "LlamaDiskCache", "LlamaCache",
           "BaseLlamaCache", "LlamaState", "LlamaPromptLookupDecoding", "LlamaDraftModel",
           "LogitsProcessorList", "StoppingCriteriaList", "MinTokensLogitsProcessor",
           "LlamaTokenizer", "llama_chat_format", "LLAMA_DEFAULT_SEED"]
