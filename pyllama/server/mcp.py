"""MCP servers behind `/tools` (`--mcp-servers-config FILE`, `--mcp-servers-json JSON`), as
llama.cpp 0c1e570 tools/server/server-mcp.cpp.

The configuration is Cursor's: `{"mcpServers": {NAME: {"command", "args", "env", "cwd",
"timeout_ms"}}}` (a missing `mcpServers` is no server, an entry without `command` is skipped with a
warning, a name seen twice keeps the first; unparsable JSON or an unreadable file fails the start).
Each server is a child process speaking newline-delimited JSON-RPC 2.0 on stdin/stdout (MCP's
stdio transport, protocol 2024-11-05). At start-up every server is spawned once, initialized, asked
for `tools/list` (at most 10 s each) and stopped; its tools are offered as `<server>_<tool>`
(pyllama/server/tools_builtin.py). A call spawns the server on first use and keeps it; one that
died is spawned again, one that fails to spawn is not retried for 5 s ("MCP server unavailable").
Each call has the server's `timeout_ms` (default 30000; "request timed out"); replies are matched by
id, notifications and stale replies skipped. The result's text parts are joined into
`plain_text_response`; `isError` and JSON-RPC errors become `{"error": message}`. On shutdown
(SIGINT/SIGTERM) calls in flight return "cancelled" at once and the children are killed. Reads are
polled (50 ms) so that a grandchild holding the pipes open cannot hang the server.

Safety (llama.cpp's): nothing runs unless a config is given; the children get the server's
environment with the config's `env` over it; CORS defaults to localhost (tools/server.py).
"""
from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import threading
import time

from ..log import get_logger

log = get_logger("server")
PROTOCOL_VERSION = "2024-11-05"
COOLDOWN_SECONDS = 5
WARMUP_TIMEOUT_SECONDS = 10
MAX_LINE = 8 * 1024 * 1024
_EOF = object()


class ServerConfig:
    def __init__(self, name: str, command: str, args: list[str], env: dict[str, str], cwd: str,
                 timeout_ms: int):
        self.name, self.command, self.args = name, command, args
        self.env, self.cwd, self.timeout_ms = env, cwd, timeout_ms


def parse_config(text: str) -> list[ServerConfig]:
    """server_mcp_server_config::parse_cursor_format; raises ValueError on bad JSON or types."""
    try:
        j = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(str(e)) from None
    out = []
    if not isinstance(j, dict) or not isinstance(j.get("mcpServers"), dict):
        return out
    for name, cfg in j["mcpServers"].items():
        if not isinstance(cfg, dict):
            raise ValueError(f"server '{name}': not an object")
        command = cfg.get("command", "")
        cwd = cfg.get("cwd", "")
        timeout_ms = cfg.get("timeout_ms", 30000)
        if not isinstance(command, str) or not isinstance(cwd, str) or \
                not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool):
            raise ValueError(f"server '{name}': type error")
        args = cfg.get("args")
        args = args if isinstance(args, list) else []
        env = cfg.get("env")
        env = env if isinstance(env, dict) else {}
        if not all(isinstance(a, str) for a in args) or \
                not all(isinstance(v, str) for v in env.values()):
            raise ValueError(f"server '{name}': type must be string")
        if not command:
            log.warning(f"srv  MCP server '{name}' has no command, skipping")
            continue
        out.append(ServerConfig(name, command, list(args), dict(env), cwd, timeout_ms))
    return out


def _result_to_response(result) -> dict:
    text = ""
    content = result.get("content") if isinstance(result, dict) else None
    if isinstance(content, list):
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                if text:
                    text += "\n"
                t = part.get("text", "")
                text += t if isinstance(t, str) else ""
    if isinstance(result, dict) and result.get("isError") is True:
        return {"error": text or "MCP tool returned an error"}
    return {"plain_text_response": text}


def _rpc_error(resp: dict) -> str:
    e = resp.get("error")
    if isinstance(e, dict):
        m = e.get("message", "unknown error")
        return m if isinstance(m, str) else "unknown error"
    return e if isinstance(e, str) else "unknown error"


