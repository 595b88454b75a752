"""Router mode: `llama-server` without -m plus --models-dir (llama.cpp 0c1e570
tools/server/server-models.cpp): one front process, each model in its own llama-server child
process on a loopback port, requests routed by their `model` field (GET: `?model=`).

GET /models (/v1/models) lists the models of --models-dir (`<name>.gguf` -> `name`) with
`status.value` unloaded | loading | loaded (+ `failed`, `exit_code` after a crash);
POST /models/load and /models/unload {"model": name}. With --models-autoload (default) a
request for a model not running starts it; past --models-max running models the least
recently used one is unloaded. A child that exits on its own is reported (`failed`, its exit
code, one log line) and started again by the next request for it; the router keeps running.
Not here yet: --models-preset (INI), the /models SSE feed, downloads.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..log import get_logger
from .schemas import ServerError

log = get_logger("server")
_JSON = "application/json; charset=utf-8"
_HOP = {"content-length", "transfer-encoding", "connection", "keep-alive", "server", "date"}


def _json(obj, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type=_JSON)


def _err(code: int, message: str) -> Response:
    return _json(ServerError(code, message).body(), code)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Child:
    def __init__(self, name: str, path: str):
        self.name, self.path = name, path
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.status = "unloaded"
        self.exit_code: int | None = None
        self.last_used = 0.0
        self.stopping = False

    @property
    def running(self) -> bool:
        return self.status in ("loading", "loaded")


class Router:
    def __init__(self, models_dir: str, models_max: int, autoload: bool, child_args: list[str]):
        self.models_max, self.autoload, self.child_args = models_max, autoload, child_args
        self.children: dict[str, Child] = {}
        for f in sorted(os.listdir(models_dir)):
            if f.endswith(".gguf"):
                name = f[:-len(".gguf")]
                self.children[name] = Child(name, os.path.join(models_dir, f))
        self.lock = asyncio.Lock()
        self.http = httpx.AsyncClient(timeout=None)

    # -- children ----------------------------------------------------------------------------
    def _spawn(self, c: Child) -> None:
        c.port, c.status, c.exit_code, c.stopping = _free_port(), "loading", None, False
        c.last_used = time.monotonic()
        log.info(f"srv  load: spawning instance name={c.name} on port {c.port}")
        c.proc = subprocess.Popen(
            [sys.executable, "-m", "pyllama", "server", "-m", c.path, "--host", "127.0.0.1",
             "--port", str(c.port), *self.child_args])

    def _stop(self, c: Child) -> None:
        if c.proc is not None and c.proc.poll() is None:
            c.stopping = True
            c.proc.send_signal(signal.SIGTERM)
            try:
                c.proc.wait(30)
            except subprocess.TimeoutExpired:
                c.proc.kill()
                c.proc.wait()
        c.proc, c.status = None, "unloaded"

    def check(self) -> None:
        """Children that exited on their own: reported failed (llama.cpp's on_child_exit)."""
        for c in self.children.values():
            if c.proc is not None and not c.stopping and c.proc.poll() is not None:
                c.exit_code = c.proc.returncode
                log.warning(f"srv  router: instance name={c.name} exited with status "
                            f"{c.exit_code}")
                c.proc, c.status = None, "failed"

    async def load(self, c: Child) -> None:
        running = [x for x in self.children.values() if x.running and x is not c]
        while self.models_max > 0 and len(running) >= self.models_max:
            lru = min(running, key=lambda x: x.last_used)
            log.info(f"srv  load: models_max reached, unloading name={lru.name}")
            await asyncio.to_thread(self._stop, lru)
            running.remove(lru)
        self._spawn(c)

    async def ready(self, c: Child, timeout: float = 600.0) -> None:
        t0 = time.monotonic()
        while True:
            self.check()
            if c.status == "failed":
                raise ServerError(500, f"model '{c.name}' failed to load "
                                       f"(exit code {c.exit_code})")
            if c.status == "unloaded":
                raise ServerError(503, f"model '{c.name}' was unloaded")
            try:
                r = await self.http.get(f"http://127.0.0.1:{c.port}/health", timeout=2)
                if r.status_code == 200:
                    c.status = "loaded"
                    return
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > timeout:
                raise ServerError(503, f"model '{c.name}' is still loading")
            await asyncio.sleep(0.1)

    # -- routes ------------------------------------------------------------------------------
    async def models(self, request: Request):
        self.check()
        data = []
        for c in self.children.values():
            status = {"value": c.status, "args": [c.path, *self.child_args]}
            if c.status == "failed":
                status.update(exit_code=c.exit_code, failed=True)
            data.append({"id": c.name, "aliases": [], "tags": [], "object": "model",
                         "owned_by": "llamacpp", "created": int(time.time()),
                         "status": status, "source": "models_dir", "can_remove": False})
        return _json({"data": data, "object": "list"})

    async def _named(self, request: Request) -> Child | Response:
        try:
            body = msgspec.json.decode(await request.body())
        except msgspec.DecodeError:
            body = {}
        c = self.children.get(body.get("model", "") if isinstance(body, dict) else "")
        return c if c is not None else _err(404, "model is not found")

    async def load_route(self, request: Request):
        c = await self._named(request)
        if isinstance(c, Response):
            return c
        async with self.lock:
            self.check()
            if c.running:
                return _err(400, "model is already running")
            await self.load(c)
        return _json({"success": True})

    async def unload_route(self, request: Request):
        c = await self._named(request)
        if isinstance(c, Response):
            return c
        async with self.lock:
            self.check()
            if not c.running:
                return _err(400, "model is not running")
            await asyncio.to_thread(self._stop, c)
        return _json({"success": True})

    async def health(self, request: Request):
        return _json({"status": "ok"})

    async def proxy(self, request: Request):
        raw = await request.body()
        name = request.query_params.get("model", "")
        if request.method == "POST":
            try:
                body = msgspec.json.decode(raw)
            except msgspec.DecodeError:
                body = None
            name = body.get("model", "") if isinstance(body, dict) else ""
        if not name:
            return _err(400, "model name is missing from the request")
        c = self.children.get(name)
        if c is None:
            return _err(400, f"model '{name}' not found")
        try:
            async with self.lock:
                self.check()
                if not c.running:
                    if not self.autoload:
                        return _err(400, "model is not loaded")
                    await self.load(c)
            await self.ready(c)
        except ServerError as e:
            return _json(e.body(), e.code)
        c.last_used = time.monotonic()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP
                   and k.lower() != "host"}
        req = self.http.build_request(request.method, f"http://127.0.0.1:{c.port}"
                                      f"{request.url.path}", params=request.query_params,
                                      content=raw, headers=headers)
        try:
            up = await self.http.send(req, stream=True)
        except httpx.HTTPError as e:
            return _err(500, f"model '{name}' is not reachable: {e}")

        async def body_iter():
            try:
                async for chunk in up.aiter_raw():
                    yield chunk
            except httpx.HTTPError:
                pass
            finally:
                await up.aclose()
        out = {k: v for k, v in up.headers.items() if k.lower() not in _HOP}
        return StreamingResponse(body_iter(), status_code=up.status_code, headers=out)

    def shutdown(self) -> None:
        for c in self.children.values():
            self._stop(c)


