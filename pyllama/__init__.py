"""pyllama: a llama.cpp-compatible LLM runtime in Python.

Public API (mirrors llama.h): load_model, Model, Context, Batch; see docs/architecture.md.
`import pyllama` never needs a GPU, a driver or pycuda.
"""
from . import omp as _omp

_omp.configure()        # OpenMP wait policy, before any CPU kernel loads (pyllama/omp.py)

__version__ = "0.1.0"

from .errors import PyllamaError, GgufError, ModelError, ContextError, GrammarError  # noqa: E402
from . import models  # noqa: E402


def __getattr__(name):
    # heavy modules load on first use so that `import pyllama` stays fast
    if name in ("load_model", "Model"):
        from . import model
        return getattr(model, name)
    if name == "Context":
        from .context import Context
        return Context
    if name in ("LoraAdapter", "load_control_vectors", "AdapterError"):
        from . import adapter
        return getattr(adapter, name)
    if name == "Batch":
        from .batch import Batch
        return Batch
    if name in ("Grammar", "json_schema_to_gbnf"):
        from . import grammar
        return getattr(grammar, name)
    if name in _LLAMA_CPP_NAMES:       # llama-cpp-python's high-level API (pyllama.llama_cpp)
        from . import llama_cpp
        return getattr(llama_cpp, name)
    raise AttributeError(f"module 'pyllama' has no attribute {name!r}")


_LLAMA_CPP_NAMES = ("Llama", "LlamaGrammar", "LlamaPromptLookupDecoding", "LlamaRAMCache",
                    "LlamaDiskCache", "LlamaCache", "LlamaState")

__all__ = ["load_model", "Model", "Context", "Batch", "PyllamaError", "GgufError", "ModelError",
           "ContextError", "GrammarError", "Grammar", "LoraAdapter", "load_control_vectors",
           "AdapterError", "json_schema_to_gbnf", "models",
           "__version__", *_LLAMA_CPP_NAMES]
