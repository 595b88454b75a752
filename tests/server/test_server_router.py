"""Router mode (pyllama/server/router.py, llama.cpp's server-models.cpp): llama-server without
-m plus --models-dir; the two bundled models loaded by request, LRU unload past --models-max 1,
a killed child reported and restarted while the router keeps serving."""
import os
import signal
import time

import httpx
import pytest

from server_proc import ServerProc

pytestmark = pytest.mark.realmodel


def _status(c: httpx.Client) -> dict:
    return {m["id"]: m["status"] for m in c.get("/models").json()["data"]}


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(x) for x in f.read().split()]


def _chat(c: httpx.Client, model: str) -> httpx.Response:
    return c.post("/v1/chat/completions", json={
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4,
        "temperature": 0})


def test_router_two_models_lru_and_crash(gemma_path, qwen_path, tmp_path):
    os.symlink(gemma_path, tmp_path / "gemma.gguf")
    os.symlink(qwen_path, tmp_path / "qwen.gguf")
    s = ServerProc(["--models-dir", str(tmp_path), "--models-max", "1", "-c", "512", "-np", "1"]
                   ).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=300) as c:
            assert {k: v["value"] for k, v in _status(c).items()} == {
                "gemma": "unloaded", "qwen": "unloaded"}
            r = _chat(c, "gemma")
            assert r.status_code == 200, r.text
            assert _status(c)["gemma"]["value"] == "loaded"
            r = _chat(c, "qwen")          # autoload; --models-max 1 unloads gemma (LRU)
            assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"]
            st = _status(c)
            assert st["qwen"]["value"] == "loaded" and st["gemma"]["value"] == "unloaded"
            assert _chat(c, "nope").json()["error"]["message"] == "model 'nope' not found"
            assert c.post("/models/load", json={"model": "qwen"}).json()["error"][
                "message"] == "model is already running"
            (child,) = _children(s.proc.pid)
            os.kill(child, signal.SIGKILL)
            t0 = time.monotonic()
            while not _status(c)["qwen"].get("failed"):     # llama.cpp: unloaded + failed
                assert time.monotonic() - t0 < 30
                time.sleep(0.1)
            st = _status(c)["qwen"]
            assert st["value"] == "unloaded" and st["exit_code"] == -signal.SIGKILL
            assert c.get("/health").json() == {"status": "ok"}     # the router lives on
            r = _chat(c, "qwen")                                   # and restarts the child
            assert r.status_code == 200, r.text
            assert _status(c)["qwen"]["value"] == "loaded"
            assert c.post("/models/unload", json={"model": "qwen"}).json() == {"success": True}
            assert _status(c)["qwen"]["value"] == "unloaded"
    finally:
        assert s.stop() == 0, s.output()
    assert "exited with status" in s.output()


def test_router_models_preset(gemma_path, tmp_path):
    """--models-preset INI (llama.cpp's format): [*] for all, a section per model, the command
    line over both, load-on-startup."""
    ini = tmp_path / "models.ini"
    ini.write_text(f"""version = 1
; every model
[*]
c = 1024
np = 1

[small]
model = {gemma_path}
c = 512
load-on-startup = true

[wide]
model = {gemma_path}
LLAMA_ARG_CTX_SIZE = 768
""")
    s = ServerProc(["--models-preset", str(ini), "--models-max", "2", "-b", "256"]).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=300) as c:
            t0 = time.monotonic()
            while _status(c)["small"]["value"] != "loaded":     # loaded without a request
                assert not _status(c)["small"].get("failed"), s.output()
                assert time.monotonic() - t0 < 120, s.output()
                time.sleep(0.2)
            assert _status(c)["wide"]["value"] == "unloaded"
            props = c.get("/props", params={"model": "small"}).json()
            assert props["default_generation_settings"]["n_ctx"] == 512     # section over [*]
            assert "-b" in _status(c)["small"]["args"]
            props = c.get("/props", params={"model": "wide"}).json()    # autoloaded by GET
            # [*]'s `c = 1024` is a command-line flag: it wins over the section's env name
            assert props["default_generation_settings"]["n_ctx"] == 1024
    finally:
        assert s.stop() == 0, s.output()
