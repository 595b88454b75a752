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
    from .tools_builtin import setup as setup_tools

    log = get_logger("server")
    tools, mcp = setup_tools(cfg)    # --tools / --mcp-servers-*: before the model, as server.cpp
    engine = Engine(cfg)
    app = create_app(cfg, engine, tools)
    hosts = [h.strip() for h in cfg.host.split(",") if h.strip()] or ["127.0.0.1"]
    uds = hosts[0] if len(hosts) == 1 and hosts[0].endswith(".sock") else None  # a UNIX socket
    # our own sockets for several addresses, and for --reuse-port (uvicorn sets no SO_REUSEPORT)
    sockets = _bind_all(hosts, cfg.port, cfg.reuse_port) \
        if len(hosts) > 1 or (cfg.reuse_port and uds is None) else None
    config = uvicorn.Config(app, host=hosts[0], port=cfg.port, uds=uds, log_level="warning",
                            **_tls(cfg),
                            access_log=False, timeout_graceful_shutdown=3,
                            lifespan="off", ws="none", server_header=False,
                            date_header=False,   # cpp-httplib sends no Date either
                            http=read_timeout_protocol(cfg.timeout))
    server = _Uvicorn(config, app.server.drain, engine,
                      on_signal=mcp.cancel if mcp is not None else None)
    engine.on_fatal = lambda: setattr(server, "should_exit", True)
    if cfg.port == 8080:
        log.warning("srv  llama_server: the default port of llama.cpp will change to 9931")
    if not cfg.api_keys and cfg.cors_origins == "*":
        log.warning("srv  llama_server: no API key set and CORS allows every origin")
    engine.start()
    _quiet_signals()
    try:
        server.run(sockets=sockets)
    finally:
        engine.stop()
        if tools is not None:
            tools.close()
        if mcp is not None:
            mcp.shutdown()
        for path in [uds] + [h for h in hosts if h.endswith(".sock")]:
            if path and os.path.exists(path):
                os.unlink(path)
    return 1 if engine.load_error is not None or not server.started else 0


def _tls(cfg: ServerConfig) -> dict:
    """uvicorn's TLS settings: HTTPS only when both --ssl-key-file and --ssl-cert-file are
    given (server-http.cpp); an unreadable or mismatched pair fails the start with one line."""
    if not (cfg.ssl_key_file and cfg.ssl_cert_file):
        return {}
    import ssl
    try:
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
            cfg.ssl_cert_file, cfg.ssl_key_file)
    except (OSError, ssl.SSLError) as e:
        raise SystemExit(f"error: failed to load the SSL certificate {cfg.ssl_cert_file!r} "
                         f"and key {cfg.ssl_key_file!r}: {e}") from None
    return {"ssl_keyfile": cfg.ssl_key_file, "ssl_certfile": cfg.ssl_cert_file}


def _bind_all(hosts: list[str], port: int, reuse_port: bool = False) -> list:
    """One listening socket per --host address (llama.cpp 0c1e570: a comma-separated list; UNIX
    socket paths end in .sock; with several TCP addresses '::' binds IPv6 only; port 0 takes
    the first address's free port for all)."""
    import socket
    out = []
    for host in hosts:
        if host.endswith(".sock"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            if os.path.exists(host):
                os.unlink(host)
            sock.bind(host)
        else:
            name = host.strip("[]")
            family = socket.AF_INET6 if ":" in name else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:      # --reuse-port: several processes share the port (the kernel
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)   # spreads accepts)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind((name, port))
            except OSError as e:
                sock.close()
                for s in out:
                    s.close()
                raise SystemExit(f"couldn't bind HTTP server socket, hostname: {host}, "
                                 f"port: {port} ({e})") from None
            port = sock.getsockname()[1]
        sock.listen(512)
        sock.set_inheritable(True)
        out.append(sock)
    return out


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

    def __new__(cls, config, drain=None, engine=None, on_signal=None):
        import uvicorn

        class Server(uvicorn.Server):
            async def startup(self, sockets=None):
                await super().startup(sockets)
                from ..log import get_logger
                for srv in getattr(self, "servers", []):
                    for sock in srv.sockets:
                        name = sock.getsockname()
                        scheme = "https" if self.config.is_ssl else "http"
                        where = name if isinstance(name, str) else \
                            f"{scheme}://{name[0]}:{name[1]}"
                        get_logger("server").info(f"srv  llama_server: listening on {where}")
            def handle_exit(self, sig, frame):
                import signal
                import sys
                from ..log import get_logger
                if on_signal is not None:      # MCP calls in flight end now (server.cpp)
                    on_signal()
                if (self.should_exit or (drain and drain.active)) and sig == signal.SIGINT:
                    print("Received second interrupt, terminating immediately.", file=sys.stderr)
                    os._exit(1)
                if drain is not None and self.started and not self.should_exit:
                    # pyllama/server/drain.py: on_tick below ends the drain
                    if drain.begin():
                        get_logger("server").info(
                            "srv  operator(): received signal, draining (up to "
                            f"{drain.timeout:g} s for {drain.inflight} request(s) in flight)")
                    return
                get_logger("server").info("srv  operator(): received signal, shutting down")
                super().handle_exit(sig, frame)

            async def on_tick(self, counter: int) -> bool:
                if drain is not None and drain.active and not self.should_exit \
                        and drain.poll(engine):
                    from ..log import get_logger
                    get_logger("server").info("srv  operator(): drained, shutting down")
                    self.should_exit = True
                return await super().on_tick(counter)
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