class StdioTransport:
    """One MCP server session over a child's stdio (server_mcp_stdio)."""

    def __init__(self, cfg: ServerConfig):
        self.cfg, self.name, self.timeout_ms = cfg, cfg.name, cfg.timeout_ms
        self.rpc_lock = threading.Lock()
        self.next_id, self.initialized, self.last_error = 1, False, ""
        self.tools: list[dict] = []
        self.replies: queue.Queue = queue.Queue(maxsize=65536)
        self.running = threading.Event()
        self.proc = None
        self.threads: list[threading.Thread] = []
        self.err_lock, self.err_tail = threading.Lock(), ""

    def start(self) -> bool:
        env = None
        if self.cfg.env:
            env = {**os.environ, **self.cfg.env}
        try:
            self.proc = subprocess.Popen([self.cfg.command, *self.cfg.args], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                         cwd=self.cfg.cwd or None, start_new_session=True)
        except (OSError, ValueError):
            log.warning(f"srv  MCP '{self.name}': failed to spawn '{self.cfg.command}'")
            return False
        os.set_blocking(self.proc.stdin.fileno(), False)
        self.running.set()
        for fn in (self._reader, self._errlog):
            t = threading.Thread(target=fn, daemon=True, name=f"mcp-{self.name}")
            t.start()
            self.threads.append(t)
        return True

    def is_alive(self) -> bool:
        return self.running.is_set()

    def diagnostics(self) -> str:
        out = self.last_error
        with self.err_lock:
            if self.err_tail:
                out += ("; " if out else "") + "last stderr: " + self.err_tail
        return out

    def _pump(self, f, on_line) -> None:
        """mcp_pump_ndjson: polled reads, one callback per non-empty line, over-long lines
        dropped, until EOF or close()."""
        fd = f.fileno()
        os.set_blocking(fd, False)
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        buf, skipping = b"", False
        while self.running.is_set():
            try:
                ev = poller.poll(50)
            except InterruptedError:
                continue
            if not ev:
                continue
            if ev[0][1] & (select.POLLERR | select.POLLNVAL):
                break
            try:
                data = os.read(fd, 4096)
            except BlockingIOError:
                continue
            except OSError:
                break
            if not data:
                break
            buf += data
            if skipping:
                nl = buf.find(b"\n")
                if nl == -1:
                    if len(buf) > MAX_LINE:
                        buf = b""
                    continue
                buf, skipping = buf[nl + 1:], False
            while (nl := buf.find(b"\n")) != -1:
                line, buf = buf[:nl].rstrip(b"\r"), buf[nl + 1:]
                if line and not on_line(line.decode("utf-8", errors="replace")):
                    return
            if len(buf) > MAX_LINE:
                log.warning(f"srv  MCP: dropping oversized line (> {MAX_LINE} bytes) from child "
                            "pipe")
                buf, skipping = b"", True

    def _reader(self) -> None:
        def put(line):
            try:
                self.replies.put_nowait(line)
            except queue.Full:
                pass
            return True
        self._pump(self.proc.stdout, put)
        self.running.clear()
        self.replies.put(_EOF)

    def _errlog(self) -> None:
        def keep(line):
            log.debug(f"srv  MCP '{self.name}' stderr: {line}")
            with self.err_lock:
                self.err_tail = (self.err_tail + line + "\n")[-4096:]
            return True
        self._pump(self.proc.stderr, keep)

    def _write(self, data: bytes) -> bool:
        """mcp_write_all: non-blocking, polled, gives up when the session closes."""
        fd = self.proc.stdin.fileno()
        total = 0
        while total < len(data) and self.running.is_set():
            try:
                n = os.write(fd, data[total:])
            except BlockingIOError:
                select.select([], [fd], [], 0.05)
                continue
            except InterruptedError:
                continue
            except OSError:
                return False
            if n == 0:
                return False
            total += n
        return total == len(data)

    def close(self) -> None:
        """Blocking and idempotent: the child is killed and reaped, the pumps joined."""
        if self.proc is None:
            return
        self.running.clear()
        try:
            os.killpg(self.proc.pid, 9)
        except OSError:
            try:
                self.proc.kill()
            except OSError:
                pass
        for t in self.threads:
            t.join()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass
        self.proc.wait()
        self.replies.put(_EOF)
        self.proc = None

    def send_rpc(self, request: dict, should_stop) -> dict:
        if not self.running.is_set() or not self._write((json.dumps(request) + "\n").encode()):
            return {"error": {"code": -32603, "message": "transport closed"}}
        has_id = "id" in request
        deadline = time.monotonic() + self.timeout_ms / 1000.0

        def stop():
            return (should_stop is not None and should_stop()) or time.monotonic() >= deadline
        while not stop():
            try:
                frame = self.replies.get(timeout=0.05)
            except queue.Empty:
                continue
            if frame is _EOF:
                self.replies.put(_EOF)
                break
            try:
                reply = json.loads(frame)
            except json.JSONDecodeError:
                continue
            if not isinstance(reply, dict):
                continue
            if not has_id or reply.get("id") == request["id"]:
                return reply
        if should_stop is not None and should_stop():
            return {"error": {"code": -32603, "message": "cancelled"}}
        if time.monotonic() >= deadline:
            return {"error": {"code": -32603, "message": "request timed out"}}
        return {"error": {"code": -32603, "message": "transport closed"}}

    def _ensure_init(self, should_stop) -> bool:
        if self.initialized:
            return True
        req = {"jsonrpc": "2.0", "id": self.next_id, "method": "initialize",
               "params": {"protocolVersion": PROTOCOL_VERSION, "capabilities": {},
                          "clientInfo": {"name": "llama.cpp", "version": "1.0"}}}
        self.next_id += 1
        resp = self.send_rpc(req, should_stop)
        if "result" not in resp:
            self.last_error = "initialize failed: " + _rpc_error(resp)
            return False
        self._write((json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})
                     + "\n").encode())
        self.initialized = True
        return True

    def list_tools(self, should_stop) -> list[dict]:
        with self.rpc_lock:
            if not self._ensure_init(should_stop):
                return []
            if self.tools:
                return self.tools
            req = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/list"}
            self.next_id += 1
            resp = self.send_rpc(req, should_stop)
            if "result" not in resp:
                self.last_error = "tools/list failed: " + _rpc_error(resp)
                return []
            result = resp["result"]
            tools = result.get("tools") if isinstance(result, dict) else None
            for t in tools if isinstance(tools, list) else []:
                if not isinstance(t, dict):
                    continue
                name, desc = t.get("name", ""), t.get("description", "")
                self.tools.append({"server_name": self.name,
                                   "name": name if isinstance(name, str) else "",
                                   "description": desc if isinstance(desc, str) else "",
                                   "input_schema": t.get("inputSchema")})
            return self.tools

    def call_tool(self, tool: str, arguments, should_stop) -> dict:
        with self.rpc_lock:
            if not self._ensure_init(should_stop):
                return {"error": self.last_error}
            req = {"jsonrpc": "2.0", "id": self.next_id, "method": "tools/call",
                   "params": {"name": tool, "arguments": arguments}}
            self.next_id += 1
            resp = self.send_rpc(req, should_stop)
            if "error" in resp:
                return {"error": _rpc_error(resp)}
            if "result" in resp:
                return _result_to_response(resp["result"])
            return {"error": "invalid response from MCP server"}


