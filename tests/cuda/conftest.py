import numpy as np
import pytest


@pytest.fixture(scope="session")
def cuda():
    """The CudaBackend, or skip (no pycuda / driver / GPU)."""
    from pyllama.backend.cuda import CudaBackend, available
    ok, why = available()
    if not ok:
        pytest.skip(why)
    return CudaBackend()


@pytest.fixture(scope="session")
def ref():
    from pyllama.backend import get_backend
    return get_backend("ref")


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)
