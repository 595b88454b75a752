"""HTTP layer of llama-server: starlette routes, JSON and SSE framing, CORS, API keys, request logs.

Talks to the engine only through Task/Channel; never touches the Context. llama.cpp counterpart:
tools/server/server.cpp (routes), server-http.cpp (CORS, auth, errors), server-common.cpp.
"""
from __future__ import annotations

import asyncio
import datetime
import gc
import hmac
import os
import time
from pathlib import Path

import msgspec
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Route

from ..log import get_logger
from pyllama.vocab.template_caps import template_caps

from . import cors_proxy, gcp, tools_builtin
from . import anthropic as A
from . import control as K
from . import embeddings as E
from . import infill as I
from . import responses as R
from . import schemas as S
from . import sleep
from . import static
from . import streams
from .drain import Drain, draining_error
from .chat import generation_prompt, render_chat
from .tool_calls import call_spec, family as tool_family
from .chat_parse import (MsgStream, ReasoningBudget, forced_open, parse_message,
                         thinking_template)
from .engine import Channel, Engine, Task
from .schemas import ServerError, invalid, not_supported

log = get_logger("server")
WEB_DIR = Path(__file__).parent / "web"
_ASSET_TYPES = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8",
                ".svg": "image/svg+xml", ".html": "text/html; charset=utf-8"}
# the page's files, each served at /<name> like llama.cpp's embedded UI assets (server-http.cpp)
WEB_ASSETS = {"/" + p.name: p for p in sorted(WEB_DIR.iterdir())
              if p.suffix in _ASSET_TYPES and p.name != "index.html"}
UI_PATHS = ("/", "/index.html", *WEB_ASSETS)
NO_AUTH = ("/health", "/v1/health") + UI_PATHS
_JSON = "application/json; charset=utf-8"
# a request body at least this large is parsed and tokenized off the event loop and followed by a
# heap trim (glibc keeps freed arenas otherwise: RSS stayed 2.3 GB up after one 50 MB body)
LARGE_BODY = 1 << 20


def json_response(obj, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type=_JSON)


def error_response(err: ServerError) -> Response:
    return json_response(err.body(), err.code)


def _lexed_source(src: str) -> str:
    """The template source as llama.cpp's jinja lexer keeps it (common_chat_template::source):
    \\r\\n and \\r become \\n, one trailing newline is dropped."""
    src = src.replace("\r\n", "\n").replace("\r", "\n")
    return src[:-1] if src.endswith("\n") else src


_MEDIA_MARKER: list[str] = []


def media_marker() -> str:
    """get_media_marker (server-common.cpp): $LLAMA_MEDIA_MARKER, else "<__media_" + 32 random
    alphanumerics + "__>", fixed for the process."""
    if not _MEDIA_MARKER:
        import secrets
        import string
        env = os.environ.get("LLAMA_MEDIA_MARKER", "")
        chars = string.ascii_letters + string.digits
        _MEDIA_MARKER.append(env or "<__media_" + "".join(secrets.choice(chars)
                                                          for _ in range(32)) + "__>")
    return _MEDIA_MARKER[0]


def sse(obj) -> bytes:
    return b"data: " + msgspec.json.encode(obj) + b"\n\n"


class Gate:
    """ASGI middleware in llama.cpp's pre-routing order: CORS headers, OPTIONS, 503 while
    loading, API key; adds `Server: llama.cpp` and logs each request."""

    def __init__(self, app, server: "Server"):
        self.app, self.server, self.cfg = app, server, server.cfg

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path, method = scope["path"], scope["method"]
        if self.cfg.api_prefix and path.startswith(self.cfg.api_prefix):
            path = path[len(self.cfg.api_prefix):] or "/"
            scope = {**scope, "path": path}
        cors = self._cors(headers.get("origin", ""))
        status = [0]

        async def send_wrapped(msg):
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
                msg = {**msg, "headers": [(wire_name(k), v) for k, v in
                                          list(msg.get("headers", [])) + cors]}
            await send(msg)

        early = self._precheck(method, path, headers)
        limit = self.cfg.max_body_size
        size = headers.get("content-length", "")
        if early is None and limit > 0 and size.isdigit() and int(size) > limit:
            early = error_response(body_too_large(int(size), limit))
        seen = [0]
        if early is not None:
            await early(scope, receive, send_wrapped)
        else:
            self.server.drain.inflight += 1
            try:
                if path not in sleep.BYPASS and path not in UI_PATHS:
                    await self._awake()
                await self.app(scope, self._counted(receive, limit, seen), send_wrapped)
            finally:
                self.server.drain.inflight -= 1
        if seen[0] >= LARGE_BODY:
            await run_in_threadpool(release_memory)
        client = scope.get("client") or ("-", 0)
        level = log.debug if path in ("/health", "/v1/health", "/metrics") else log.info
        level(f"srv  log_server_r: request: {method} {path} {client[0]} {status[0]}")

    @staticmethod
    def _counted(receive, limit: int, seen: list):
        """receive() counting body bytes into seen[0]; a body (chunked, or longer than its
        Content-Length) growing past a limit > 0 raises BodyTooLarge: the handler answers 413."""
        async def wrapped():
            msg = await receive()
            if msg["type"] == "http.request":
                seen[0] += len(msg.get("body", b""))
                if 0 < limit < seen[0]:
                    raise BodyTooLarge(seen[0], limit)
            return msg
        return wrapped

    async def _awake(self) -> None:
        """--sleep-idle-seconds: wait until a sleeping engine has its model again
        (pyllama/server/sleep.py; the in-flight count already keeps it from sleeping)."""
        engine = self.server.engine
        if engine.awake.is_set():
            return
        sleep.wake(engine)
        while not engine.awake.is_set():
            if engine.load_error is not None:
                raise ServerError(500, "failed to reload model after sleeping")
            await asyncio.sleep(0.02)

    def _precheck(self, method: str, path: str, headers: dict):
        if method == "OPTIONS":
            return Response(b"", 200, media_type="text/html", headers={
                "Access-Control-Allow-Credentials": "true" if self.cfg.cors_credentials
                else "false",
                "Access-Control-Allow-Methods": self.cfg.cors_methods,
                "Access-Control-Allow-Headers": self.cfg.cors_headers})
        if path not in UI_PATHS and not self.server.engine.ready.is_set():
            return error_response(ServerError(503, "Loading model"))
        if self.server.drain.active:     # pyllama/server/drain.py: /health says so too
            return error_response(draining_error())
        if self.cfg.api_keys and path not in NO_AUTH and not self._key_ok(headers):
            return error_response(ServerError(401, "Invalid API Key"))
        if method in ("GET", "HEAD") and self.cfg.public_path:   # --path: files before routes
            found = static.lookup(self.cfg.public_path, path)
            if found is not None:
                return static.file_response(found, method == "HEAD")
        if path == "/sw.js" and method == "GET" and (not self.cfg.ui or self.cfg.public_path):
            return static.sw_remove()
        return None

    def _key_ok(self, headers: dict) -> bool:
        key = headers.get("authorization", "")
        if key.startswith("Bearer "):
            key = key[len("Bearer "):]
        if not key:
            key = headers.get("x-api-key", "")
        return key_matches(key, self.cfg.api_keys)

    def _cors(self, origin: str) -> list[tuple[bytes, bytes]]:
        """llama.cpp's pre-routing CORS: '*' with credentials echoes the Origin, 'localhost'
        echoes only a localhost origin (else no header), anything else is sent as given."""
        allowed = self.cfg.cors_origins
        out = [(b"Server", b"llama.cpp")]
        if allowed == "*" and self.cfg.cors_credentials:
            value = origin
        elif allowed == "localhost":
            if not _origin_is_localhost(origin):
                if origin:
                    log.warning(f"srv  operator(): (CORS) skip non-localhost origin: {origin}")
                return out
            value = origin
        else:
            value = allowed
        return out + [(b"Access-Control-Allow-Origin", value.encode("latin-1"))]


