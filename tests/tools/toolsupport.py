"""Helpers shared by the tests in this folder (importable by a unique name; pytest loads
every folder's conftest.py as the same module name `conftest`)."""
import os
import subprocess
import sys

import pytest

from pyllama.__main__ import tools_package

tools_package()

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(REPO, "tests", "data", "tools")


def run_tool(tool, *args, env=None, stdin=None, timeout=120):
    """`python -m pyllama <tool> args` → CompletedProcess (bytes stdout, text stderr)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    e.update(env or {})
    r = subprocess.run([sys.executable, "-m", "pyllama", tool, *args], env=e, cwd=REPO,
                       input=stdin, capture_output=True, timeout=timeout)
    r.stderr = r.stderr.decode("utf-8", errors="replace")
    return r


def real_model_path_or_skip(alias):
    from pyllama.errors import PyllamaError
    from pyllama.models import resolve
    try:
        return resolve(alias, progress=False)
    except PyllamaError as e:
        pytest.skip(f"bundled model {alias} unavailable: {e}")
