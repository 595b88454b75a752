"""`/infill`: fill-in-the-middle prompts from `input_prefix`, `input_suffix`, `input_extra` (file
chunks) and `prompt`, run as a native completion (same fields, streaming, response shape).

llama.cpp counterpart: server_routes::post_infill (server-context.cpp) and format_prompt_infill
(server-common.cpp): the repo-level FIM pattern

    [FIM_REP]myproject\\n [FIM_SEP]filename0\\n chunk0 ... [FIM_SEP]filename\\n
    [FIM_PRE]prefix[FIM_SUF]suffix[FIM_MID]prompt

(`--spm-infill`: suffix before prefix), with llama.cpp's budget: the prefix keeps its last
3/4 * n_batch tokens, the suffix its first n_batch/4 - (2 + len(prompt)), and the extra context
the last n_ctx - n_batch - 2 * n_predict tokens.
"""
from __future__ import annotations

from . import schemas as S
from .embeddings import _json_type
from .schemas import ServerError, invalid, not_supported

# "\n\n--- snippet ---\n\n": llama.cpp's chunk separator when the vocabulary has no FIM_SEP
CHUNK_PREFIX = "\n\n--- snippet ---\n\n"


def _fim_ids(vocab) -> dict[str, int]:
    sp = getattr(vocab, "special", {}) or {}
    return {k: sp.get(k, -1) for k in ("fim_pre", "fim_suf", "fim_mid", "fim_rep", "fim_sep")}


def _tokens(server, value) -> list[int]:
    """tokenize_mixed(vocab, value, add_special=false, parse_special=false)."""
    if isinstance(value, list):
        return server._mixed_tokens(value, False, False)
    if not isinstance(value, str):
        raise ServerError(500, "[json.exception.type_error.302] type must be string, but is "
                               f"{_json_type(value)}")
    return server.tokenize(value, False, False)


def format_infill(server, prefix, suffix, extra: list, n_batch: int, n_predict: int, n_ctx: int,
                  spm: bool, prompt_tokens: list[int]) -> list[int]:
    """format_prompt_infill: the prompt tokens of one infill request."""
    fim = _fim_ids(server.engine.vocab)
    tok = lambda s: server.tokenize(s, False, False)   # noqa: E731 - common_tokenize(.., false, false)
    extra_tokens: list[int] = []
    tokens_prefix, tokens_suffix = _tokens(server, prefix), _tokens(server, suffix)
    if fim["fim_rep"] >= 0:
        extra_tokens += [fim["fim_rep"]] + tok("myproject\n")
    for chunk in extra:
        text = chunk.get("text", "")
        filename = chunk.get("filename", "tmp")
        if fim["fim_sep"] >= 0:
            extra_tokens += [fim["fim_sep"]] + tok(filename + "\n")
        else:
            extra_tokens += tok(CHUNK_PREFIX)
        extra_tokens += tok(text)
    if fim["fim_sep"] >= 0:
        extra_tokens += [fim["fim_sep"]] + tok("filename\n")
    n_prefix_take = min(len(tokens_prefix), 3 * (n_batch // 4))
    n_suffix_take = min(len(tokens_suffix), max(0, n_batch // 4 - (2 + len(prompt_tokens))))
    n_extra_take = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_tokens))
    tokens_prefix = [fim["fim_pre"]] + tokens_prefix[len(tokens_prefix) - n_prefix_take:] + \
        list(prompt_tokens)
    tokens_suffix = [fim["fim_suf"]] + tokens_suffix[:n_suffix_take]
    inp, end = (tokens_suffix, tokens_prefix) if spm else (tokens_prefix, tokens_suffix)
    v = server.engine.vocab
    if getattr(v, "add_bos", False):
        inp = [v.bos] + inp
    head = extra_tokens[len(extra_tokens) - n_extra_take:] if n_extra_take else []
    return head + inp + end + [fim["fim_mid"]]


async def infill(server, request):
    """post_infill: check the model's FIM tokens and the request, then a native completion of
    the formatted prompt."""
    fim = _fim_ids(server.engine.vocab)
    missing = "".join(msg for k, msg in (("fim_pre", "prefix token is missing. "),
                                         ("fim_suf", "suffix token is missing. "),
                                         ("fim_mid", "middle token is missing. "))
                      if fim[k] < 0)
    if missing:
        raise not_supported(f"Infill is not supported by this model: {missing}")
    raw = await request.body()
    data = S.decode_body(raw, object)
    if not isinstance(data, dict):
        raise ServerError(500, "[json.exception.type_error.305] cannot use operator[] with a "
                               f"string argument with {_json_type(data)}")
    extra = data.get("input_extra", [])
    if "input_extra" in data and not isinstance(extra, list):
        raise invalid("\"input_extra\" must be an array of {\"filename\": string, "
                      "\"text\": string}")
    for chunk in extra or []:
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise invalid("extra_context chunk must contain a \"text\" field with a string value")
        if "filename" in chunk and not isinstance(chunk["filename"], str):
            raise invalid("extra_context chunk's \"filename\" field must be a string")
    # llama.cpp records the errors of a non-string `prompt` and missing prefix/suffix without
    # returning: the prompt falls back to "" and the missing key throws (out_of_range, 500)
    for key in ("input_prefix", "input_suffix"):
        if key not in data:
            raise ServerError(500, f"[json.exception.out_of_range.403] key '{key}' not found")
    prompt = data.get("prompt", "")
    prompt_tokens = server.tokenize(prompt if isinstance(prompt, str) else "", False, True)
    cfg = server.cfg
    tokens = format_infill(server, data["input_prefix"], data["input_suffix"], extra or [],
                           cfg.n_batch, cfg.n_predict, server.engine.n_ctx_slot,
                           cfg.spm_infill, prompt_tokens)
    body = S.decode_body(raw, S.CompletionBody)
    body.prompt = tokens
    return await server._complete(request, "native", body=body)
