"""llama-server: an OpenAI- and llama.cpp-compatible HTTP server over one engine thread.

`serve(ServerConfig) -> exit code` starts uvicorn first (so /health answers 503 while the model
loads), loads the model in the engine thread, and stops gracefully on SIGINT/SIGTERM.
"""
from __future__ import annotations

import os

from .config import ServerConfig

__all__ = ["ServerConfig", "serve"]


def serve(cfg: ServerConfig) -> int:
    """Run the server until SIGINT/SIGTERM; 0 on a clean stop, 1 when the model fails to load."""
    import uvicorn

    from ..log import get_logger
    from .app import create_app
    from .engine import Engine

    log = get_logger("server")
    engine = Engine(cfg)
    app = create_app(cfg, engine)
    uds = cfg.host if cfg.host.endswith(".sock") else None   # llama.cpp: a UNIX socket path
    config = uvicorn.Config(app, host=cfg.host, port=cfg.port, uds=uds, log_level="warning",
                            access_log=False, timeout_graceful_shutdown=3,
                            lifespan="off", ws="none", server_header=False,
                            date_header=False,   # cpp-httplib sends no Date either
                            http=read_timeout_protocol(cfg.timeout))
    server = _Uvicorn(config)
    engine.on_fatal = lambda: setattr(server, "should_exit", True)
    if cfg.port == 8080:
        log.warning("srv  llama_server: the default port of llama.cpp will change to 9931")
    if not cfg.api_keys and cfg.cors_origins == "*":
        log.warning("srv  llama_server: no API key set and CORS allows every origin")
    engine.start()
    _quiet_signals()
    try:
        server.run()
    finally:
        engine.stop()
        if uds and os.path.exists(uds):
            os.unlink(uds)
    return 1 if engine.load_error is not None or not server.started else 0


def _quiet_signals() -> None:
    """uvicorn re-raises the signal that stopped it once it has shut down; with these handlers in
    place that re-raise is a no-op, so a graceful SIGINT/SIGTERM stop exits 0 like llama.cpp."""
    import signal
    import threading
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: None)


class _Uvicorn:
    """uvicorn.Server that logs llama.cpp's `listening on` line with the real port."""

    def __new__(cls, config):
        import uvicorn

        class Server(uvicorn.Server):
            async def startup(self, sockets=None):
                await super().startup(sockets)
                from ..log import get_logger
                for srv in getattr(self, "servers", []):
                    for sock in srv.sockets:
                        name = sock.getsockname()
                        where = name if isinstance(name, str) else f"http://{name[0]}:{name[1]}"
                        get_logger("server").info(f"srv  llama_server: listening on {where}")
            def handle_exit(self, sig, frame):
                import signal
                import sys
                if self.should_exit and sig == signal.SIGINT:
                    print("Received second interrupt, terminating immediately.", file=sys.stderr)
                    os._exit(1)
                from ..log import get_logger
                get_logger("server").info("srv  operator(): received signal, shutting down")
                super().handle_exit(sig, frame)
        return Server(config)


def read_timeout_protocol(timeout: float):
    """uvicorn's h11 protocol with llama.cpp's read timeout (-to, httplib's set_read_timeout): a
    connection whose request is incomplete (headers or body still arriving, or nothing sent yet)
    and that receives nothing for `timeout` seconds is closed. A request being answered is not
    affected; an idle keep-alive connection closes after uvicorn's keep-alive timeout (5 s, as
    httplib's)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ReadTimeoutProtocol(H11Protocol):
        _read_timer = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._arm()

        def connection_lost(self, exc) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
            super().connection_lost(exc)

        def _arm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
            if timeout > 0:
                self._read_timer = self.loop.call_later(timeout, self._read_timed_out)

        def _read_timed_out(self) -> None:
            self._read_timer = None
            cycle = self.cycle
            reading = cycle is None or cycle.response_complete or cycle.more_body
            if reading and not self.transport.is_closing():
                self.transport.close()

    return ReadTimeoutProtocol
