"""Write tests/data/streams-llamacpp.json: llama.cpp 0c1e570's own llama-server put through the
resumable-stream scenario of tests/server/stream_cases.py (GET/DELETE /v1/stream, POST
/v1/streams/lookup, X-Conversation-Id on /completion and /v1/chat/completions) on the tiny
llama model of tests/tiny.py, with the arguments of the tests' `server` fixture. The test
(tests/server/test_server_streams.py) runs the same scenario against pyllama's llama-server.
Run: LLAMA_SERVER=/work/llamacpp/build/bin/llama-server .venv/bin/python tests/make_streams_fixture.py
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "server"))

from server_proc import free_port  # noqa: E402
from stream_cases import DATA, run_scenario  # noqa: E402
from tiny import tiny_path  # noqa: E402


def main():
    exe = os.environ.get("LLAMA_SERVER", "/work/llamacpp/build/bin/llama-server")
    model = tiny_path(tempfile.mkdtemp(), "llama")
    port = free_port()
    proc = subprocess.Popen([exe, "-m", model, "-c", "1024", "-np", "2", "-t", "1",
                             "--no-webui", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                raise SystemExit("llama-server did not start")
            time.sleep(0.2)
        steps = run_scenario(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    with open(DATA, "w") as f:
        json.dump(steps, f, indent=1)
    print(len(steps), "steps ->", DATA)


if __name__ == "__main__":
    main()
