"""The small llama-server routes of 0c1e570 around the completion path: reasoning control
(`/v1/chat/completions/control`), LoRA adapters (`/lora-adapters`), and the
explicit refusal of what this server does not have (audio transcription).

llama.cpp counterpart: server_routes::post_control, get/post_lora_adapters,
post_transcriptions_oai (server-context.cpp).
"""
from __future__ import annotations

from . import schemas as S
from .schemas import invalid, not_supported


async def chat_control(server, request):
    """post_control: {"id": <chat completion id>, "action": "reasoning_end"} ends the thinking
    of a live completion that asked for `reasoning_control`."""
    from .app import json_response
    body = S.decode_body(await request.body(), object)
    body = body if isinstance(body, dict) else {}
    cid = body.get("id") if isinstance(body.get("id"), str) else ""
    action = body.get("action") if isinstance(body.get("action"), str) else ""
    if not cid:
        raise invalid("missing completion id")
    if action != "reasoning_end":
        raise invalid("unknown control action")
    tasks = server.live.get(cid)
    if not tasks:
        return json_response({"success": False, "message": "no active completion for this id"})
    params = tasks[0].params
    if params.reasoning_budget is None or not params.reasoning_control:
        return json_response({"success": False,
                              "message": "reasoning control not enabled for this completion"})
    for t in tasks:
        t.end_reasoning = True          # the engine forces </think> before its next sample
    return json_response({"success": True})


async def lora_list(server, request):
    """get_lora_adapters: the loaded adapters with the scales requests without a `lora` field
    run with."""
    from .app import json_response
    eng = server.engine
    out = []
    for i, a in enumerate(getattr(eng, "loras", [])):
        out.append({"id": i, "path": a.path, "scale": eng.lora_base[i],
                    "task_name": a.task_name, "prompt_prefix": a.prompt_prefix})
    return json_response(out)


async def lora_set(server, request):
    """post_lora_adapters: an array of {id, scale}; adapters not listed get scale 0."""
    from .app import json_response
    body = S.decode_body(await request.body(), object)
    scales = S.parse_lora(body, "Request body must be an array")
    eng = server.engine
    if getattr(eng, "loras", None):
        eng.set_lora_base(scales)
    return json_response({"success": True})


async def transcriptions(server, request):
    raise not_supported("The current model does not support audio input.")

