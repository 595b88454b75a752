"""Router mode: `llama-server` without -m plus --models-dir (llama.cpp 0c1e570
tools/server/server-models.cpp): one front process, each model in its own llama-server child
process on a loopback port, requests routed by their `model` field (GET: `?model=`).

GET /models (/v1/models) lists the models of --models-dir (`<name>.gguf` -> `name`, and each
subdirectory -> a model named after it: its first shard `*-00001-of-*` or its .gguf, with an
`*mmproj*` file as --mmproj and an `mtp-`/`dspark-`/`dflash-` file as the draft model, as
common/preset.cpp's load_from_models_dir does) with `status.value` unloaded | loading | loaded
(+ `failed: true` and `exit_code` after a crash); GET /models/sse streams the changes as
llama.cpp's router does (`data: {"model", "event": "model_status" | "status_change", "data":
{"status", "exit_code"}}`);
POST /models/load and /models/unload {"model": name}. With --models-autoload (default) a
request for a model not running starts it; past --models-max running models the least
recently used one is unloaded. A child that exits on its own is reported (`failed`, its exit
code, one log line) and started again by the next request for it; the router keeps running.
--models-preset: llama.cpp's INI presets (`[*]` for all, `[name]` per model or a new one with
`model = PATH`; keys are flag names without dashes or LLAMA_ARG_* names; `load-on-startup`,
`stop-timeout`); the router's own command line wins over the preset. Children inherit the
router's arguments and environment. Not here: the Hugging
Face cache as a source (no downloads here). A child that refuses its files (pyllama runs no
split GGUF and no multimodal projector) exits with its one error line and is reported failed.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from urllib.parse import quote

import httpx
import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from ..log import get_logger
from . import streams
from .schemas import ServerError

log = get_logger("server")
_JSON = "application/json; charset=utf-8"
STREAM_LOOKUP_TIMEOUT_S = 0.25      # router -> child budget of the stream routes (250 ms)
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
        self.args: list[str] = []          # from --models-preset ([*] then the model's section)
        self.env: dict[str, str] = {}      # LLAMA_ARG_* keys of the preset
        self.stop_timeout = 10.0
        self.load_on_startup = False
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.status = "unloaded"
        self.exit_code: int | None = None
        self.last_used = 0.0
        self.stopping = False
        self.failed = False                # exited on its own (llama.cpp's meta.is_failed())

    @property
    def running(self) -> bool:
        return self.status in ("loading", "loaded")


class Router:
    def __init__(self, models_dir: str, models_max: int, autoload: bool, child_args: list[str],
                 preset: str = ""):
        self.models_max, self.autoload, self.child_args = models_max, autoload, child_args
        self.children: dict[str, Child] = {}
        for name, path, env in scan_models_dir(models_dir) if models_dir else []:
            self.children[name] = Child(name, path)
            self.children[name].env.update(env)
        if preset:
            self._apply_preset(read_preset(preset))
        self.lock = asyncio.Lock()
        self.http = httpx.AsyncClient(timeout=None)
        self.listeners: set[asyncio.Queue] = set()       # GET /models/sse clients
        # conversation id (X-Conversation-Id of a routed POST) -> (child name, ticket): the
        # resumable stream routes go straight to the child that owns the session
        self.conv_models: dict[str, tuple[str, int]] = {}
        self._tickets = 0
        self.loop: asyncio.AbstractEventLoop | None = None

    def notify(self, event: str, name: str, data: dict | None = None) -> None:
        """server_models::notify_sse: one event to every /models/sse client (thread-safe: the
        children are stopped in worker threads)."""
        msg = {"model": name, "event": event}
        if data is not None:
            msg["data"] = data
        if self.loop is None:
            return
        for q in list(self.listeners):
            self.loop.call_soon_threadsafe(q.put_nowait, msg)

    def _apply_preset(self, sections: dict[str, dict[str, str]]) -> None:
        """llama.cpp's model presets: `[*]` for every model, `[name]` for one (a new model
        when it names none of --models-dir, then with a `model = PATH` key)."""
        glob = sections.pop("*", {})
        for name, opts in sections.items():
            if name not in self.children:
                if "model" not in opts:
                    raise SystemExit(f"error: preset [{name}] names no known model and has no "
                                     "'model' key")
                self.children[name] = Child(name, opts["model"])
        for name, c in self.children.items():
            merged = {**glob, **sections.get(name, {})}
            merged.pop("model", None)
            c.load_on_startup = merged.pop("load-on-startup", "false").lower() in _TRUE
            c.stop_timeout = float(merged.pop("stop-timeout", 10))
            merged.pop("dedup-cache-models", None)
            for key, value in merged.items():
                if key.startswith("LLAMA_ARG_") or key.startswith("LLAMA_"):
                    c.env[key] = value
                    continue
                flag = ("-" if len(key) <= 3 and "-" not in key else "--") + key
                if value.lower() in _TRUE:
                    c.args.append(flag)
                elif value.lower() in _FALSE:
                    c.args.append("--no-" + key)
                else:
                    c.args += [flag, value]

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._monitor_task = self.loop.create_task(self._monitor())
        for c in self.children.values():
            if c.load_on_startup:
                async with self.lock:
                    await self.load(c)

    async def _monitor(self) -> None:
        """llama.cpp's child monitor thread: a child that exits on its own is reported without
        waiting for the next request."""
        while True:
            await asyncio.sleep(0.5)
            self.check()

    # -- children ----------------------------------------------------------------------------
    def _spawn(self, c: Child) -> None:
        c.port, c.status, c.exit_code, c.stopping = _free_port(), "loading", None, False
        c.failed = False
        c.last_used = time.monotonic()
        log.info(f"srv  load: spawning instance name={c.name} on port {c.port}")
        # the router's own arguments come last: they win over the preset (llama.cpp's order)
        c.proc = subprocess.Popen(
            [sys.executable, "-m", "pyllama", "server", "-m", c.path, *c.args, *self.child_args,
             "--host", "127.0.0.1", "--port", str(c.port)], env={**os.environ, **c.env})
        self.notify("model_status", c.name, {"status": "loading"})

    def _stop(self, c: Child) -> None:
        code = None
        if c.proc is not None:
            if c.proc.poll() is None:
                c.stopping = True
                c.proc.send_signal(signal.SIGTERM)
                try:
                    c.proc.wait(c.stop_timeout)
                except subprocess.TimeoutExpired:
                    c.proc.kill()
                    c.proc.wait()
            code = c.proc.returncode
        was = c.running
        c.proc, c.status = None, "unloaded"
        if was:
            self.notify("status_change", c.name, {"status": "unloaded", "exit_code": code})

    def check(self) -> None:
        """Children that exited on their own: reported failed (llama.cpp's on_child_exit)."""
        for c in self.children.values():
            if c.proc is not None and not c.stopping and c.proc.poll() is not None:
                c.exit_code = c.proc.returncode
                log.warning(f"srv  router: instance name={c.name} exited with status "
                            f"{c.exit_code}")
                c.proc, c.status, c.failed = None, "unloaded", True
                self.notify("status_change", c.name, {"status": "unloaded",
                                                      "exit_code": c.exit_code})

    async def load(self, c: Child) -> None:
        running = [x for x in self.children.values() if x.running and x is not c]
        while self.models_max > 0 and len(running) >= self.models_max:
            lru = min(running, key=lambda x: x.last_used)
            log.info(f"srv  load: models_max reached, unloading name={lru.name}")
            await asyncio.to_thread(self._stop, lru)
            running.remove(lru)
        self._spawn(c)
        self._watch = asyncio.get_running_loop().create_task(self._became_ready(c))

    async def _became_ready(self, c: Child) -> None:
        """status `loading` -> `loaded` without waiting for a request (GET /models shows it)."""
        try:
            await self.ready(c)
        except ServerError:
            pass

    async def ready(self, c: Child, timeout: float = 600.0) -> None:
        t0 = time.monotonic()
        while True:
            self.check()
            if c.failed:
                raise ServerError(500, f"model '{c.name}' failed to load "
                                       f"(exit code {c.exit_code})")
            if c.status == "unloaded":
                raise ServerError(503, f"model '{c.name}' was unloaded")
            try:
                r = await self.http.get(f"http://127.0.0.1:{c.port}/health", timeout=2)
                if r.status_code == 200:
                    if c.status != "loaded":
                        c.status = "loaded"
                        self.notify("status_change", c.name, {"status": "loaded"})
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
            status = {"value": c.status, "args": [c.path, *c.args, *self.child_args]}
            if c.failed:
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

    async def models_sse(self, request: Request):
        """GET /models/sse: `data: {json}` per status change, until the client goes."""
        q: asyncio.Queue = asyncio.Queue()
        self.listeners.add(q)

        async def events():
            try:
                while True:
                    msg = await q.get()
                    yield b"data: " + msgspec.json.encode(msg) + b"\n\n"
            finally:
                self.listeners.discard(q)
        return StreamingResponse(events(), media_type="text/event-stream")

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
        # remembered before the load wait: a stop while the model loads cancels this request
        conv = request.headers.get(streams.HEADER, "") if request.method == "POST" else ""
        ticket = self._remember(conv, name)
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
        if ticket and self.conv_models.get(conv, ("", 0))[1] != ticket:
            log.info(f"srv  proxy: request for conv_id={conv} cancelled while model "
                     f"name={name} was loading")
            return _err(400, "request cancelled by a stop while the model was loading")
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
        return self._relay(up)

    # -- resumable streams (server-models.cpp router_stream_get / _lookup / _delete) -----------
    def _remember(self, conv: str, name: str) -> int:
        if not conv:
            return 0
        self._tickets += 1
        self.conv_models[conv] = (name, self._tickets)
        return self._tickets

    def _owner(self, conv: str) -> Child | None:
        """The running child a conversation's POST went to (resolve_child_for_conv)."""
        tracked = self.conv_models.get(conv)
        c = self.children.get(tracked[0]) if tracked else None
        if c is None:
            return None
        self.check()
        return c if c.status == "loaded" else None

    async def stream_get(self, request: Request):
        conv = request.query_params.get("conv_id", "")
        if not conv:
            return _err(400, "Missing conversation id in path")
        c = self._owner(conv)
        if c is None:
            tracked = self.conv_models.get(conv)
            t = self.children.get(tracked[0]) if tracked else None
            if t is not None and t.status == "loading":
                return _err(503, "Stream owner model is loading, retry later")
            return _err(404, streams.NOT_FOUND)     # as the child's, see streams.get_stream
        path = "/v1/stream?conv_id=" + quote(conv, safe="-_.~")
        if request.query_params.get("from", ""):
            path += "&from=" + quote(request.query_params["from"], safe="-_.~")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP
                   and k.lower() != "host"}
        try:
            up = await self.http.send(self.http.build_request(
                "GET", f"http://127.0.0.1:{c.port}{path}", headers=headers), stream=True)
        except httpx.HTTPError as e:
            return _err(500, f"model '{c.name}' is not reachable: {e}")
        return self._relay(up)

    @staticmethod
    def _relay(up) -> StreamingResponse:
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

    async def streams_lookup(self, request: Request):
        """Each id asked about goes to the child that owns it (250 ms budget each); a body
        that is not JSON, or a child that does not answer, contributes nothing."""
        try:
            ids = streams.requested_ids(await request.body())
        except ServerError:
            return _json([])
        per_child: dict[int, list[str]] = {}
        for cid in ids:
            c = self._owner(cid)
            if c is not None:
                per_child.setdefault(c.port, []).append(cid)
        out = []
        for port, group in per_child.items():
            try:
                r = await self.http.post(f"http://127.0.0.1:{port}/v1/streams/lookup",
                                         json={"conversation_ids": group},
                                         timeout=STREAM_LOOKUP_TIMEOUT_S)
                arr = r.json() if r.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                continue
            if isinstance(arr, list):
                out += [e for e in arr if isinstance(e, dict)]
        return _json(out)

    async def stream_delete(self, request: Request):
        conv = request.query_params.get("conv_id", "")
        if not conv:
            return _err(400, "Missing conversation id in path")
        c = self._owner(conv)
        if c is not None:
            try:
                await self.http.delete(f"http://127.0.0.1:{c.port}/v1/stream?conv_id="
                                       + quote(conv, safe="-_.~"),
                                       timeout=STREAM_LOOKUP_TIMEOUT_S)
            except httpx.HTTPError:
                pass
        elif conv in self.conv_models:
            log.info(f"srv  stream_delete: router stop for conv_id={conv} while model "
                     f"name={self.conv_models[conv][0]} is loading, cancelling the pending "
                     "request")
        else:
            log.warning(f"srv  stream_delete: router stop for unknown conv_id={conv}, no "
                        "owning child in the conv map")
        self.conv_models.pop(conv, None)
        return Response(b"", status_code=204, media_type="application/json")

    def shutdown(self) -> None:
        for c in self.children.values():
            self._stop(c)