def create_router_app(router: Router) -> Starlette:
    any_method = ["GET", "POST", "DELETE", "PUT"]
    return Starlette(routes=[
        Route("/health", router.health, methods=["GET"]),
        Route("/v1/health", router.health, methods=["GET"]),
        Route("/models", router.models, methods=["GET"]),
        Route("/v1/models", router.models, methods=["GET"]),
        Route("/models/load", router.load_route, methods=["POST"]),
        Route("/models/unload", router.unload_route, methods=["POST"]),
        Route("/{path:path}", router.proxy, methods=any_method)])


def serve_router(host: str, port: int, models_dir: str, models_max: int, autoload: bool,
                 child_args: list[str]) -> int:
    import uvicorn

    from . import _quiet_signals
    if not os.path.isdir(models_dir):
        raise SystemExit(f"error: --models-dir {models_dir!r} is not a directory")
    router = Router(models_dir, models_max, autoload, child_args)
    log.info(f"srv  router: {len(router.children)} model(s) in {models_dir}")
    config = uvicorn.Config(create_router_app(router), host=host, port=port, lifespan="off",
                            log_level="warning", access_log=False, ws="none",
                            timeout_graceful_shutdown=3)
    server = uvicorn.Server(config)
    _quiet_signals()
    try:
        log.info(f"srv  llama_server: router listening on http://{host}:{port}")
        server.run()
    finally:
        router.shutdown()
    return 0 if server.started else 1


ROUTER_FLAGS_WITH_VALUE = ("--models-dir", "--models-max", "--models-preset", "--port", "--host")
ROUTER_FLAGS = ("--models-autoload", "--no-models-autoload")


def child_args(argv: list[str]) -> list[str]:
    """The router's command line less what only the router uses (children get -m, --host and
    --port of their own)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ROUTER_FLAGS_WITH_VALUE:
            skip = True
        elif a not in ROUTER_FLAGS:
            out.append(a)
    return out
