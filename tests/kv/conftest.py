import pytest

from kvsupport import gemma270m_layout


@pytest.fixture
def gemma_layout():
    return gemma270m_layout()
