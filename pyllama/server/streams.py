"""Resumable streams (llama.cpp 0c1e570 tools/server/server-stream.cpp): a completion request
that carries an `X-Conversation-Id` header gets its SSE bytes kept in a per-conversation buffer
that outlives the HTTP connection. The generation keeps running when the client drops; a client
re-attaches with `GET /v1/stream?conv_id=<id>&from=N` (the buffered bytes from byte offset N, then
the live ones until the generation ends), asks `POST /v1/streams/lookup {"conversation_ids":
[...]}` about the ids it owns (each id matches itself and any `<id>::<model>`), and stops a
generation with `DELETE /v1/stream?conv_id=<id>` (cancel + evict, 204, idempotent).

Limits as llama.cpp's: 4 MiB of bytes kept per session (the oldest drop first; a `from` below
the dropped prefix is 400), a finished session lives 300 s (collected every 60 s), a new request
on the same conversation id cancels and replaces the old session. A request that fails before
it streams (or does not stream) leaves no session behind.

Everything runs on the server's event loop: the producer is an asyncio task that drains the
response's chunk generator into the session and tees each chunk to the original client while it
is connected; cancelling the session cancels that task, whose generator then frees the slot.
"""
from __future__ import annotations

import asyncio
import time
from typing import AsyncIterator

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from . import schemas as S
from .schemas import ServerError

STREAM_SESSION_TTL_SECONDS = 300
STREAM_SESSION_MAX_BYTES = 4 * 1024 * 1024
STREAM_SESSION_GC_INTERVAL_SECONDS = 60
STREAM_READ_WAKE_INTERVAL_MS = 200
HEADER = "x-conversation-id"
NOT_FOUND = "File Not Found"
_JSON = "application/json; charset=utf-8"


class StreamSession:
    """A bounded byte buffer of one generation (stream_session)."""

    def __init__(self, conversation_id: str, max_bytes: int):
        self.conversation_id = conversation_id
        self.started_ts = int(time.time())
        self.buffer = bytearray()
        self.prefix_dropped = 0
        self.cap_bytes = max_bytes
        self.done = False
        self.cancelled = False
        self.completed_ts = 0
        self.producer: asyncio.Task | None = None
        self._wake = asyncio.Event()

    def _notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    def append(self, data: bytes) -> bool:
        if not data:
            return True
        if self.done:
            return False
        n = len(data)
        if n >= self.cap_bytes:          # one chunk over the cap: keep the tail that fits
            skip = n - self.cap_bytes
            self.prefix_dropped += len(self.buffer) + skip
            self.buffer = bytearray(data[skip:])
        else:
            over = len(self.buffer) + n - self.cap_bytes
            if over > 0:
                del self.buffer[:over]
                self.prefix_dropped += over
            self.buffer += data
        self._notify()
        return True

    def finalize(self) -> None:
        if self.done:
            return
        self.done = True
        self.completed_ts = int(time.time())
        self._notify()

    def cancel(self) -> None:
        """Stop the producer (and so the generation); readers see the end via finalize()."""
        self.cancelled = True
        if self.producer is not None and not self.producer.done():
            self.producer.cancel()

    @property
    def total_size(self) -> int:
        return self.prefix_dropped + len(self.buffer)

    async def read_from(self, offset: int) -> AsyncIterator[bytes]:
        """The bytes from `offset` on as they arrive, until the session is finalized; stops
        (without an error: the HTTP status is already sent) when `offset` falls below the
        dropped prefix."""
        while True:
            if offset < self.prefix_dropped:
                return
            end = self.total_size
            if offset < end:
                chunk = bytes(self.buffer[offset - self.prefix_dropped:])
                offset = end
                yield chunk
                continue
            if self.done:
                return
            try:
                await asyncio.wait_for(self._wake.wait(), STREAM_READ_WAKE_INTERVAL_MS / 1000)
            except asyncio.TimeoutError:
                pass

    def to_json(self) -> dict:
        return {"conversation_id": self.conversation_id, "is_done": self.done,
                "total_bytes": self.total_size, "started_at": self.started_ts,
                "completed_at": self.completed_ts}


class StreamSessions:
    """All live sessions of a server, keyed by conversation id (stream_session_manager)."""

    def __init__(self, max_bytes: int = STREAM_SESSION_MAX_BYTES,
                 ttl: float = STREAM_SESSION_TTL_SECONDS,
                 gc_interval: float = STREAM_SESSION_GC_INTERVAL_SECONDS):
        self.max_bytes, self.ttl, self.gc_interval = max_bytes, ttl, gc_interval
        self.sessions: dict[str, StreamSession] = {}
        self._gc: asyncio.Task | None = None

    def create_or_replace(self, conversation_id: str) -> StreamSession:
        """A fresh session; an earlier one of the same conversation is cancelled."""
        fresh = StreamSession(conversation_id, self.max_bytes)
        previous = self.sessions.get(conversation_id)
        self.sessions[conversation_id] = fresh
        if previous is not None:
            previous.cancel()
            previous.finalize()
        if self._gc is None or self._gc.done():
            self._gc = asyncio.get_running_loop().create_task(self._gc_loop())
        return fresh

    def get(self, conversation_id: str) -> StreamSession | None:
        return self.sessions.get(conversation_id)

    def evict(self, conversation_id: str, session: StreamSession | None = None) -> None:
        """Drop a session (only `session` when given: a newer one of the id stays)."""
        s = self.sessions.get(conversation_id)
        if s is None or (session is not None and s is not session):
            return
        del self.sessions[conversation_id]
        s.finalize()

    def evict_and_cancel(self, conversation_id: str) -> None:
        s = self.sessions.pop(conversation_id, None)
        if s is None:
            from ..log import get_logger
            get_logger("server").warning(
                f"srv  evict_and_cancel: stop on unknown stream session, conv_id="
                f"{conversation_id} matched nothing, {len(self.sessions)} live: ["
                f"{', '.join(self.sessions)}]")
            return
        s.cancel()
        s.finalize()

    def collect(self, now: float | None = None) -> None:
        """Drop the sessions finished at least `ttl` seconds ago."""
        cutoff = (time.time() if now is None else now) - self.ttl
        for cid, s in list(self.sessions.items()):
            if s.completed_ts != 0 and s.completed_ts <= cutoff:
                del self.sessions[cid]
                s.finalize()

    async def _gc_loop(self) -> None:
        while True:
            await asyncio.sleep(self.gc_interval)
            self.collect()

    def stop(self) -> None:
        """Finalize every session so that no reader waits forever."""
        if self._gc is not None:
            self._gc.cancel()
        sessions, self.sessions = list(self.sessions.values()), {}
        for s in sessions:
            s.finalize()


