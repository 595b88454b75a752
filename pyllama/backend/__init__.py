"""Backends: `get_backend(name, n_threads)` -> a Backend ('ref', 'cpu', 'cuda').

'cuda' is imported lazily from pyllama.backend.cuda only when asked, so `import pyllama` works
without pycuda or a GPU.
"""
from __future__ import annotations

from ..errors import BackendError
from .base import OPS, ROPE_NEOX, ROPE_NORM, Backend, Weight

__all__ = ["get_backend", "Backend", "Weight", "OPS", "ROPE_NORM", "ROPE_NEOX"]


def get_backend(name: str = "cpu", n_threads: int | None = None) -> Backend:
    """The backend called `name` ('ref', 'cpu' or 'cuda') using n_threads CPU threads."""
    if name == "ref":
        from .ref import RefBackend
        return RefBackend(n_threads)
    if name == "cpu":
        from .cpu import CpuBackend
        return CpuBackend(n_threads)
    if name == "cuda":
        from . import cuda
        cls = getattr(cuda, "CudaBackend", None)
        if cls is None:
            raise BackendError("the CUDA backend is not available in this build")
        return cls(n_threads)
    raise BackendError(f"unknown backend {name!r} (expected 'ref', 'cpu' or 'cuda')")
