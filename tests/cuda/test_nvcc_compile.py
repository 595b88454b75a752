"""Every cuda/*.cu compiles for sm_80 and sm_90 with -Werror (needs nvcc, not a GPU)."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "nvcc_check.sh")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_every_kernel_compiles():
    r = subprocess.run(["bash", SCRIPT], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    n_cu = len([f for f in os.listdir(os.path.join(ROOT, "cuda")) if f.endswith(".cu")])
    assert r.stdout.count("ok ") == 2 * n_cu


def test_script_fails_on_a_broken_kernel(tmp_path):
    """The script must exit non-zero when a kernel does not compile (or nvcc is absent)."""
    fake = tmp_path / "repo"
    (fake / "cuda").mkdir(parents=True)
    (fake / "scripts").mkdir()
    shutil.copy(SCRIPT, fake / "scripts")
    (fake / "cuda" / "bad.cu").write_text("__global__ void k() { int unused; }\n")
    r = subprocess.run(["bash", str(fake / "scripts" / "nvcc_check.sh")], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode != 0
