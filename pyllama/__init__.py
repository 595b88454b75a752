"""pyllama: a llama.cpp-compatible LLM runtime in Python.

Public API (mirrors llama.h): load_model, Model, Context, Batch; see ARCHITECTURE.md.
`import pyllama` never needs a GPU, a driver or pycuda.
"""
from . import omp as _omp

_omp.configure()        # OpenMP wait policy, before any CPU kernel loads (ARCHITECTURE decision 7)

__version__ = "0.1.0"

from .errors import PyllamaError, GgufError, ModelError, ContextError  # noqa: E402
from . import models  # noqa: E402


def __getattr__(name):
    # heavy modules load on first use so that `import pyllama` stays fast
    if name in ("load_model", "Model"):
        from . import model
        return getattr(model, name)
    if name == "Context":
        from .context import Context
        return Context
    if name == "Batch":
        from .batch import Batch
        return Batch
    if name in _LLAMA_CPP_NAMES:       # llama-cpp-python's high-level API (pyllama.llama_cpp)
        from . import llama_cpp
        return getattr(llama_cpp, name)
    raise AttributeError(f"module 'pyllama' has no attribute {name!r}")


_LLAMA_CPP_NAMES = ("Llama", "LlamaGrammar", "LlamaPromptLookupDecoding", "LlamaRAMCache",
                    "LlamaDiskCache", "LlamaCache", "LlamaState")

__all__ = ["load_model", "Model", "Context", "Batch", "PyllamaError", "GgufError", "ModelError",
           "ContextError", "models", "__version__", *_LLAMA_CPP_NAMES]