def _origin_is_localhost(origin: str) -> bool:
    """The Origin's host is localhost, 127.0.0.1 or ::1, any port (an http(s) URL only, as
    llama.cpp's common_http_parse_url requires)."""
    try:
        return cors_proxy.target(origin)[1] in ("localhost", "127.0.0.1", "::1")
    except ValueError:
        return False


_WIRE_SPECIAL = {b"etag": b"ETag", b"www-authenticate": b"WWW-Authenticate"}


def wire_name(name: bytes) -> bytes:
    """A response header name as llama.cpp's cpp-httplib writes it (Content-Type,
    Access-Control-Allow-Origin, Process-Start-Time-Unix): starlette lower-cases the names it
    builds and h11 sends them as given, and clients exist that compare case-sensitively."""
    low = name.lower()
    return _WIRE_SPECIAL.get(low) or b"-".join(p[:1].upper() + p[1:] for p in low.split(b"-"))


class Server:
    """Routes bound to one engine and config."""

    def __init__(self, cfg, engine: Engine):
        self.cfg, self.engine = cfg, engine
        self._defaults = None
        self.live: dict[str, list] = {}     # chat completion id -> its tasks (while running)
        self.drain = Drain(cfg.drain_timeout)
        self.streams = streams.StreamSessions()     # X-Conversation-Id sessions (/v1/stream)
        engine.http_busy = lambda: self.drain.inflight > 0    # no sleep mid-request

    # -- helpers -----------------------------------------------------------------------------------
    @property
    def model_name(self) -> str:
        if self.cfg.alias:
            return sorted(self.cfg.alias)[0]
        return os.path.basename(self.cfg.model or getattr(self.engine.model, "path", "model"))

    @property
    def template(self):
        return self.engine.template

    @property
    def defaults(self) -> S.RequestDefaults:
        """Per-request defaults: the command line over the model's general.sampling.* values."""
        if self._defaults is None:
            cfg = self.cfg
            self._defaults = S.RequestDefaults(
                n_predict=cfg.n_predict, n_keep=cfg.n_keep, stop=list(cfg.reverse_prompts),
                n_cache_reuse=cfg.n_cache_reuse, n_ctx_slot=self.engine.n_ctx_slot,
                cache_prompt=cfg.cache_prompt, sampling=self.engine.sampling_defaults,
                eog_ids=tuple(self.engine.vocab.eog_ids), verbose=cfg.verbose,
                reasoning_format=cfg.reasoning_format, lora_names=self.engine.lora_names,
                tool_family=tool_family(self.template))
        return self._defaults

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True):
        return self.engine.model.tokenize(text, add_special=add_special,
                                          parse_special=parse_special)

    async def body(self, request: Request, kind):
        raw = await request.body()
        if len(raw) >= LARGE_BODY:
            return await run_in_threadpool(S.decode_body, raw, kind)
        return S.decode_body(raw, kind)

    # -- simple endpoints ----------------------------------------------------------------------------
    async def health(self, request: Request):
        return json_response({"status": "ok"})

    async def index(self, request: Request):
        return self._web_file(WEB_DIR / "index.html")

    async def web_asset(self, request: Request):
        return self._web_file(WEB_ASSETS[request.scope["path"]])

    def _web_file(self, path: Path):
        if not self.cfg.ui or self.cfg.public_path:   # --path replaces the built-in UI
            raise HTTPException(404)
        # revalidated on each load (ETag), so an upgraded pyllama's page is picked up at once
        return FileResponse(path, media_type=_ASSET_TYPES[path.suffix],
                            headers={"Cache-Control": "no-cache"})

    async def props(self, request: Request):
        if request.method == "POST":
            if not self.cfg.endpoint_props:
                raise not_supported("This server does not support changing global properties. "
                                    "Start it with `--props`")
            return json_response({"success": True})
        return json_response(self._props())

    def _props(self) -> dict:
        e, v = self.engine, self.engine.vocab
        settings = S.generation_settings(S.TaskParams(
            n_predict=self.cfg.n_predict, n_keep=self.cfg.n_keep,
            sampling=e.sampling_defaults), only_metrics=True)
        piece = (lambda t: e.model.token_to_piece(t, True).decode("utf-8", "replace")
                 if t is not None and t >= 0 else "")
        return {"default_generation_settings": {"params": settings, "n_ctx": e.n_ctx_slot},
                "total_slots": len(e.slots), "model_alias": self.model_name,
                "model_ftype": _ftype(e.model), "model_path": e.model.path,
                "modalities": {"vision": False, "video": False, "audio": False},
                "media_marker": media_marker(), "endpoint_slots": self.cfg.endpoint_slots,
                "endpoint_props": self.cfg.endpoint_props,
                "endpoint_metrics": self.cfg.endpoint_metrics, "ui": self.cfg.ui,
                "ui_settings": self.cfg.ui_config or {}, "chat_template": _lexed_source(self._template_source()),
                "chat_template_caps": self.template_caps(), "bos_token": piece(getattr(v, "bos", -1)),
                "eos_token": piece(getattr(v, "eos", -1)), "build_info": S.BUILD_INFO,
                "is_sleeping": False, "cors_proxy_enabled": self.cfg.ui_mcp_proxy}

    def template_caps(self) -> dict:
        """chat_template_caps (common_chat_templates_get_caps): the jinja capability analysis
        of the loaded template, computed once per template."""
        t = self.template
        cached = getattr(self, "_caps", None)
        if cached is None or cached[0] is not t:
            caps = {}
            if getattr(t, "_template", None) is not None:
                try:
                    caps = template_caps(t)
                except Exception:  # noqa: BLE001 - props must answer even with a broken template
                    caps = {}
            self._caps = cached = (t, caps)
        return cached[1]

    def _template_source(self) -> str:
        try:
            return getattr(self.template, "source", None) or ""
        except Exception:  # noqa: BLE001 - props must answer even with a broken template
            return ""

    async def models(self, request: Request):
        m, name = self.engine.model, self.model_name
        meta = {"vocab_type": _vocab_type(m), "n_vocab": m.n_vocab, "n_ctx": self.engine.n_ctx_slot,
                "n_ctx_train": getattr(m.hparams, "n_ctx_train", 0),
                "n_embd": getattr(m.hparams, "n_embd", 0), "n_params": m.n_params,
                "size": m.size_bytes, "ftype": _ftype(m)}
        aliases = sorted(self.cfg.alias) or [name]
        return json_response({
            "models": [{"name": name, "model": name, "modified_at": "", "size": "", "digest": "",
                        "type": "model", "description": "", "tags": [""],
                        "capabilities": ["completion"], "parameters": "",
                        "details": {"parent_model": "", "format": "gguf", "family": "",
                                    "families": [""], "parameter_size": "",
                                    "quantization_level": ""}}],
            "object": "list",
            "data": [{"id": name, "aliases": aliases, "tags": sorted(set(self.cfg.tags)),
                      "object": "model",
                      "created": int(time.time()), "owned_by": "llamacpp", "meta": meta}]})

    async def tokenize_route(self, request: Request):
        b = await self.body(request, S.TokenizeBody)
        if b.content is msgspec.UNSET:
            return json_response({"tokens": []})
        # tokenizing a long text takes seconds: never on the event loop
        return json_response(await run_in_threadpool(self._tokenize_body, b))

    def _tokenize_body(self, b) -> dict:
        ids = self._mixed_tokens(b.content, b.add_special, b.parse_special)
        if not b.with_pieces:
            return {"tokens": ids}
        n = self.engine.model.n_vocab
        for t in ids:   # llama.cpp answers 500 with std::vector::at's message (id_to_token.at)
            if not 0 <= t < n:
                raise ServerError(500, f"vector::_M_range_check: __n (which is {t % 2**64}) >= "
                                       f"this->size() (which is {n})")
        out = []
        for t in ids:
            raw = self.engine.model.token_to_piece(t, True)
            try:
                piece = raw.decode("utf-8")
            except UnicodeDecodeError:
                piece = list(raw)
            out.append({"id": t, "piece": piece})
        return {"tokens": out}

    def _mixed_tokens(self, content, add_special: bool, parse_special: bool) -> list[int]:
        if isinstance(content, str):
            return self.tokenize(content, add_special, parse_special)
        if not isinstance(content, list):
            raise invalid("\"content\" must be a string or an array of strings and tokens")
        out: list[int] = []
        for i, part in enumerate(content):
            if isinstance(part, str):
                out += self.tokenize(part, add_special and i == 0, parse_special)
            elif isinstance(part, int) and not isinstance(part, bool):
                out.append(part)
            else:
                raise invalid("prompt elements must be strings or token ids")
        return out

    async def detokenize(self, request: Request):
        b = await self.body(request, S.DetokenizeBody)
        return json_response({"content": await run_in_threadpool(self._detokenize, b.tokens)})

    def _detokenize(self, ids) -> str:
        self._check_ids(ids)
        raw = b"".join(self.engine.model.token_to_piece(t, True) for t in ids)
        return raw.decode("utf-8", "replace")

    def _check_ids(self, ids) -> None:
        n = self.engine.model.n_vocab
        for t in ids:
            if not 0 <= t < n:
                raise invalid(f"invalid token id {t} (n_vocab = {n})")

    async def apply_template(self, request: Request):
        b = await self.body(request, S.ChatBody)
        return json_response({"prompt": await run_in_threadpool(self._render, b)})

    async def input_tokens(self, request: Request):
        b = await self.body(request, S.ChatBody)
        n = await run_in_threadpool(lambda: len(self.tokenize(self._render(b))))
        return json_response({"object": "response.input_tokens", "input_tokens": n})

    def _render(self, body) -> str:
        if body.messages is msgspec.UNSET:
            raise invalid("'messages' is required")
        if body.tools and not self.cfg.jinja:
            raise ServerError(500, "tools param requires --jinja flag")
        v = self.engine.vocab
        bos = self.engine.model.token_to_piece(v.bos, True).decode("utf-8", "replace") \
            if getattr(v, "add_bos", False) and getattr(v, "bos", -1) >= 0 else None
        kwargs = self._template_kwargs()
        return render_chat(self.template, body, kwargs, bos,
                           prefill_assistant=self.cfg.prefill_assistant)

    def _chat_settings(self, body) -> dict:
        """The chat parser's generation_settings fields of a chat task: llama.cpp's PEG parser
        (chat_format peg-native), the template's generation prompt and the tool-call markers
        kept as single tokens (preserved_tokens)."""
        kwargs = self._template_kwargs()
        preserved = []
        src = self._template_source()
        if tool_family(self.template) == "hermes" and "<tool_call>" in src:
            for m in ("<tool_call>", "</tool_call>"):
                ids = self.tokenize(m, False, True)
                if len(ids) == 1:
                    preserved.append(ids[0])
        return {"chat_format": "peg-native", "preserved_tokens": preserved,
                "generation_prompt": generation_prompt(self.template, body, kwargs)}

    def _template_kwargs(self) -> dict:
        """The template variables of a chat request before its own chat_template_kwargs:
        common_chat_extra_context's `datetime` ("%b %d %Y") and `date_string` ("%d %b %Y",
        local time), enable_thinking, then --chat-template-kwargs / --reasoning."""
        now = datetime.datetime.now()
        return {"datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y"),
                "enable_thinking": self._thinking_default(), **self.cfg.chat_template_kwargs}

    def _thinking_default(self) -> bool:
        """llama.cpp's enable_thinking template variable: true when the template renders
        differently with it (common_chat_templates_support_enable_thinking)."""
        if getattr(self, "_thinking", None) is None:
            msgs = [{"role": "user", "content": "test"}]
            try:
                on = self.template.apply(msgs, add_generation_prompt=True, enable_thinking=True)
                off = self.template.apply(msgs, add_generation_prompt=True,
                                          enable_thinking=False)
                self._thinking = on != off
            except Exception:  # noqa: BLE001 - a template that fails here fails later anyway
                self._thinking = False
        return self._thinking

    async def embeddings(self, request: Request):
        return await E.embeddings(self, request, oai=False)

    async def embeddings_oai(self, request: Request):
        return await E.embeddings(self, request, oai=True)

    async def rerank(self, request: Request):
        return await E.rerank(self, request)

    async def infill(self, request: Request):
        return await I.infill(self, request)

    async def responses(self, request: Request):
        return await R.create(self, request)

    async def responses_input_tokens(self, request: Request):
        return await R.input_tokens(self, request)

    async def chat_control(self, request: Request):
        return await K.chat_control(self, request)

    async def lora_adapters(self, request: Request):
        if request.method == "POST":
            return await K.lora_set(self, request)
        return await K.lora_list(self, request)

    async def transcriptions(self, request: Request):
        return await K.transcriptions(self, request)

    async def stream_get(self, request: Request):
        return await streams.get_stream(self.streams, request)

    async def stream_delete(self, request: Request):
        return await streams.delete_stream(self.streams, request)

    async def streams_lookup(self, request: Request):
        return await streams.lookup(self.streams, request)

    async def anthropic_messages(self, request: Request):
        return await A.messages(self, request)

    async def anthropic_count_tokens(self, request: Request):
        return await A.count_tokens(self, request)

    # -- slots and metrics --------------------------------------------------------------------------
    async def slots(self, request: Request):
        if not self.cfg.endpoint_slots:
            raise not_supported("This server does not support slots endpoint. Start it with "
                                "`--slots`")
        if request.query_params.get("fail_on_no_slot") in ("1", "true") and \
                self.engine.n_busy == len(self.engine.slots):
            raise ServerError(503, "no slot available")
        return json_response([s.to_json() for s in self.engine.slots])

    async def slot_action(self, request: Request):
        action = request.query_params.get("action", "")
        try:
            id_slot = int(request.path_params["id_slot"])
        except ValueError:
            raise invalid("Invalid slot id")
        if action not in ("save", "restore", "erase"):
            raise invalid("Invalid action")
        if not self.cfg.slot_save_path:
            raise not_supported("This server does not support slots action. Start it with "
                                "`--slot-save-path`")
        if not 0 <= id_slot < len(self.engine.slots):
            raise invalid(f"Invalid slot id {id_slot}")
        filename = ""
        if action != "erase":
            b = await self.body(request, S.SlotActionBody)
            filename = b.filename or ""
            if not _valid_filename(filename):
                raise invalid("Invalid filename")
        ch = Channel(asyncio.get_running_loop())
        task = self.engine.submit(Task(action, ch, id_slot=id_slot, filename=filename))
        res = await self._wait(request, ch, [task])
        return json_response(res)

    async def metrics(self, request: Request):
        if not self.cfg.endpoint_metrics:
            raise not_supported("This server does not support metrics endpoint. Start it with "
                                "`--metrics`")
        return Response(_metrics_text(self.engine), media_type="text/plain; version=0.0.4",
                        headers={"Process-Start-Time-Unix": str(int(self.engine.metrics.t_start))})

    # -- completions --------------------------------------------------------------------------------
    async def completion(self, request: Request):
        return await self._complete(request, "native")

    async def oai_completion(self, request: Request):
        return await self._complete(request, "oai")

    async def chat(self, request: Request):
        return await self._complete(request, "chat")

    async def _complete(self, request: Request, mode: str, body=None):
        chat = mode in CHAT_MODES
        if body is None:
            body = await self.body(request, S.ChatBody if chat else S.CompletionBody)
        # X-Conversation-Id: the stream is kept for /v1/stream (pyllama/server/streams.py);
        # a request that fails, or does not stream, leaves no session behind
        conv = streams.conv_id_of(request)
        session = self.streams.create_or_replace(conv) if conv else None
        try:
            response = await self._run(request, mode, body, chat, session)
        except BaseException:
            if session is not None:
                self.streams.evict(conv, session)
            raise
        if session is not None and session.producer is None:
            self.streams.evict(conv, session)
        return response

    async def _run(self, request: Request, mode: str, body, chat: bool, session):
        # templates and tokenization of long prompts run off the event loop
        prompts, params, n_cmpl = await run_in_threadpool(self._prepare, body, chat)
        if chat:
            params.reasoning_control = bool(body.reasoning_control)
            params.reasoning_budget = self._reasoning_budget(body, params.reasoning_control)
        ch = Channel(asyncio.get_running_loop())
        tasks = [self.engine.submit(Task("completion", ch, prompt=p, params=params,
                                         index=i * n_cmpl + j))
                 for i, p in enumerate(prompts) for j in range(n_cmpl)]
        ctx = _Req(mode, params, S.completion_id(), self.model_name,
                   bool(chat and body.tools and body.tool_choice != "none"), body)
        self.live[ctx.cid] = tasks      # reasoning control finds live completions by id
        if chat:
            ctx.reasoning, ctx.open_think = self._reasoning(body, prompts[0])
            ctx.family, ctx.spec = tool_family(self.template), call_spec(body)
        if params.stream:
            # an error before the first chunk is a plain JSON error, as in llama.cpp
            try:
                first = await self._next_event(request, ch, tasks)
            except BaseException:
                self.live.pop(ctx.cid, None)
                raise
            chunks = self._stream(ch, tasks, ctx, first)
            if session is not None:
                chunks = streams.attach(session, chunks)
            return StreamingResponse(chunks,
                                     media_type="text/event-stream",
                                     headers={"X-Accel-Buffering": "no",
                                              "Cache-Control": "no-cache"})
        try:
            finals = await self._wait(request, ch, tasks)
        finally:
            self.live.pop(ctx.cid, None)
        return json_response(self._final_body(ctx, finals))

    def _reasoning(self, body, prompt: list[int]) -> tuple[str, bool]:
        """(reasoning format, prompt ends inside an open think block) of a chat request: the
        request's reasoning_format over --reasoning-format; none for templates without
        thinking blocks."""
        fmt = body.reasoning_format or self.cfg.reasoning_format
        if fmt == "none" or not thinking_template(self.template):
            return "none", False
        tail = self.engine.model.detokenize(prompt[-16:]) if prompt else ""
        return fmt, forced_open(tail)

    def _reasoning_budget(self, body, control: bool = False):
        """The reasoning-budget sampler of a chat request on a template with thinking blocks:
        reasoning_budget_tokens (or thinking_budget_tokens) over --reasoning-budget; None when
        unrestricted (-1)."""
        n = body.reasoning_budget_tokens
        if n is None or n == -1:
            n = body.thinking_budget_tokens if body.thinking_budget_tokens is not None else -1
        if n == -1:
            n = self.cfg.reasoning_budget
        if (n < 0 and not control) or not thinking_template(self.template):
            return None
        tok = lambda s: self.tokenize(s, False, True)   # noqa: E731
        return ReasoningBudget(tok("<think>"), tok("</think>"), n,
                               lambda t: self.engine.model.token_to_piece(t, False))

    def _msg_stream(self, r: "_Req") -> MsgStream:
        return MsgStream(r.tools, r.reasoning, r.open_think, family=r.family, spec=r.spec)

    def _prepare(self, body, chat: bool):
        """(prompt token lists, task params, completions per prompt) or a ServerError."""
        if chat:
            prompts = [self.tokenize(self._render(body))]
        else:
            if body.prompt is msgspec.UNSET or body.prompt is None:
                raise invalid("[json.exception.out_of_range.403] key 'prompt' not found")
            prompts = self._prompts(body.prompt)
        if chat and not isinstance(body.parallel_tool_calls, bool):
            # json_value(body, "parallel_tool_calls", caps): a missing or non-boolean value
            # is the template's supports_parallel_tool_calls
            body.parallel_tool_calls = self.template_caps().get(
                "supports_parallel_tool_calls", True)
        params = S.build_params(body, self.defaults, n_vocab=self.engine.model.n_vocab,
                                tokenize=lambda s: self.tokenize(s, False, True), chat=chat)
        if chat and self.cfg.jinja:
            params.settings.update(self._chat_settings(body))
        n_cmpl = self._n_cmpl(body)
        for p in prompts:
            self._check_prompt(p)
        if params.id_slot >= len(self.engine.slots):
            raise invalid(f"Invalid slot id {params.id_slot}")
        return prompts, params, n_cmpl

    def _n_cmpl(self, body) -> int:
        name, n = S._first(body, "n_cmpl", "n")
        if n is None:
            return 1
        S._check_range(name, n, 1, len(self.engine.slots))
        return n

    def _prompts(self, prompt) -> list[list[int]]:
        """tokenize_input_prompts (server-common.cpp): an array without token ids is a list of
        prompts, anything else one prompt."""
        if isinstance(prompt, list) and not any(_is_id(x) for x in prompt):
            out = [self._subprompt(p) for p in prompt]
            if not out:
                raise invalid("\"prompt\" must not be empty")
            return out
        return [self._subprompt(prompt)]

    def _subprompt(self, p) -> list[int]:
        """tokenize_input_subprompt: a string, token ids mixed with strings, token ids, or
        {"prompt_string": ...}."""
        if isinstance(p, str) or (isinstance(p, list) and all(
                isinstance(x, str) or _is_id(x) for x in p)):
            return self._mixed_tokens(p, True, True)
        if isinstance(p, dict) and "prompt_string" in p:
            if "multimodal_data" in p:     # a runtime_error in llama.cpp: 500
                raise ServerError(500, "Multimodal data provided, but model does not support "
                                       "multimodal requests.")
            return self._mixed_tokens(p["prompt_string"], True, True)
        raise invalid("\"prompt\" elements must be a string, a list of tokens, a JSON object "
                      "containing a prompt string, or a list of mixed strings & tokens.")

    def _check_prompt(self, tokens: list[int]) -> None:
        if not tokens:
            raise invalid("the prompt is empty")
        self._check_ids(tokens)
        n_ctx = self.engine.n_ctx_slot
        if len(tokens) >= n_ctx:
            raise S.exceed_context(len(tokens), n_ctx)

    async def _next_event(self, request: Request, ch: Channel, tasks: list[Task]):
        """The next result; a client disconnect, --timeout or an engine error cancels the tasks
        (an error is raised)."""
        t0 = time.monotonic()
        try:
            while True:
                try:
                    ev = await ch.get(timeout=0.05)     # disconnects noticed within ~50 ms
                    break
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        raise ClientGone()
                    if time.monotonic() - t0 > self.cfg.timeout:
                        raise ServerError(500, "request timed out")
            if isinstance(ev, BaseException):
                raise ev
            return ev
        except BaseException:
            for t in tasks:
                t.cancelled = True
            raise

    async def _wait(self, request: Request, ch: Channel, tasks: list[Task]):
        """One result per task (a slot action answers with its dict)."""
        results: dict[int, object] = {}
        while len(results) < len(tasks):
            ev = await self._next_event(request, ch, tasks)
            if isinstance(ev, dict):
                return ev
            if isinstance(ev, (S.Final, S.EmbdResult)):
                results[ev.index] = ev
        return [results[i] for i in sorted(results)]

    def _final_body(self, r: "_Req", finals: list[S.Final]):
        if r.mode == "native":
            fields = r.body.response_fields
            out = [S.native_final(f, r.model, False, r.params, fields) for f in finals]
            return out[0] if len(out) == 1 else out
        if r.mode == "oai":
            return self._verbose(r, finals, S.oai_completion(finals, r.model, r.cid,
                                                             r.params.n_probs))
        msgs = [parse_message(f.text, r.tools, r.reasoning, r.open_think, r.family, r.spec)
                for f in finals]
        if r.mode in EVENT_MODES:
            return EVENT_MODES[r.mode].final_body(r, finals[0], msgs[0])
        body = S.chat_completion([(f, m.content, m.tool_calls) for f, m in zip(finals, msgs)],
                                 r.model, r.cid, r.params.n_probs)
        for c, m in zip(body["choices"], msgs):
            if m.reasoning_content:
                c["message"]["reasoning_content"] = m.reasoning_content
        return self._verbose(r, finals, body)

    @staticmethod
    def _verbose(r: "_Req", finals: list[S.Final], body: dict) -> dict:
        """`verbose` (request field, default: server -v): llama.cpp adds the native result as
        `__verbose` to an OpenAI-style response (server-task.cpp)."""
        if r.params.verbose:
            body["__verbose"] = S.native_final(finals[0], r.model, False, r.params)
        return body

    async def _stream(self, ch: Channel, tasks: list[Task], r: "_Req", first):
        n_done, started = 0, set()
        filters = {}
        ping = self.cfg.sse_ping_interval if self.cfg.sse_ping_interval > 0 else None
        try:
            while n_done < len(tasks):
                try:
                    ev, first = (first, None) if first is not None else (
                        await ch.get(timeout=ping), None)
                except asyncio.TimeoutError:
                    yield b":\n\n"
                    continue
                if isinstance(ev, BaseException):
                    err = ev if isinstance(ev, ServerError) else ServerError(500, str(ev))
                    yield EVENT_MODES[r.mode].error_event(err) if r.mode in EVENT_MODES \
                        else sse(err.body())
                    return
                if isinstance(ev, S.Progress):
                    if r.mode not in EVENT_MODES:
                        yield sse(self._progress_event(r, ev))
                    elif r.mode == "responses":
                        events = filters.setdefault(("events", ev.index), R.EventStream(r))
                        for chunk in events.progress(ev):
                            yield chunk
                    continue
                if r.mode == "chat" and ev.index not in started:
                    started.add(ev.index)
                    yield sse(S.chat_chunk([S.chat_delta(ev.index, {"role": "assistant",
                                                                    "content": None})],
                                           r.model, r.cid))
                if isinstance(ev, S.Partial):
                    for chunk in self._partial_events(r, ev, filters):
                        yield chunk
                else:
                    n_done += 1
                    for chunk in self._final_events(r, ev, filters):
                        yield chunk
            if r.mode in ("oai", "chat"):
                yield b"data: [DONE]\n\n"
        finally:
            self.live.pop(r.cid, None)
            for t in tasks:
                t.cancelled = True

    @staticmethod
    def _progress_event(r: "_Req", p: S.Progress) -> dict:
        """llama.cpp's progress chunk: an empty token chunk (native), an empty text chunk (OAI)
        or the role delta (chat), carrying `prompt_progress` (and `timings` with
        timings_per_token)."""
        ev = Server._progress_body(r, p)
        if p.timings is not None:
            ev["timings"] = p.timings.to_json()
        return ev

    @staticmethod
    def _progress_body(r: "_Req", p: S.Progress) -> dict:
        if r.mode == "native":
            return {"index": p.index, "content": "", "tokens": [], "stop": False, "id_slot": -1,
                    "tokens_predicted": 0, "tokens_evaluated": p.total,
                    "prompt_progress": p.to_json()}
        if r.mode == "oai":
            return {**S.oai_completion_chunk(p.index, "", r.model, r.cid),
                    "prompt_progress": p.to_json()}
        return S.chat_chunk([S.chat_delta(p.index, {"role": "assistant", "content": None})],
                            r.model, r.cid, prompt_progress=p.to_json())

    def _partial_events(self, r: "_Req", p: S.Partial, filters: dict):
        if r.mode == "native":
            yield sse(S.native_partial(p, r.params.post_sampling_probs))
        elif r.mode == "oai":
            yield sse(S.oai_completion_chunk(p.index, p.text, r.model, r.cid, p.probs))
        elif r.mode in EVENT_MODES:
            diffs = filters.setdefault(p.index, self._msg_stream(r)).push(p.text)
            events = filters.setdefault(("events", p.index), EVENT_MODES[r.mode].EventStream(r))
            for chunk in events.partial(p, diffs):
                yield chunk
        else:
            diffs = filters.setdefault(p.index, self._msg_stream(r)).push(p.text)
            extra = {"timings": p.timings.to_json()} if p.timings else {}
            if not diffs and p.probs:
                diffs = [{"content": ""}]
            for k, d in enumerate(diffs):
                yield sse(S.chat_chunk([S.chat_delta(p.index, d, p.probs if k == 0 else None)],
                                       r.model, r.cid, **extra))

    def _final_events(self, r: "_Req", f: S.Final, filters: dict):
        if r.mode == "native":
            yield sse(S.native_final(f, r.model, True, r.params))
            return
        if r.mode == "oai":
            final = S.oai_completion([f], r.model, r.cid, 0)
            final["choices"][0]["text"] = ""
            yield sse(final)
            return
        diffs, msg = filters.setdefault(f.index, self._msg_stream(r)).finish()
        if r.mode in EVENT_MODES:
            events = filters.setdefault(("events", f.index), EVENT_MODES[r.mode].EventStream(r))
            for chunk in events.final(f, diffs, msg):
                yield chunk
            return
        finish = f.finish_reason
        for d in diffs:
            if "tool_call" not in d:
                yield sse(S.chat_chunk([S.chat_delta(f.index, d)], r.model, r.cid))
        if msg.tool_calls:
            if finish == "stop":        # a generation cut by the limit stays "length"
                finish = "tool_calls"
            delta = {"tool_calls": [{"index": i, **c} for i, c in enumerate(msg.tool_calls)]}
            yield sse(S.chat_chunk([S.chat_delta(f.index, delta)], r.model, r.cid))
        usage = r.body.stream_options is not None and r.body.stream_options.include_usage
        extra = {} if usage else {"timings": f.timings.to_json()}
        yield sse(S.chat_chunk([S.chat_delta(f.index, {}, finish=finish)], r.model, r.cid,
                               **extra))
        if usage:
            yield sse(S.chat_chunk([], r.model, r.cid, usage=S.usage(f),
                                   timings=f.timings.to_json()))


class ClientGone(Exception):
    """The client went away before its answer was ready."""


class BodyTooLarge(Exception):
    """A request body over --max-body-size."""

    def __init__(self, size: int, limit: int):
        super().__init__(size, limit)
        self.size, self.limit = size, limit


def body_too_large(size: int, limit: int) -> ServerError:
    return ServerError(413, f"request body too large ({size} bytes, the limit is {limit}: "
                            "--max-body-size)", "invalid_request_error")


def key_matches(key: str, keys) -> bool:
    """Constant-time comparison against every configured key (no early exit)."""
    given = key.encode("utf-8", "surrogateescape")
    ok = False
    for k in keys:
        ok |= hmac.compare_digest(given, k.encode("utf-8", "surrogateescape"))
    return ok


def release_memory() -> None:
    """Give the heap freed by a large request back to the OS (glibc's malloc_trim)."""
    gc.collect()
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


CHAT_MODES = ("chat", "anthropic", "responses")   # requests rendered with the chat template
EVENT_MODES = {"anthropic": A, "responses": R}   # streamed as named events, no [DONE]


class _Req:
    """What a response builder needs to know about its request."""

    def __init__(self, mode, params, cid, model, tools, body):
        self.mode, self.params, self.cid, self.model = mode, params, cid, model
        self.tools, self.body = tools, body
        self.reasoning, self.open_think, self.family = "none", False, "hermes"
        self.spec = None                # tool_calls.call_spec of a chat request
        self.resp_id = "resp_" + R.random_string()


