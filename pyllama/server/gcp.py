"""Google Cloud Vertex AI compatibility (llama.cpp's register_gcp_compat, server-http.cpp): with
AIP_MODE=PREDICTION the server listens on AIP_HTTP_PORT, answers AIP_HEALTH_ROUTE like /health,
and POST AIP_PREDICT_ROUTE (default /predict) takes {"instances": [...]}: each instance names a
route by "@requestFormat" (camelCase alias such as "chatCompletions", or the path), runs it
without streaming, and the answers come back in order as {"predictions": [...]}."""
from __future__ import annotations

import asyncio
import json
import os

from starlette.requests import Request
from starlette.responses import Response

from .schemas import ServerError

MAX_INSTANCES = 128


def enabled(env=os.environ) -> bool:
    return env.get("AIP_MODE", "") == "PREDICTION"


def _route_env(name: str, default: str, env) -> str:
    value = env.get(name) or default
    return value if not value or value.startswith("/") else "/" + value


def port(default: int, env=os.environ) -> int:
    return int(env.get("AIP_HTTP_PORT") or 8080) if enabled(env) else default


def alias(path: str) -> str:
    """path_to_gcp_format: '/v1/chat/completions' -> 'chatCompletions'."""
    s = path[3:] if path.startswith("/v1") and len(path) > 3 else path
    s = s[1:] if s.startswith("/") else s
    out, cap = "", False
    for c in s.split(":", 1)[0]:
        if c in "/-_":
            cap = True
        else:
            out += c.upper() if cap else c
            cap = False
    return out


def _error(message: str, code: int = 400) -> dict:
    return {"error": ServerError(code, message).body()["error"]}


def routes(post_handlers: dict, health) -> list:
    """(path, endpoint, methods) to add: the predict route and the optional health alias."""
    env = os.environ
    predict_path = _route_env("AIP_PREDICT_ROUTE", "/predict", env)
    if predict_path in post_handlers:
        raise SystemExit(f"AIP_PREDICT_ROUTE={predict_path} conflicts with an existing "
                         "llama-server route")
    aliases: dict = {}
    for path in post_handlers:
        aliases.setdefault(alias(path), path)

    async def one(request: Request, instance) -> object:
        if not isinstance(instance, dict):
            return _error("each instance must be a JSON object")
        fmt = instance.get("@requestFormat")
        if not isinstance(fmt, str):
            return _error("each instance must include a string @requestFormat")
        payload = {k: v for k, v in instance.items() if k != "@requestFormat"}
        if "stream" in payload:
            payload["stream"] = False
        path = aliases.get(fmt) or (fmt if fmt in post_handlers else None)
        if path is None:
            return _error("no handler registered for @requestFormat: " + fmt)
        body = json.dumps(payload).encode()

        async def receive():
            return {"type": "http.request", "body": body, "more_body": False}
        scope = {**request.scope, "path": path, "query_string": b"", "method": "POST"}
        try:
            res = await post_handlers[path](Request(scope, receive))
        except ServerError as e:
            return {"error": e.body()["error"]}
        except Exception as e:  # noqa: BLE001 - one instance's failure is its prediction
            return _error(str(e), 500)
        data = getattr(res, "body", None)
        if data is None:
            return _error("predict route does not support streaming responses")
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            return data.decode("utf-8", "replace")

    async def predict(request: Request):
        try:
            data = json.loads(await request.body())
        except ValueError as e:
            return _json(_error(str(e)), 400)
        if not isinstance(data, dict):
            return _json(_error("request body must be a JSON object"), 400)
        instances = data.get("instances")
        if not isinstance(instances, list):
            return _json(_error("request body must include an array field named instances"), 400)
        if len(instances) > MAX_INSTANCES:
            return _json(_error(f"instances array exceeds maximum size of {MAX_INSTANCES}"), 400)
        preds = await asyncio.gather(*(one(request, i) for i in instances))
        return _json({"predictions": list(preds)}, 200)

    out = [(predict_path, predict, ["POST"])]
    health_path = _route_env("AIP_HEALTH_ROUTE", "", env)
    if health_path:
        out.append((health_path, health, ["GET"]))
    return out


def _json(obj, status: int) -> Response:
    return Response(json.dumps(obj), status_code=status,
                    media_type="application/json; charset=utf-8")
