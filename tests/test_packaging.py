"""Packaging: the console scripts carry llama.cpp's names and run; a built wheel holds the tools
package (pyllama.tools), the CUDA sources (pyllama._cuda) and the compiled kernels."""
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ["llama-server", "llama-cli", "llama-completion", "llama-simple", "llama-speculative",
           "llama-speculative-simple", "llama-bench", "llama-perplexity", "llama-tokenize",
           "llama-lookup", "llama-lookup-create", "llama-lookup-stats"]


def _script(name):
    here = os.path.join(os.path.dirname(sys.executable), name)
    return here if os.path.exists(here) else shutil.which(name)


@pytest.mark.parametrize("name", SCRIPTS)
def test_console_script_runs(name):
    path = _script(name)
    if path is None:
        pytest.skip("pyllama is not pip-installed in this environment")
    r = subprocess.run([path, "--version"], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    assert b"version" in (r.stdout + r.stderr)


def test_import_needs_no_gpu_stack():
    code = ("import sys; sys.modules['pycuda'] = None\n"
            "import pyllama, pyllama.backend, pyllama.model, pyllama.context\n"
            "assert 'pycuda.driver' not in sys.modules\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")


@pytest.mark.slow
def test_wheel_contents(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path), ROOT], capture_output=True, timeout=1800)
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-3000:]
    wheel = next(p for p in os.listdir(tmp_path) if p.endswith(".whl"))
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    assert "pyllama/tools/completion.py" in names
    assert any(n.startswith("pyllama/_cuda/") and n.endswith(".cu") for n in names)
    assert any(n.startswith("pyllama/backend/cpu/_matmul") and n.endswith(".so") for n in names)
    ep = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(tmp_path / wheel).read(ep).decode()
    for s in SCRIPTS:
        assert f"{s} = " in text