def create_router_app(router: Router, tools=None) -> Starlette:
    import contextlib

    from . import tools_builtin
    any_method = ["GET", "POST", "DELETE", "PUT"]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        await router.start()          # presets with load-on-startup
        yield
    return Starlette(lifespan=lifespan, routes=[
        Route("/health", router.health, methods=["GET"]),
        Route("/v1/health", router.health, methods=["GET"]),
        Route("/models", router.models, methods=["GET"]),
        Route("/v1/models", router.models, methods=["GET"]),
        Route("/models/sse", router.models_sse, methods=["GET"]),
        Route("/models/load", router.load_route, methods=["POST"]),
        Route("/models/unload", router.unload_route, methods=["POST"]),
        Route("/v1/stream", router.stream_get, methods=["GET"]),
        Route("/v1/stream", router.stream_delete, methods=["DELETE"]),
        Route("/v1/streams/lookup", router.streams_lookup, methods=["POST"]),
        *tools_builtin.routes(tools),           # the router's own, as server.cpp registers them
        Route("/{path:path}", router.proxy, methods=any_method)])


def serve_router(host: str, port: int, models_dir: str, models_max: int, autoload: bool,
                 child_args: list[str], preset: str = "", tools_cfg=None) -> int:
    import uvicorn

    from .tools_builtin import setup as setup_tools

    from . import _quiet_signals
    if models_dir and not os.path.isdir(models_dir):
        raise SystemExit(f"error: --models-dir {models_dir!r} is not a directory")
    tools, mcp = setup_tools(tools_cfg) if tools_cfg is not None else (None, None)
    router = Router(models_dir, models_max, autoload, child_args, preset)
    log.info(f"srv  router: {len(router.children)} model(s)")
    config = uvicorn.Config(create_router_app(router, tools), host=host, port=port, lifespan="on",
                            log_level="warning", access_log=False, ws="none",
                            timeout_graceful_shutdown=3)
    server = uvicorn.Server(config)
    if mcp is not None:         # MCP calls in flight end at the signal (server.cpp)
        exit_handler = server.handle_exit
        server.handle_exit = lambda sig, frame: (mcp.cancel(), exit_handler(sig, frame))
    _quiet_signals()
    try:
        log.info(f"srv  llama_server: router listening on http://{host}:{port}")
        server.run()
    finally:
        router.shutdown()
        if tools is not None:
            tools.close()
        if mcp is not None:
            mcp.shutdown()
    return 0 if server.started else 1


