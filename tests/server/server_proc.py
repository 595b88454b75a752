"""A real llama-server process (`python -m pyllama server`) on loopback."""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProc:
    """One server process; `stop()` sends SIGTERM and returns the exit status."""

    def __init__(self, args: list[str], env: dict | None = None, port: int | None = None,
                 scheme: str = "http", verify=True):
        self.port = port or free_port()
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.verify = verify
        self.log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
        full_env = {**os.environ, **(env or {}),
                    "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyllama", "server", "--port", str(self.port), *args],
            stdout=self.log, stderr=subprocess.STDOUT, env=full_env, cwd=REPO)

    def output(self) -> str:
        self.log.flush()
        with open(self.log.name, encoding="utf-8", errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout: float = 90.0) -> "ServerProc":
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/health", timeout=2, verify=self.verify).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {timeout} s:\n{self.output()}")

    def stop(self, sig=signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode
