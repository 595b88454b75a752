"""Write tests/data/template-caps-llamacpp.json: `chat_template_caps` from llama.cpp 0c1e570's own
llama-server /props for every chat template in its models/templates/ (stored with its source) (source distribution, see
scripts/build_llamacpp.sh src), each loaded with --chat-template-file on the small random qwen3
model of tests/data (the caps depend on the template only). tests/vocab/test_template_caps.py
compares pyllama.vocab.template_caps with these.
Run: LLAMA_SERVER=/work/llamacpp/build/bin/llama-server .venv/bin/python tests/make_template_caps_fixture.py
"""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "data", "rerank-qwen3.gguf")


def templates_dir() -> str:
    src = subprocess.check_output(["bash", os.path.join(HERE, "..", "scripts", "build_llamacpp.sh"),
                                   "src"], text=True).strip()
    return os.path.join(src, "vendor", "llama.cpp", "models", "templates")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def caps(exe: str, path: str):
    port = _port()
    proc = subprocess.Popen([exe, "-m", MODEL, "--chat-template-file", path, "-c", "256",
                             "-t", "1", "-np", "1", "--no-webui", "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            if proc.poll() is not None:
                return None       # llama.cpp refused the template
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/props", timeout=2) as r:
                    return json.load(r)["chat_template_caps"]
            except Exception:  # noqa: BLE001 - not up yet (503 while loading)
                time.sleep(0.3)
        return None
    finally:
        proc.terminate()
        proc.wait(30)


def main():
    exe = os.environ.get("LLAMA_SERVER", "/work/llamacpp/build/bin/llama-server")
    d = templates_dir()
    out = {}
    for name in sorted(os.listdir(d)):
        if name.endswith(".jinja"):
            path = os.path.join(d, name)
            with open(path, encoding="utf-8") as f:
                source = f.read()
            out[name] = {"source": source, "caps": caps(exe, path)}
            print(name, out[name]["caps"], file=sys.stderr)
    with open(os.path.join(HERE, "data", "template-caps-llamacpp.json"), "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
