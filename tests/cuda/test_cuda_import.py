"""No GPU needed: pyllama imports without pycuda; asking for 'cuda' then fails cleanly."""
import subprocess
import sys

BLOCK_PYCUDA = """
import sys
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name == "pycuda" or name.startswith("pycuda."):
            raise ImportError("pycuda blocked for this test")
sys.meta_path.insert(0, _Block())
"""


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_PYCUDA + code], capture_output=True,
                          text=True, timeout=120)


def test_import_pyllama_without_pycuda():
    r = _run("import pyllama, pyllama.backend.cuda, pyllama.synthetic\n"
             "assert 'pycuda' not in sys.modules\nprint('ok')")
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_cuda_backend_without_pycuda_is_a_backend_error():
    r = _run("from pyllama.backend import get_backend\n"
             "from pyllama.errors import BackendError\n"
             "try:\n    get_backend('cuda')\nexcept BackendError as e:\n    print(e)\n"
             "from pyllama.backend.cuda import available\nprint(available()[0])")
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.strip().splitlines()
    assert first.startswith("CUDA not available: pycuda cannot be imported")
    assert second == "False"
