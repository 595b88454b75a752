"""Router mode's --models-dir scan (common/preset.cpp load_from_models_dir: files and
subdirectories, shards, mmproj and draft sidecars) and the GET /models/sse status stream
(server-models.cpp notify_sse), on the tiny model."""
import json
import os
import threading
import time

import httpx

from server_proc import ServerProc


def test_models_dir_subdirectories_and_sse(tiny_llama, tmp_path):
    os.symlink(tiny_llama, tmp_path / "flat.gguf")
    os.symlink(tiny_llama, tmp_path / "mmproj-flat.gguf")      # a sidecar: not a model
    os.symlink(tiny_llama, tmp_path / "mtp-flat.gguf")         # a draft sidecar: not a model
    (tmp_path / "sub").mkdir()
    os.symlink(tiny_llama, tmp_path / "sub" / "weights.gguf")
    (tmp_path / "sharded").mkdir()
    for i in (1, 2):
        os.symlink(tiny_llama, tmp_path / "sharded" / f"m-0000{i}-of-00002.gguf")
    (tmp_path / "sharded" / "mmproj-m.gguf").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    s = ServerProc(["--models-dir", str(tmp_path), "-c", "256", "-np", "1", "-t", "1"]
                   ).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=120) as c:
            data = {m["id"]: m["status"] for m in c.get("/models").json()["data"]}
            assert sorted(data) == ["flat", "sharded", "sub"]
            assert data["sub"]["args"][0] == str(tmp_path / "sub" / "weights.gguf")
            assert data["sharded"]["args"][0] == str(tmp_path / "sharded" / "m-00001-of-00002.gguf")

            events, opened = [], threading.Event()

            def listen():
                with httpx.Client(base_url=s.url, timeout=120) as lc:
                    with lc.stream("GET", "/models/sse") as r:
                        assert r.headers["content-type"].startswith("text/event-stream")
                        opened.set()
                        for ln in r.iter_lines():
                            if ln.startswith("data: "):
                                events.append(json.loads(ln[6:]))
                                if events[-1]["data"].get("status") == "unloaded":
                                    return
            t = threading.Thread(target=listen, daemon=True)
            t.start()
            assert opened.wait(30)
            time.sleep(0.2)
            assert c.post("/models/load", json={"model": "sub"}).json() == {"success": True}
            r = c.post("/completion", json={"model": "sub", "prompt": "hi", "n_predict": 2})
            assert r.status_code == 200, r.text
            assert c.post("/models/unload", json={"model": "sub"}).json() == {"success": True}
            t.join(60)
            assert events == [
                {"model": "sub", "event": "model_status", "data": {"status": "loading"}},
                {"model": "sub", "event": "status_change", "data": {"status": "loaded"}},
                {"model": "sub", "event": "status_change",
                 "data": {"status": "unloaded", "exit_code": 0}}]
    finally:
        assert s.stop() == 0, s.output()
