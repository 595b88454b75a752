"""`python -m pyllama <tool>` dispatch and the TTY model-loading indicator."""
import os
import pty
import subprocess
import sys

from toolsupport import REPO


def test_dispatch_usage_and_unknown_tool(tool):
    r = subprocess.run([sys.executable, "-m", "pyllama"], capture_output=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": REPO})
    assert r.returncode == 1 and b"usage: python -m pyllama <tool>" in r.stdout
    r = tool("frobnicate")
    assert r.returncode == 1 and "unknown tool 'frobnicate'" in r.stderr
    r = tool("llama-tokenize", "--version")      # the llama- prefix is accepted too
    assert r.returncode == 0 and r.stderr.startswith("version: ")


def test_loading_spinner_only_on_a_tty(tool, tiny_model_path):
    path = tiny_model_path("llama")
    args = [sys.executable, "-m", "pyllama", "completion", "-m", path, "-p", "x", "-n", "1",
            "-no-cnv", "--log-disable"]
    env = {**os.environ, "PYTHONPATH": REPO}
    master, slave = pty.openpty()
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=slave, cwd=REPO, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert p.wait(timeout=120) == 0
    assert b"Loading model... " in b"".join(chunks)
    r = tool("completion", "-m", path, "-p", "x", "-n", "1", "-no-cnv", "--log-disable")
    assert r.returncode == 0 and "Loading model" not in r.stderr


def test_list_devices_and_cache_list(tool):
    r = tool("completion", "--list-devices")
    assert r.returncode == 0 and r.stdout.startswith(b"Available devices:\n  ")
    r = tool("tokenize", "-cl")
    assert r.returncode == 0 and r.stdout
