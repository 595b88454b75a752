"""`/embedding`, `/embeddings`, `/v1/embeddings` and `/rerank` (`/reranking`, `/v1/rerank`,
`/v1/reranking`): request parsing, tokenization and the response shapes; the engine runs the
stateless decode (Engine._embed). No I/O beyond the shared plumbing of app.Server.

llama.cpp counterpart: server_routes::handle_embeddings_impl and post_rerank (server-context.cpp),
format_embeddings_response_oaicompat, format_response_rerank, format_prompt_rerank and
tokenize_input_subprompt (server-common.cpp), server_task_result_embd/rerank::to_json.
"""
from __future__ import annotations

import base64

import numpy as np

from .schemas import EmbdResult, ServerError, invalid, not_supported
from .chat import check_parts


def _type_error(want: str, value) -> ServerError:
    """nlohmann's type_error.302, which llama.cpp answers with 500."""
    return ServerError(500, f"[json.exception.type_error.302] type must be {want}, but is "
                            f"{_json_type(value)}")


def _json_type(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _str_list(v) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _json_value(body: dict, key: str, default, ok):
    """llama.cpp's json_value: the field when present, not null and of the right type, else the
    default (a wrong type is only logged)."""
    v = body.get(key)
    return v if v is not None and ok(v) else default


def content_tokens(server, content) -> list[int]:
    """tokenize_oai_content_array: an entry {"content": [{"type": "text", "text"}, ...]} is
    the concatenated text; media parts need a multimodal projector (500, as llama.cpp's
    runtime_error), other types are 400."""
    if not isinstance(content, list):
        raise invalid("\"content\" must be an array")
    check_parts(content)
    text = ""
    for part in content:
        text += _json_value(part, "text", "", lambda v: isinstance(v, str))
    return server.tokenize(text, True, True)


def tokenize_subprompt(server, p, add_special: bool, parse_special: bool) -> list[int]:
    """tokenize_input_subprompt: a string, token ids, a mixed array or {"prompt_string": ...}."""
    if isinstance(p, str) or (isinstance(p, list) and all(
            isinstance(x, str) or (isinstance(x, int) and not isinstance(x, bool)) for x in p)):
        return server._mixed_tokens(p, add_special, parse_special) if p else []
    if isinstance(p, dict) and "prompt_string" in p:
        if "multimodal_data" in p:
            raise ServerError(500, "Multimodal data provided, but model does not support "
                                   "multimodal requests.")
        return server._mixed_tokens(p["prompt_string"], add_special, parse_special)
    raise ServerError(500, "\"prompt\" elements must be a string, a list of tokens, a JSON object "
                           "containing a prompt string, or a list of mixed strings & tokens.")


def _entries(prompt) -> list:
    """Several prompts unless the value is one prompt (a string, or an array holding a number)."""
    if isinstance(prompt, list) and not any(isinstance(x, int) and not isinstance(x, bool)
                                            for x in prompt):
        return list(prompt)
    return [prompt]


async def _run(server, request, kind: str, prompts: list[list[int]], normalize: int):
    import asyncio

    from .engine import Channel, Task
    from .schemas import TaskParams
    n_vocab = server.engine.model.n_vocab
    for toks in prompts:
        if any(not 0 <= t < n_vocab for t in toks):
            raise invalid("Prompt contains invalid tokens")
    ch = Channel(asyncio.get_running_loop())
    tasks = [server.engine.submit(Task(kind, ch, prompt=p, index=i,
                                       params=TaskParams(embd_normalize=normalize)))
             for i, p in enumerate(prompts)]
    results: dict[int, EmbdResult] = {}
    while len(results) < len(tasks):
        ev = await server._next_event(request, ch, tasks)
        if isinstance(ev, EmbdResult):
            results[ev.index] = ev
    return [results[i] for i in sorted(results)]


async def embeddings(server, request, oai: bool):
    """handle_embeddings_impl: `input` (or the non-OAI `content`) as text, token ids or lists."""
    from .app import json_response
    from .schemas import decode_body
    cfg = server.cfg
    if not cfg.embeddings:
        raise not_supported("This server does not support embeddings. Start it with "
                            "`--embeddings`")
    pooling = server.engine.ctx.pooling
    if oai and pooling == "none":
        raise invalid("Pooling type 'none' is not OAI compatible. Please use a different "
                      "pooling type")
    body = decode_body(await request.body(), object)
    if not isinstance(body, dict):
        body = {}
    if "input" in body:
        prompt = body["input"]
    elif "content" in body:
        oai, prompt = False, body["content"]      # "content" is not OAI compatible
    else:
        raise invalid("\"input\" or \"content\" must be provided")
    use_base64 = False
    if "encoding_format" in body:
        fmt = body["encoding_format"]
        if not isinstance(fmt, str):
            raise _type_error("string", fmt)
        if fmt == "base64":
            use_base64 = True
        elif fmt != "float":
            raise invalid("The format to return the embeddings in. Can be either float or base64")
    entries = _entries(prompt)
    tokenized = []
    for p in entries:
        if isinstance(p, dict) and "content" in p:
            tokenized.append(content_tokens(server, p["content"]))
        else:
            tokenized.append(tokenize_subprompt(server, p, True, True))
    if not tokenized:
        raise invalid("\"input\" must not be empty")
    if any(not t for t in tokenized):
        raise invalid("Input content cannot be empty")
    normalize = cfg.embd_normalize
    if "embd_normalize" in body:
        normalize = body["embd_normalize"]       # nlohmann get<int>(): numbers convert
        if not isinstance(normalize, (int, float)) or isinstance(normalize, bool):
            raise _type_error("number", normalize)
        normalize = int(normalize)
    results = await _run(server, request, "embedding", tokenized, normalize)
    if not oai:
        return json_response([{"index": r.index, "embedding": [v.tolist() for v in r.embedding]}
                              for r in results])
    data = []
    for i, r in enumerate(results):
        v = np.asarray(r.embedding[0], dtype="<f4")
        if use_base64:
            data.append({"embedding": base64.b64encode(v.tobytes()).decode("ascii"),
                         "index": i, "object": "embedding", "encoding_format": "base64"})
        else:
            data.append({"embedding": v.tolist(), "index": i, "object": "embedding"})
    n = sum(r.n_tokens for r in results)
    return json_response({"model": body.get("model", server.model_name), "object": "list",
                          "usage": {"prompt_tokens": n, "total_tokens": n}, "data": data})


def rerank_prompt(server, query: str, doc: str) -> list[int]:
    """format_prompt_rerank: the model's `rerank` chat template, else
    [BOS] query [EOS] [SEP] doc [EOS] by the vocabulary's add_* flags."""
    template = server.engine.model.metadata.get("tokenizer.chat_template.rerank")
    if template is not None:
        text = str(template).replace("{query}", query).replace("{document}", doc)
        return server._mixed_tokens(text, False, True)
    v = server.engine.vocab
    q = server._mixed_tokens(query, False, False)
    d = server._mixed_tokens(doc, False, False)
    eos = v.eos if getattr(v, "eos", -1) >= 0 else getattr(v, "sep", -1)
    out = [v.bos] if getattr(v, "add_bos", False) else []
    out += q
    if getattr(v, "add_eos", False):
        out.append(eos)
    if getattr(v, "add_sep", False):
        out.append(v.sep)
    out += d
    if getattr(v, "add_eos", False):
        out.append(eos)
    return out


async def rerank(server, request):
    """post_rerank: Jina (`query`, `documents`, `top_n`) or TEI (`texts`, `return_text`)."""
    from .app import json_response
    from .schemas import decode_body
    cfg = server.cfg
    if not cfg.embeddings or server.engine.ctx.pooling != "rank":
        raise not_supported("This server does not support reranking. Start it with "
                            "`--reranking`")
    body = decode_body(await request.body(), object)
    if not isinstance(body, dict):
        body = {}
    tei = "texts" in body
    if "query" not in body:
        raise invalid("\"query\" must be provided")
    query = body["query"]
    if not isinstance(query, str):
        raise invalid("\"query\" must be a string")
    docs = _json_value(body, "documents", _json_value(body, "texts", [], _str_list), _str_list)
    if not docs:
        raise invalid("\"documents\" must be a non-empty string array")
    top_n = _json_value(body, "top_n", len(docs),
                        lambda v: isinstance(v, int) and not isinstance(v, bool))
    prompts = [rerank_prompt(server, query, d) for d in docs]
    results = await _run(server, request, "rerank", prompts, -1)
    label = "score" if tei else "relevance_score"
    return_text = tei and bool(body.get("return_text", False))
    elems = []
    for r in results:
        e = {"index": r.index, label: r.score}
        if return_text:
            e["text"] = docs[r.index]
        elems.append(e)
    elems.sort(key=lambda e: -e[label])        # std::sort by score, descending
    elems = elems[:max(min(top_n, len(elems)), 0)]
    if tei:
        return json_response(elems)
    n = sum(r.n_tokens for r in results)
    return json_response({"model": body.get("model", server.model_name), "object": "list",
                          "usage": {"prompt_tokens": n, "total_tokens": n}, "results": elems})
