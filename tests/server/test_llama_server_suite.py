"""llama.cpp's own server test suite (tools/server/tests/unit of llama.cpp 0c1e570, from the
llama-cpp-python 0.3.36 source distribution) against pyllama's llama-server, the bundled Qwen in
place of the suite's downloads (bench/server_suite/pyllama_suite_patch.py).

The fast test runs a fixed subset (model-independent checks: start-up, /props, /models aliases
and tags, several --host addresses, CORS, /cors-proxy, ignore_eos, built-in tools, an MCP server,
localhost CORS with tools on): 15 tests, each its own server start, about 80 s of CPU time
(bench/results/llama_server_suite.md), so under 2 minutes on an idle 2-core machine. The slow test runs
every file issue 21 owns (bench/llama_server_suite.sh) and requires each test llama.cpp's own
server passed in the same setup (bench/results/llama_server_suite_llamacpp_passes.txt, written by
the runner with PASSES_OUT) to pass here too."""
import os
import subprocess
from pathlib import Path
import sys

import pytest

from server_proc import REPO, free_port

pytestmark = pytest.mark.realmodel
RUNNER = os.path.join(REPO, "bench", "llama_server_suite.sh")
PASSES = os.path.join(REPO, "bench", "results", "llama_server_suite_llamacpp_passes.txt")
FAST = [
    "unit/test_basic.py::test_server_start_simple",
    "unit/test_basic.py::test_server_props",
    "unit/test_basic.py::test_server_models",
    "unit/test_basic.py::test_server_model_aliases_and_tags",
    "unit/test_basic.py::test_server_multiple_addresses",
    "unit/test_security.py::test_cors_options[localhost-Access-Control-Allow-Origin-localhost]",
    "unit/test_security.py::test_cors_origins_localhost_reflects[http://[::1]:3000]",
    "unit/test_security.py::test_cors_origins_localhost_rejects[http://localhost.evil.com]",
    "unit/test_security.py::test_cors_proxy_only_forwards_explicit_proxy_headers",
    "unit/test_ignore_eos.py",
    "unit/test_tools_builtin.py::test_tools_builtin_write_then_edit_file",
    "unit/test_tools_builtin.py::test_tools_builtin_runtime_header_rejects_ssh_option_injection",
    "unit/test_mcp_servers.py::test_mcp_tool_invocation",
    "unit/test_security.py::test_cors_origins_defaults_to_localhost_with_tools_enabled",
]


def _suite_dir() -> str:
    try:
        src = subprocess.run(["bash", os.path.join(REPO, "scripts", "build_llamacpp.sh"), "src"],
                             capture_output=True, text=True, timeout=600, check=True).stdout
    except (subprocess.SubprocessError, OSError) as e:
        pytest.skip(f"llama.cpp's source distribution is not available ({e})")
    path = os.path.join(src.strip(), "vendor", "llama.cpp", "tools", "server", "tests")
    if not os.path.isdir(path):
        pytest.skip("no tools/server/tests in the llama.cpp tree")
    return path


def _env(qwen_path) -> dict:
    bindir = os.path.dirname(sys.executable)
    return {**os.environ, "SUITE_MODEL": qwen_path, "PORT": str(free_port()),
            "PYTHONPATH": os.path.join(REPO, "bench", "server_suite") + os.pathsep
            + REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
            # PYLLAMA_SERVER: another pyllama llama-server (a git worktree's: the venv's entry
            # point runs the editable install's code)
            "LLAMA_SERVER_BIN_PATH": os.environ.get("PYLLAMA_SERVER")
            or os.path.join(bindir, "llama-server")}


def test_fast_subset(qwen_path, tmp_path):
    pytest.importorskip("wget")
    pytest.importorskip("filelock")
    suite = _suite_dir()
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "pyllama_suite_patch", "-q",
                        "-p", "no:cacheprovider", *FAST], cwd=suite, env=_env(qwen_path),
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:]


@pytest.mark.slow
def test_every_llamacpp_pass_passes(qwen_path, tmp_path):
    if not os.path.exists(PASSES):
        pytest.skip("no recorded list of llama.cpp's passes")
    with open(PASSES) as f:
        wanted = [ln.strip() for ln in f if ln.strip()]
    # PYLLAMA_SUITE_OUT keeps the per-file logs and junit files (bench/results/ tables)
    out = Path(os.environ.get("PYLLAMA_SUITE_OUT") or tmp_path / "suite")
    # PYTHON: the runner's pytest must be this interpreter (the suite needs the [test] extra)
    env = {**_env(qwen_path), "OUT": str(out), "ONLY": "pyllama", "PYTHON": sys.executable}
    subprocess.run(["bash", RUNNER], env=env, timeout=4 * 3600, check=False)
    sys.path.insert(0, os.path.join(REPO, "bench", "server_suite"))
    from report import outcomes
    ours = outcomes(str(out / "pyllama"))
    failed = [n for n in wanted if ours.get(n) != "pass"]
    assert not failed, f"{len(failed)} of llama.cpp's {len(wanted)} passes fail here: {failed}"


PASSES_16 = os.path.join(REPO, "bench", "results", "llama_server_suite_llamacpp_passes_16.txt")


@pytest.mark.slow
def test_issue16_llamacpp_passes_pass(qwen_path, tmp_path):
    """The tests of test_tool_call.py, test_template.py and test_compat_anthropic.py that
    llama.cpp's own llama-server passes with the bundled Qwen substituted (the stored list;
    test_tool_call.py's as SUITE_DEDUP=1 runs them, one test per distinct request) pass on
    pyllama's. pyllama's server runs with --numerics llama.cpp (LLAMA_ARG_NUMERICS): its tokens
    are then llama.cpp's, so the tool-call cases compare the servers' templates, grammars and
    parsers, not near-ties of the arithmetic (functionary-v3.2's forced call starts with "test"
    at logprob -7.30 against "a" at -7.34 in llama.cpp's arithmetic, the other way round in the
    invariant one). Only the listed tests run (bench/results/llama_server_suite.md: which ones
    and how long)."""
    pytest.importorskip("wget")
    pytest.importorskip("filelock")
    if not os.path.exists(PASSES_16):
        pytest.skip("no recorded list of llama.cpp's passes")
    suite = _suite_dir()
    with open(PASSES_16) as f:
        wanted = ["unit/" + ln.strip() for ln in f if ln.strip()]
    env = {**_env(qwen_path), "LLAMA_ARG_NUMERICS": "llama.cpp"}
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "pyllama_suite_patch", "-q",
                        "-p", "no:cacheprovider", *wanted], cwd=suite, env=env,
                       capture_output=True, text=True, timeout=4 * 3600)
    assert r.returncode == 0, r.stdout[-6000:]
