"""CORS as llama.cpp 0c1e570's server-http.cpp does it (--cors-origins '*' with credentials
echoes the Origin; 'localhost' echoes only localhost origins; a list is sent as given), header
names on the wire spelled as cpp-httplib writes them, and /cors-proxy (403 unless
--ui-mcp-proxy; forwards only x-llama-server-proxy-header-* headers)."""
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from server_proc import ServerProc

PREFLIGHT = {"Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "Authorization"}


@pytest.fixture(scope="module")
def localhost_server(tiny_llama):
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "-t", "1", "--cors-origins",
                    "localhost", "--ui-mcp-proxy", "--api-key", "k1"]).wait_ready()
    yield s
    assert s.stop() == 0


def _raw_head(url: str, request: bytes) -> bytes:
    host, port = url.split("//")[1].split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n\r\n", 1)[0]


def test_header_names_on_the_wire(server):
    head = _raw_head(server.url, b"GET /health HTTP/1.1\r\nHost: x\r\nOrigin: http://a.b\r\n\r\n")
    names = [ln.split(b":", 1)[0] for ln in head.split(b"\r\n")[1:]]
    assert b"Access-Control-Allow-Origin" in names and b"Server" in names
    assert b"Content-Type" in names and b"Content-Length" in names
    assert all(n[:1].isupper() for n in names), names
    head = _raw_head(server.url, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"\r\nProcess-Start-Time-Unix: " in head


@pytest.mark.parametrize("origin", ["http://localhost", "http://localhost:8080",
                                    "http://127.0.0.1:3000", "http://[::1]", "http://[::1]:3000"])
def test_localhost_origins_reflect(localhost_server, origin):
    r = httpx.options(localhost_server.url + "/completions", headers={"Origin": origin,
                                                                      **PREFLIGHT})
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == origin


@pytest.mark.parametrize("origin", ["http://evil.com", "http://notlocalhost",
                                    "http://localhost.evil.com", "localhost"])
def test_other_origins_get_no_header(localhost_server, origin):
    r = httpx.options(localhost_server.url + "/completions", headers={"Origin": origin,
                                                                      **PREFLIGHT})
    assert r.status_code == 200
    assert "Access-Control-Allow-Origin" not in r.headers


def test_cors_proxy_forwards_only_named_headers(localhost_server):
    seen = {}

    class Capture(BaseHTTPRequestHandler):
        def do_GET(self):
            seen.update({k.lower(): v for k, v in self.headers.items()})
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *a):
            pass

    target = ThreadingHTTPServer(("127.0.0.1", 0), Capture)
    threading.Thread(target=target.serve_forever, daemon=True).start()
    try:
        r = httpx.get(localhost_server.url + "/cors-proxy", params={
            "url": f"http://127.0.0.1:{target.server_port}/capture"}, headers={
            "Authorization": "Bearer k1", "Proxy-Authorization": "Basic secret",
            "X-Api-Key": "k1", "Cookie": "session=secret",
            "x-llama-server-proxy-header-accept": "application/json",
            "x-llama-server-proxy-header-authorization": "Bearer explicit"}, timeout=60)
    finally:
        target.shutdown()
        target.server_close()
    assert r.status_code == 200 and r.text == "ok"
    assert seen["accept"] == "application/json"
    assert seen["authorization"] == "Bearer explicit"
    assert not {"proxy-authorization", "x-api-key", "cookie"} & set(seen)


def test_cors_proxy_to_the_server_itself(localhost_server):
    r = httpx.get(localhost_server.url + "/cors-proxy", params={
        "url": localhost_server.url + "/health"}, headers={"Authorization": "Bearer k1"},
        timeout=60)
    assert r.status_code == 200 and r.json()["status"] == "ok"


def test_cors_proxy_disabled_is_403(client):
    r = client.get("/cors-proxy")
    assert r.status_code == 403
    assert r.json() == {"error": {"message": "this feature is disabled",
                                  "type": "feature_disabled"}}
    assert client.get("/props").json()["cors_proxy_enabled"] is False
