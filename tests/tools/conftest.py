"""Make `pyllama.tools` importable from a source checkout, and run tools as subprocesses."""
import pytest

from toolsupport import run_tool


@pytest.fixture
def tool():
    return run_tool
