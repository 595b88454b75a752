"""Graceful drain on SIGTERM/SIGINT (a pyllama extension: llama.cpp's server stops at once).

The first signal starts a drain: the listening sockets stay open, but every new request except
/health is answered 503 in llama.cpp's "unavailable" error shape and /health answers 503
"Server is draining" (so a load balancer or a Kubernetes readiness probe takes the process out
of rotation). Requests already in flight run to their end for up to --drain-timeout seconds;
those still running then are ended with an error (a JSON error body, or a final SSE error event
on a stream) and the server exits 0. A second SIGTERM ends the drain at once; a second SIGINT
still kills the process (exit 1).

The drain is driven from uvicorn's main-loop tick (pyllama/server/__init__.py), so the signal
handler itself only flips state.
"""
from __future__ import annotations

import time

from .schemas import ServerError

DRAINING = "Server is draining"
SHUTTING_DOWN = "server is shutting down (--drain-timeout exceeded)"
ABORT_GRACE = 5.0      # seconds given to aborted requests to write their error before exiting


def draining_error() -> ServerError:
    return ServerError(503, DRAINING)


class Drain:
    """In-flight request count and the drain state machine (all on the event loop thread,
    except begin() which a signal handler calls between bytecodes of that same thread)."""

    def __init__(self, timeout: float):
        self.timeout = max(0.0, float(timeout))
        self.inflight = 0
        self.started_at: float | None = None
        self.aborted_at: float | None = None

    @property
    def active(self) -> bool:
        return self.started_at is not None

    def begin(self) -> bool:
        """Start draining; False when already draining (then the deadline is brought forward:
        a second signal ends the drain now)."""
        if self.started_at is None:
            self.started_at = time.monotonic()
            return True
        self.timeout = 0.0
        return False

    def poll(self, engine) -> bool:
        """One tick of an active drain: True once the server may exit."""
        if self.inflight == 0:
            return True
        now = time.monotonic()
        if now - self.started_at >= self.timeout:
            if self.aborted_at is None:
                self.aborted_at = now
            abort_all(engine, ServerError(503, SHUTTING_DOWN))   # again each tick: late arrivals
            return now - self.aborted_at >= ABORT_GRACE
        return False


def abort_all(engine, err: ServerError) -> None:
    """End every task the engine holds (queued, pending or in a slot) with `err`: the task is
    cancelled (the engine frees its slot on its next step) and its handler receives the error,
    which it answers as a JSON error or a final SSE error event."""
    tasks = list(engine.tasks.queue) + list(engine.pending) + [
        s.task for s in list(engine.slots) if s.busy]
    for t in tasks:
        if t is not None and not t.cancelled:
            t.cancelled = True
            t.channel.put(err)
