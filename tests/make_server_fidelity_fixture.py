"""Record llama.cpp 0c1e570's llama-server outputs (AVX2 build, -np 1 -c 4096 -fa on) for the
requests of tests/server/test_server_fidelity.py into tests/data/server-fidelity-llamacpp.json.

    python tests/make_server_fidelity_fixture.py [LLAMA_SERVER] [MODEL]

LLAMA_SERVER defaults to /work/llamacpp/build/bin/llama-server (scripts/build_llamacpp.sh exe),
MODEL to the bundled qwen2.5-coder-0.5b.
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "server"))
from test_server_fidelity import N, PROMPT, SEEDED  # noqa: E402


def _post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def main() -> None:
    exe = sys.argv[1] if len(sys.argv) > 1 else "/work/llamacpp/build/bin/llama-server"
    if len(sys.argv) > 2:
        model = sys.argv[2]
    else:
        from pyllama import models
        model = models.resolve("qwen2.5-coder-0.5b")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([exe, "-m", model, "-np", "1", "-c", "4096", "-fa", "on",
                             "--port", str(port), "--no-webui"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        greedy = _post(url + "/completion", {"prompt": PROMPT, "n_predict": 16,
                                             "temperature": 0})["content"]
        seeded = [_post(url + "/completion", {"prompt": PROMPT, "n_predict": N, **body})["content"]
                  for body, _ in SEEDED]
    finally:
        proc.terminate()
        proc.wait(30)
    out = os.path.join(HERE, "data", "server-fidelity-llamacpp.json")
    with open(out, "w") as f:
        json.dump({"source": "llama.cpp 0c1e570 llama-server -np 1 -c 4096 -fa on", "model":
                   os.path.basename(model), "prompt": PROMPT, "greedy_16": greedy,
                   "seeded": seeded}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(out)


if __name__ == "__main__":
    main()
