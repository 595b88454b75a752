import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from tiny import tiny_path  # noqa: E402


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tiny-models"))


@pytest.fixture(scope="session")
def tiny_model_path(tiny_dir):
    """tiny_model_path(arch='llama', seed=0, overrides=None, all_f32=False) -> path of a GGUF."""
    def make(arch: str = "llama", **kw) -> str:
        return tiny_path(tiny_dir, arch, **kw)
    return make


def real_model_path(alias: str) -> str:
    """Path of a bundled model, or skip the test when its packages are not installed."""
    from pyllama.errors import PyllamaError
    from pyllama.models import resolve
    try:
        return resolve(alias, progress=False)
    except PyllamaError as e:
        pytest.skip(f"bundled model {alias} unavailable: {e}")


@pytest.fixture(scope="session")
def gemma_path():
    return real_model_path("gemma-3-270m")


@pytest.fixture(scope="session")
def qwen_path():
    return real_model_path("qwen2.5-coder-0.5b")
