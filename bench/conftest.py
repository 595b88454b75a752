"""Shared benchmark fixtures: the bundled models (skipped when their packages are missing)."""
import numpy as np
import pytest

import pyllama
from pyllama.models import resolve

MODELS = ["gemma-3-270m", "qwen2.5-coder-0.5b"]


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    try:
        return pyllama.load_model(resolve(request.param, progress=False))
    except pyllama.PyllamaError as e:
        pytest.skip(str(e))


@pytest.fixture
def tokens():
    """tokens(n) -> n fixed pseudo-random ids from the common part of both vocabularies."""
    return lambda n: np.random.default_rng(0).integers(100, 20000, n).astype(np.int32)
