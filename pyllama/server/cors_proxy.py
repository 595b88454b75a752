"""GET/POST /cors-proxy?url=...: llama.cpp's experimental MCP CORS proxy for the Web UI
(tools/server/server-cors-proxy.h). Off unless --ui-mcp-proxy (then 403 "this feature is
disabled"). Only the request headers spelled `x-llama-server-proxy-header-NAME` are forwarded
(as NAME): the caller's Authorization, cookies and API key never reach the target."""
from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from .schemas import ServerError

PREFIX = "x-llama-server-proxy-header-"
TIMEOUT_S = 600   # llama.cpp's timeout_read / timeout_write


def forwarded_headers(headers) -> dict:
    """The headers the proxy sends: NAME for each x-llama-server-proxy-header-NAME."""
    out = {}
    for key, value in headers.items():
        if key.lower().startswith(PREFIX) and len(key) > len(PREFIX):
            out[key[len(PREFIX):]] = value
    return out


def target(url: str):
    """(scheme, host, port, path) as common_http_parse_url splits it; ValueError otherwise."""
    if "://" not in url:
        raise ValueError("invalid URL: no scheme")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme: {parts.scheme}")
    if not parts.hostname:
        raise ValueError("invalid target URL: missing host")
    if parts.password:
        raise ValueError("authentication in target URL is not supported")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), \
        path


def _fetch(method: str, url: str, headers: dict, body: bytes):
    scheme, host, port, path = target(url)
    cls = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    conn = cls(host, port, timeout=TIMEOUT_S)
    try:
        conn.request(method, path, body=body if method == "POST" else None, headers=headers)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    finally:
        conn.close()


def make_handler(enabled: bool):
    async def cors_proxy(request: Request):
        if not enabled:   # llama.cpp's res_403 body: no "code" field
            return Response(json.dumps({"error": {"message": "this feature is disabled",
                                                  "type": "feature_disabled"}}),
                            status_code=403, media_type="application/json; charset=utf-8")
        body = await request.body() if request.method == "POST" else b""
        try:
            status, ctype, data = await run_in_threadpool(
                _fetch, request.method, request.query_params.get("url", ""),
                forwarded_headers(request.headers), body)
        except (ValueError, OSError, http.client.HTTPException) as e:
            raise ServerError(500, str(e)) from None
        return Response(data, status_code=status, media_type=ctype)
    return cors_proxy
