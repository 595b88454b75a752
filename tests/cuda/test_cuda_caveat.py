"""No GPU needed: the CUDA backend, never run on a GPU, says so once on first use, the README says
so, and a partial -ngl is refused with one line instead of silently offloading every layer."""
import logging
import os

import pytest

from pyllama.errors import BackendError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_first_cuda_backend_warns_once(monkeypatch, caplog):
    from pyllama.backend.cuda import backend
    monkeypatch.setattr(backend, "get_device", lambda device: object())   # no GPU here
    monkeypatch.setattr(backend, "_WARNED", [])
    with caplog.at_level(logging.WARNING, logger="pyllama"):
        backend.CudaBackend()
        backend.CudaBackend()
    lines = [r.getMessage() for r in caplog.records if "CUDA backend" in r.getMessage()]
    assert len(lines) == 1 and "never been run on a GPU" in lines[0]


def test_readme_states_the_gpu_caveat():
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    assert "has never been run on a GPU" in text and "-ngl 0" in text


@pytest.mark.parametrize("ngl,refused", [("1", True), ("2", False), ("all", False),
                                         ("auto", False), ("99", False)])
def test_partial_offload_is_refused(monkeypatch, tiny_model_path, ngl, refused):
    """The tiny llama has 2 blocks: -ngl 1 would offload one of them, which the CUDA backend
    cannot do (it used to take every layer)."""
    from pyllama.tools import _common
    from pyllama.tools._args import parse
    monkeypatch.setattr(_common, "cuda_usable", lambda: True)       # as if a GPU were there
    path = tiny_model_path("llama")
    params = parse("completion", ["-m", path, "-ngl", ngl], env={})
    if refused:
        with pytest.raises(BackendError, match="-ngl 1: offloading only some"):
            _common.pick_backend(params, path)
    else:
        assert _common.pick_backend(params, path) == "cuda"
