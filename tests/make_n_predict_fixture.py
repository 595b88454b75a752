"""Write tests/data/n-predict-llamacpp.json: llama.cpp 0c1e570's own llama-server put through
tests/server/n_predict_cases.py (-n 8 with requests asking more, fewer or nothing; four
parallel requests in a unified 256-token cache) on the tiny llama model of tests/tiny.py.
tests/server/test_server_n_predict.py runs the same scenario against pyllama's llama-server.
Run: LLAMA_SERVER=/work/llamacpp/build/bin/llama-server python tests/make_n_predict_fixture.py
"""
import json
import os
import subprocess
import sys
import tempfile
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "server"))

from n_predict_cases import DATA, SERVER_ARGS, run_scenario  # noqa: E402
from server_proc import free_port  # noqa: E402
from tiny import tiny_path  # noqa: E402


def main():
    exe = os.environ.get("LLAMA_SERVER", "/work/llamacpp/build/bin/llama-server")
    model = tiny_path(tempfile.mkdtemp(), "llama")
    port = free_port()
    proc = subprocess.Popen([exe, "-m", model, *SERVER_ARGS, "--no-webui", "--port", str(port)],
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
            if time.monotonic() - t0 > 120 or proc.poll() is not None:
                raise SystemExit("llama.cpp's llama-server did not start")
            time.sleep(0.2)
        result = run_scenario(url)
    finally:
        proc.terminate()
        proc.wait(30)
    with open(DATA, "w") as f:
        json.dump({"llama_cpp": "0c1e570", "server_args": SERVER_ARGS, **result}, f, indent=1)
        f.write("\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
