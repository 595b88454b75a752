#!/usr/bin/env python3
"""Record llama.cpp's answers to the /tools cases of tests/server/tools_builtin_cases.py into
tests/data/llamacpp_tools_builtin.json (used by tests/server/test_tools_builtin.py).

    python scripts/record_llamacpp_tools.py --server /work/llamacpp/build/bin/llama-server \\
        --model $(python -c "from pyllama import models; print(models.resolve('qwen2.5-coder-0.5b'))")

The server runs with `--tools all -c 256 -np 1`; each case gets a fresh copy of the case tree in
a temporary directory, whose path is replaced by {ROOT} in the answers. Pass --out to write
elsewhere (e.g. to record pyllama's own server with --server .venv/bin/llama-server)."""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "server"))
from tools_builtin_cases import CASES, make_tree, normalize, substitute  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict, headers: dict):
    data = json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode("utf-8", "replace"), r.headers.get("Content-Type")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace"), e.headers.get("Content-Type")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "data",
                                                  "llamacpp_tools_builtin.json"))
    a = ap.parse_args()
    port = _port()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([a.server, "-m", a.model, "--port", str(port), "--tools", "all",
                             "-c", "256", "-np", "1", "--no-warmup"], stdout=log,
                            stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        with urllib.request.urlopen(base + "/tools") as r:
            listing = json.loads(r.read())
        out = {"server": os.path.basename(a.server), "tools": listing, "cases": {}}
        for name, body, headers, readback in CASES:
            root = tempfile.mkdtemp(prefix="tools-case-")
            try:
                make_tree(root)
                status, text, ctype = _post(base + "/tools", substitute(body, root),
                                            substitute(headers, root))
                try:
                    answer = json.loads(text)
                except json.JSONDecodeError:
                    answer = text
                files = {}
                for rel in readback:
                    p = os.path.join(root, rel)
                    files[rel] = open(p, encoding="utf-8").read() if os.path.exists(p) else None
                out["cases"][name] = {"status": status, "body": normalize(answer, root),
                                      "files": files}
            finally:
                shutil.rmtree(root, ignore_errors=True)
        stream_root = tempfile.mkdtemp(prefix="tools-case-")
        try:
            req = urllib.request.Request(base + "/tools", method="POST", data=json.dumps({
                "tool": "exec_shell_command", "params": {"command": "echo a; echo b"},
                "stream": True}).encode(), headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req) as r:
                out["stream"] = {"status": r.status, "content_type": r.headers.get("Content-Type"),
                                 "events": [json.loads(ln[6:]) for ln in
                                            r.read().decode().split("\n") if ln.startswith("data: ")]}
        finally:
            shutil.rmtree(stream_root, ignore_errors=True)
    finally:
        proc.terminate()
        proc.wait(30)
    with open(a.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {a.out}: {len(out['cases'])} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