class McpManager:
    """server_mcp: the configured servers, their discovered tools, the live sessions."""

    def __init__(self, configs: list[ServerConfig]):
        self.configs = configs
        self.lock = threading.Lock()
        self.transports: dict[str, StdioTransport] = {}
        self.dead: dict[str, float] = {}
        self.registry: list[dict] = []
        self.stopping = threading.Event()

    @classmethod
    def start(cls, config_path: str = "", config_json: str = "") -> "McpManager":
        configs: list[ServerConfig] = []

        def append(text: str) -> None:
            try:
                parsed = parse_config(text)
            except ValueError as e:
                raise RuntimeError(f"failed to parse MCP config JSON: {e}") from None
            if not parsed:
                log.warning("srv  MCP config: no servers found in JSON")
            for p in parsed:
                if any(c.name == p.name for c in configs):
                    log.warning(f"srv  MCP config: duplicate server name '{p.name}', skipping")
                    continue
                configs.append(p)
        if config_path:
            try:
                with open(config_path, encoding="utf-8") as f:
                    text = f.read()
            except OSError:
                raise RuntimeError(f"failed to open MCP config file: {config_path}") from None
            append(text)
        if config_json:
            append(config_json)
        mgr = cls(configs)
        discovered = []
        for cfg in configs:
            t = StdioTransport(cfg)
            if not t.start():
                log.warning(f"srv  MCP warmup: failed to spawn '{cfg.name}': {t.diagnostics()}")
                continue
            deadline = time.monotonic() + WARMUP_TIMEOUT_SECONDS
            tools = t.list_tools(lambda: mgr.stopping.is_set() or time.monotonic() >= deadline)
            log.info(f"srv  MCP warmup: '{cfg.name}' discovered {len(tools)} tools")
            discovered += tools
            t.close()
        mgr.registry = discovered
        return mgr

    def empty(self) -> bool:
        return not self.configs

    def list_tools(self) -> list[dict]:
        with self.lock:
            return list(self.registry)

    def call_tool(self, server: str, tool: str, arguments, should_stop=None) -> dict:
        t = self._get_or_create(server)
        if t is None:
            return {"error": f"MCP server unavailable: {server}"}
        return t.call_tool(tool, arguments, lambda: self.stopping.is_set()
                           or (should_stop is not None and should_stop()))

    def _get_or_create(self, name: str):
        to_close, result = [], None
        with self.lock:
            if self.stopping.is_set():
                return None
            now = time.monotonic()
            if name in self.dead:
                if now < self.dead[name]:
                    return None
                del self.dead[name]
            t = self.transports.get(name)
            if t is not None:
                if t.is_alive():
                    return t
                log.warning(f"srv  MCP '{name}' is no longer alive: {t.diagnostics()}")
                to_close.append(self.transports.pop(name))
            cfg = next((c for c in self.configs if c.name == name), None)
            if cfg is not None:
                fresh = StdioTransport(cfg)
                if fresh.start() and fresh.is_alive():
                    self.transports[name] = result = fresh
                else:
                    log.warning(f"srv  MCP '{name}': failed to start: {fresh.diagnostics()}")
                    to_close.append(fresh)
                    self.dead[name] = now + COOLDOWN_SECONDS
        for t in to_close:
            t.close()
        return result

    def cancel(self) -> None:
        """server_mcp::shutdown: calls in flight return "cancelled" (before the HTTP drain)."""
        self.stopping.set()

    def shutdown(self) -> None:
        """Cancel, then kill and reap every child."""
        self.stopping.set()
        with self.lock:
            live = list(self.transports.values())
            self.transports.clear()
        for t in live:
            t.close()
