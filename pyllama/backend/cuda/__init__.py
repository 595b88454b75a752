"""The CUDA backend (PyCUDA + kernels in cuda/*.cu); see docs/cuda.md.

Importing this package needs no pycuda, driver or GPU: pycuda is imported when a CudaBackend is
made. `CudaBackend()` raises BackendError("CUDA not available: <reason>") without pycuda, driver
or device. `available()` answers the same question without raising.
"""
from __future__ import annotations

from ...errors import BackendError
from .backend import CudaBackend
from .runtime import DevArray, probe

__all__ = ["CudaBackend", "DevArray", "available", "probe"]


def available() -> tuple[bool, str]:
    """(True, device name) when a CUDA device can be used, else (False, reason)."""
    try:
        drv = probe()
        return True, drv.Device(0).name()
    except BackendError as e:
        return False, str(e)