def _is_id(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _valid_filename(name: str) -> bool:
    return bool(name) and len(name) <= 255 and "/" not in name and "\\" not in name and \
        name not in (".", "..") and not name.startswith(".") and name.isprintable()


def _ftype(model) -> str:
    desc = getattr(model, "desc", "")
    parts = desc.split(" ", 2)
    return parts[2] if len(parts) == 3 else desc


def _vocab_type(model) -> int:
    kind = model.metadata.get("tokenizer.ggml.model", "")
    return {"llama": 1, "gpt2": 2, "bert": 3, "t5": 4, "rwkv": 5}.get(kind, 0)


def _metrics_text(engine: Engine) -> str:
    """llama.cpp's Prometheus text (server_task_result_metrics::to_metrics in server-task.cpp):
    its names, help texts and order; values printed as C++'s ostream prints a double."""
    m = engine.metrics
    pps, tps, busy = m.scrape()
    counters = [
        ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
         m.prompt_tokens_total),
        ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache",
         m.prompt_tokens_cached_total),
        ("prompt_seconds_total", "Total time spent processing prompts", m.prompt_seconds_total),
        ("tokens_predicted_total", "Number of generation tokens processed",
         m.tokens_predicted_total),
        ("tokens_predicted_seconds_total", "Total time spent generating tokens",
         m.tokens_predicted_seconds_total),
        ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding "
         "and multimodal decoding", m.n_decode_total),
        ("n_tokens_max", "Largest observed sequence length (prompt + generation)",
         m.n_tokens_max),
        ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated",
         m.spec_draft_tokens_total),
        ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by "
         "the target model", m.spec_accepted_tokens_total),
        ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification "
         "steps", m.spec_drafts_total),
    ]
    gauges = [
        ("prompt_tokens_seconds", "Average prompt throughput in tokens/s", pps),
        ("predicted_tokens_seconds", "Average generation throughput in tokens/s", tps),
        ("requests_processing", "Number of requests processing", engine.n_busy),
        ("requests_deferred", "Number of requests deferred", engine.n_deferred),
        ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call", busy),
        # pyllama's extension (the name and help of llama.cpp's earlier metric, removed before
        # 0c1e570): the inference gateway's KVCacheUtilization gauge (deploy/README.md)
        ("kv_cache_usage_ratio", "KV-cache usage. 1 means 100 percent usage.", engine.kv_usage),
    ]
    lines = []
    for kind, rows in (("counter", counters), ("gauge", gauges)):
        for name, help_, value in rows:
            lines += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {kind}",
                      f"llamacpp:{name} {cpp_double(value)}"]
    if m.n_accepted_per_pos:    # labeled counter: one series per draft position
        name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
        lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
        lines += [f'{name}{{position="{i}"}} {v}' for i, v in enumerate(m.n_accepted_per_pos)]
    if getattr(engine, "lora_names", ()):
        # pyllama's extension: the inference gateway's LoRA adapter info, as vLLM's
        # vllm:lora_requests_info gives it (a gauge whose value is the time of the reading; every
        # loaded adapter is resident, so max_lora is their count) (deploy/README.md)
        running, waiting = (_label(",".join(x)) for x in engine.lora_info())
        name = "llamacpp:lora_requests_info"
        lines += [f"# HELP {name} Running and waiting LoRA adapters (the value: a Unix time)",
                  f"# TYPE {name} gauge",
                  f'{name}{{max_lora="{len(engine.lora_names)}",'
                  f'running_lora_adapters="{running}",'
                  f'waiting_lora_adapters="{waiting}"}} {time.time():.3f}']
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    """A Prometheus label value: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def cpp_double(value) -> str:
    """`std::ostream << double` with the default format (%g, 6 significant digits): 5 -> "5",
    0.25 -> "0.25", 1234567 -> "1.23457e+06"."""
    return f"{float(value):g}"


async def _server_error(request: Request, exc: ServerError):
    return error_response(exc)


async def _client_gone(request: Request, exc: ClientGone):
    return Response(b"", 499)


async def _upload_gone(request: Request, exc: ClientDisconnect):
    """A client that disconnects mid-upload: one INFO line, no traceback."""
    client = request.client.host if request.client else "-"
    log.info(f"srv  log_server_r: {request.method} {request.url.path} {client}: client "
             "disconnected before the request body was complete")
    return Response(b"", 499)


async def _too_large(request: Request, exc: BodyTooLarge):
    return error_response(body_too_large(exc.size, exc.limit))


async def _http_error(request: Request, exc: HTTPException):
    if exc.status_code in (404, 405):
        return error_response(ServerError(404, "File Not Found"))
    return error_response(ServerError(exc.status_code, str(exc.detail)))


async def _any_error(request: Request, exc: Exception):
    log.error(f"srv  operator(): unhandled exception: {exc!r}")
    return error_response(ServerError(500, str(exc) or type(exc).__name__))


def create_app(cfg, engine: Engine, tools=None) -> Gate:
    """The ASGI application: routes inside the Gate middleware; `tools`: the /tools handlers
    (pyllama/server/tools_builtin.py), None for llama.cpp's 403."""
    s = Server(cfg, engine)
    post, get = ["POST"], ["GET"]
    routes = [
        Route("/", s.index, methods=get), Route("/index.html", s.index, methods=get),
        *(Route(path, s.web_asset, methods=get) for path in WEB_ASSETS),
        Route("/health", s.health, methods=get), Route("/v1/health", s.health, methods=get),
        Route("/props", s.props, methods=["GET", "POST"]),
        Route("/models", s.models, methods=get), Route("/v1/models", s.models, methods=get),
        Route("/slots", s.slots, methods=get),
        Route("/slots/{id_slot}", s.slot_action, methods=post),
        Route("/metrics", s.metrics, methods=get),
        Route("/tokenize", s.tokenize_route, methods=post),
        Route("/detokenize", s.detokenize, methods=post),
        Route("/apply-template", s.apply_template, methods=post),
        Route("/completion", s.completion, methods=post),
        Route("/completions", s.completion, methods=post),
        Route("/v1/completions", s.oai_completion, methods=post),
        Route("/chat/completions", s.chat, methods=post),
        Route("/v1/chat/completions", s.chat, methods=post),
        Route("/chat/completions/input_tokens", s.input_tokens, methods=post),
        Route("/v1/chat/completions/input_tokens", s.input_tokens, methods=post),
        Route("/cors-proxy", cors_proxy.make_handler(cfg.ui_mcp_proxy), methods=["GET", "POST"]),
        Route("/embedding", s.embeddings, methods=post),
        Route("/embeddings", s.embeddings, methods=post),
        Route("/v1/embeddings", s.embeddings_oai, methods=post),
    ] + [Route(p, s.rerank, methods=post) for p in (
        "/rerank", "/reranking", "/v1/rerank", "/v1/reranking")] + [
        Route("/infill", s.infill, methods=post),
        Route("/v1/messages", s.anthropic_messages, methods=post),
        Route("/v1/chat/completions/control", s.chat_control, methods=post),
        Route("/lora-adapters", s.lora_adapters, methods=["GET", "POST"]),
        Route("/v1/audio/transcriptions", s.transcriptions, methods=post),
        Route("/audio/transcriptions", s.transcriptions, methods=post),
        Route("/v1/stream", s.stream_get, methods=get),
        Route("/v1/stream", s.stream_delete, methods=["DELETE"]),
        Route("/v1/streams/lookup", s.streams_lookup, methods=post),
        Route("/v1/responses", s.responses, methods=post),
        Route("/responses", s.responses, methods=post),
        Route("/v1/responses/input_tokens", s.responses_input_tokens, methods=post),
        Route("/responses/input_tokens", s.responses_input_tokens, methods=post),
        Route("/v1/messages/count_tokens", s.anthropic_count_tokens, methods=post),
        *tools_builtin.routes(tools)]
    if gcp.enabled():
        posts = {r.path: r.endpoint for r in routes if "POST" in (r.methods or ()) and
                 "{" not in r.path}
        routes += [Route(p, e, methods=m) for p, e, m in gcp.routes(posts, s.health)]
    app = Starlette(routes=routes, exception_handlers={
        ServerError: _server_error, ClientGone: _client_gone, HTTPException: _http_error,
        ClientDisconnect: _upload_gone, BodyTooLarge: _too_large, Exception: _any_error})
    return Gate(app, s)
