"""Record llama.cpp 0c1e570's llama-server answers for the cache-reuse and context-shift requests of
tests/server/ctx_cases.py into tests/data/server-ctx-llamacpp.json (read by
tests/server/test_server_ctx_llamacpp.py).

    python tests/make_server_ctx_fixture.py [LLAMA_SERVER]

LLAMA_SERVER defaults to /work/llamacpp/build/bin/llama-server (scripts/build_llamacpp.sh exe);
the model is the bundled qwen2.5-coder-0.5b; -t 2 -fa on. The server log lines the tests look
for (cache reuse, context shift) are kept too.
"""
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "server"))
import ctx_cases as cc  # noqa: E402

LOG_KEYS = ("reusing chunk", "slot context shift", "cache reuse is not supported",
            "cache_reuse is not supported")


def _post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=900) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def _serve(exe, model, flags, requests):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([exe, "-m", model, "-t", "2", "-fa", "on", "-v", *flags, "--port",
                             str(port), "--no-webui"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    out = {}
    try:
        for _ in range(1200):
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        for name, body in requests:
            out[name] = cc.summary(*_post(url + "/completion", body))
            print(name, {k: v for k, v in out[name].items() if k != "tokens"}, file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(60)
    with open(log.name, encoding="utf-8", errors="replace") as f:
        lines = [ln.rstrip() for ln in f if any(k in ln for k in LOG_KEYS)]
    os.unlink(log.name)
    return out, lines


def main() -> None:
    exe = sys.argv[1] if len(sys.argv) > 1 else "/work/llamacpp/build/bin/llama-server"
    import pyllama
    from pyllama import models
    model = models.resolve("qwen2.5-coder-0.5b")
    m = pyllama.load_model(model)
    p = cc.prompts(lambda t, first: m.tokenize(t, add_special=first, parse_special=False))
    fx = {"source": "llama.cpp 0c1e570 llama-server -t 2 -fa on", "model": os.path.basename(model),
          "prompts": p, "servers": {}}
    for name, flags, reqs in (("reuse", cc.REUSE_FLAGS, cc.reuse_requests(p)),
                              ("shift", cc.SHIFT_FLAGS, cc.shift_requests(p)),
                              ("noshift", cc.NOSHIFT_FLAGS, cc.noshift_requests(p))):
        answers, lines = _serve(exe, model, flags, reqs)
        fx["servers"][name] = {"flags": flags, "answers": answers, "log": lines}
    out = os.path.join(HERE, "data", "server-ctx-llamacpp.json")
    with open(out, "w") as f:
        json.dump(fx, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(out)


if __name__ == "__main__":
    main()