def conv_id_of(request: Request) -> str:
    """The X-Conversation-Id header (any case), '' when absent."""
    return request.headers.get(HEADER, "")


class Wire:
    """The original client's end of a producer: chunks while it is connected."""

    def __init__(self):
        self.q: asyncio.Queue = asyncio.Queue()
        self.attached = True

    def put(self, chunk: bytes | None) -> None:
        if self.attached:
            self.q.put_nowait(chunk)

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            while True:
                chunk = await self.q.get()
                if chunk is None:
                    return
                yield chunk
        finally:
            self.attached = False        # a dropped client: the producer keeps the session


def attach(session: StreamSession, chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """Run `chunks` (a response's SSE generator) into `session` on its own task; the returned
    iterator is the live copy for the requesting client (server_res_spipe's tee)."""
    wire = Wire()

    async def produce():
        try:
            async for chunk in chunks:
                if chunk:
                    session.append(chunk)
                    wire.put(chunk)
                if session.cancelled:
                    break
        except asyncio.CancelledError:
            pass
        finally:
            await chunks.aclose()        # the generator's cleanup cancels the engine tasks
            session.finalize()
            wire.put(None)
    session.producer = asyncio.get_running_loop().create_task(produce())
    return wire.chunks()


def _error(code: int, message: str) -> Response:
    return Response(msgspec.json.encode(ServerError(code, message).body()), status_code=code,
                    media_type=_JSON)


def strtoull(text: str) -> int:
    """std::stoull: leading spaces, an optional sign, decimal digits (the rest ignored); a
    minus wraps modulo 2**64; no digits or a value past 2**64-1 raise ValueError."""
    s = text.lstrip(" \t\n\v\f\r")
    neg = s[:1] == "-"
    if s[:1] in "+-" and s:
        s = s[1:]
    n = 0
    while n < len(s) and "0" <= s[n] <= "9":
        n += 1
    if n == 0:
        raise ValueError(text)
    v = int(s[:n])
    if v > 2**64 - 1:
        raise ValueError(text)
    return (-v) % 2**64 if neg else v


async def get_stream(sessions: StreamSessions, request: Request):
    """GET /v1/stream?conv_id=<id>&from=N."""
    conv_id = request.query_params.get("conv_id", "")
    if not conv_id:
        return _error(400, "Missing conversation id in path")
    session = sessions.get(conv_id)
    if session is None:      # "Stream not found or expired", which cpp-httplib's 404 handler
        return _error(404, NOT_FOUND)    # (server-http.cpp) replaces on the wire
    offset = 0
    raw = request.query_params.get("from", "")
    if raw:
        try:
            offset = strtoull(raw)
        except ValueError:
            return _error(400, "Invalid 'from' offset")
    if offset < session.prefix_dropped:
        return _error(400, "Stream offset lost, please restart")
    return StreamingResponse(session.read_from(offset), media_type="text/event-stream",
                             headers={"X-Accel-Buffering": "no"})


def requested_ids(raw: bytes) -> list[str]:
    """The non-empty strings of the body's `conversation_ids` array; ServerError(400) when the
    body is not JSON."""
    try:
        body = S.decode_body(raw, object)
    except ServerError as e:
        raise ServerError(400, f"invalid body: {e.message}") from None
    ids = body.get("conversation_ids") if isinstance(body, dict) else None
    if not isinstance(ids, list):
        return []
    return [v for v in ids if isinstance(v, str) and v]


async def lookup(sessions: StreamSessions, request: Request):
    """POST /v1/streams/lookup: the sessions of the ids asked about (never a listing)."""
    try:
        ids = requested_ids(await request.body())
    except ServerError as e:     # llama.cpp answers this one without a "code" field
        return Response(msgspec.json.encode({"error": {"message": e.message,
                                                 "type": "invalid_request_error"}}),
                        status_code=400, media_type=_JSON)
    out = []
    every = list(sessions.sessions.values())
    for rid in ids:
        for s in every:
            if s.conversation_id == rid or s.conversation_id.startswith(rid + "::"):
                out.append(s.to_json())
    return Response(msgspec.json.encode(out), media_type=_JSON)


async def delete_stream(sessions: StreamSessions, request: Request):
    """DELETE /v1/stream?conv_id=<id>: the user's Stop; 204 even for an unknown id."""
    conv_id = request.query_params.get("conv_id", "")
    if not conv_id:
        return _error(400, "Missing conversation id in path")
    sessions.evict_and_cancel(conv_id)
    return Response(b"", status_code=204, media_type="application/json")