_DRAFT_PREFIXES = ("mtp-", "dspark-", "dflash-")


def scan_models_dir(models_dir: str) -> list[tuple[str, str, dict[str, str]]]:
    """(name, model path, env) per model of --models-dir, as common/preset.cpp's
    load_from_models_dir: `NAME.gguf` files (not mmproj or draft sidecars), and per
    subdirectory NAME its first shard (`-00001-of-`) or else its .gguf, with its `mmproj` file
    (LLAMA_ARG_MMPROJ) and its first draft file (LLAMA_ARG_SPEC_DRAFT_MODEL)."""
    def sidecar(f: str) -> bool:
        return "mmproj" in f or f.startswith(_DRAFT_PREFIXES)
    out = []
    for f in sorted(os.listdir(models_dir)):
        path = os.path.join(models_dir, f)
        if os.path.isdir(path):
            model = shard = mmproj = draft = ""
            for g in sorted(os.listdir(path)):
                gp = os.path.join(path, g)
                if not g.endswith(".gguf") or not os.path.isfile(gp):
                    continue
                if "mmproj" in g:
                    mmproj = gp
                elif g.startswith(_DRAFT_PREFIXES):
                    draft = draft or gp
                elif "-00001-of-" in g:
                    shard = gp
                else:
                    model = gp
            if shard or model:
                env = {}
                if mmproj:
                    env["LLAMA_ARG_MMPROJ"] = mmproj
                if draft:
                    env["LLAMA_ARG_SPEC_DRAFT_MODEL"] = draft
                out.append((f, shard or model, env))
        elif f.endswith(".gguf") and os.path.isfile(path) and not sidecar(f):
            out.append((f.replace(".gguf", ""), path, {}))
    return out


_TRUE, _FALSE = ("true",), ("false",)    # flag values (others, e.g. `fa = on`, are values)


def read_preset(path: str) -> dict[str, dict[str, str]]:
    """The sections of a preset INI file (`key = value`, `;`/`#` comments; keys before the
    first section, such as `version`, are ignored)."""
    sections: dict[str, dict[str, str]] = {}
    cur = None
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise SystemExit(f"error: failed to read --models-preset {path!r}: {e}") from None
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("[") and line.endswith("]"):
            cur = sections.setdefault(line[1:-1].strip(), {})
        elif "=" in line:
            key, value = (x.strip() for x in line.split("=", 1))
            if cur is not None:
                cur[key] = value
        else:
            raise SystemExit(f"error: {path}:{n}: expected 'key = value' or '[section]'")
    return sections


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
