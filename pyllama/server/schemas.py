"""Request validation (msgspec) and llama-server's JSON shapes; no I/O, no engine.

llama.cpp counterpart: tools/server/server-schema.cpp (request fields, ranges, aliases) and the
`to_json_*` functions of server-task.cpp / server-common.cpp (responses, errors, timings).
"""
from __future__ import annotations

import dataclasses
import math
import random
import string
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

INT_MAX = 2**31 - 1
BUILD_INFO = "b1-pyllama"
FINGERPRINT = BUILD_INFO


class ServerError(Exception):
    """An error answered as llama.cpp's `{"error": {"code", "message", "type"}}` body."""

    def __init__(self, code: int, message: str, type_: str | None = None, **extra):
        super().__init__(message)
        self.code, self.message, self.extra = code, message, extra
        self.type = type_ or ERROR_TYPES.get(code, "server_error")

    def body(self) -> dict:
        return {"error": {"code": self.code, "message": self.message, "type": self.type,
                          **self.extra}}


ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 500: "server_error", 501: "not_supported_error",
               503: "unavailable_error"}


def invalid(message: str) -> ServerError:
    return ServerError(400, message)


def tool_functions(tools: list, only: str | None = None):
    """(name, function object) of each entry of a request's `tools` (OpenAI shape, or a bare
    function), all or just the one named `only`; an entry without function.name is a 400."""
    for t in tools:
        fn = t.get("function", t) if isinstance(t, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise invalid("Invalid 'tools' entry: each needs function.name")
        if only is None or fn["name"] == only:
            yield fn["name"], fn


def not_supported(message: str) -> ServerError:
    return ServerError(501, message)


def exceed_context(n_prompt: int, n_ctx: int, message: str | None = None) -> ServerError:
    return ServerError(400, message or f"request ({n_prompt} tokens) exceeds the available "
                                       f"context size ({n_ctx} tokens), try increasing it",
                       "exceed_context_size_error", n_prompt_tokens=n_prompt, n_ctx=n_ctx)


# ----------------------------------------------------------------------------- requests
class StreamOptions(msgspec.Struct):
    include_usage: bool = False


class CompletionBody(msgspec.Struct):
    """Fields of llama.cpp's completion schema (tools/server/server-schema.cpp); chat-only fields live in ChatBody."""
    prompt: Any = msgspec.UNSET
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    n_predict: int | None = None
    max_completion_tokens: int | None = None
    max_tokens: int | None = None
    n_keep: int | None = None
    n_discard: int | None = None
    n_cache_reuse: int | None = None
    n_cmpl: int | None = None
    n: int | None = None
    cache_prompt: bool | None = None
    id_slot: int | None = None
    stop: str | list[str] | None = None
    temperature: float | None = None
    dynatemp_range: float | None = None
    dynatemp_exponent: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    min_p: float | None = None
    typical_p: float | None = None
    top_n_sigma: float | None = None
    xtc_probability: float | None = None
    xtc_threshold: float | None = None
    repeat_last_n: int | None = None
    repeat_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    dry_multiplier: float | None = None
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    dry_penalty_last_n: int | None = None
    dry_sequence_breakers: list[str] | None = None
    mirostat: int | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    adaptive_target: float | None = None
    adaptive_decay: float | None = None
    seed: int | None = None
    n_probs: int | None = None
    logprobs: bool | int | None = None
    top_logprobs: int | None = None
    post_sampling_probs: bool | None = None
    min_keep: int | None = None
    ignore_eos: bool | None = None
    logit_bias: Any = None
    lora: Any = None
    samplers: list[str] | str | None = None
    grammar: str | None = None
    grammar_lazy: bool | None = None
    grammar_triggers: list | None = None
    json_schema: Any = None
    response_format: Any = None
    return_tokens: bool | None = None
    return_progress: bool | None = None
    verbose: bool | None = None
    timings_per_token: bool | None = None
    response_fields: list[str] | None = None
    t_max_predict_ms: int | None = None
    echo: bool | None = None
    model: str | None = None


class ChatBody(CompletionBody):
    messages: Any = msgspec.UNSET
    tools: list[dict] | None = None
    tool_choice: Any = None
    parallel_tool_calls: Any = None      # not type-checked (json_value), see Server._prepare
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    chat_template_kwargs: dict | None = None
    reasoning_format: str | None = None
    reasoning_budget_tokens: int | None = None
    thinking_budget_tokens: int | None = None     # Anthropic's thinking.budget_tokens
    reasoning_control: bool | None = None


class TokenizeBody(msgspec.Struct):
    content: Any = msgspec.UNSET
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeBody(msgspec.Struct):
    tokens: list[int] = []


class SlotActionBody(msgspec.Struct):
    filename: str | None = None


_JSON_TYPES = {"int": "number", "float": "number", "str": "string", "bool": "boolean",
               "array": "array", "object": "object", "null": "null"}


def _validation_message(e: msgspec.ValidationError) -> str:
    """`Expected `int | null`, got `str` - at `$.n_predict`` → llama.cpp's "Field 'n_predict': ..."."""
    text = str(e)
    msg, _, where = text.partition(" - at `$")
    name = where.rstrip("`").lstrip(".")
    if msg.startswith("Expected") and ", got `" in msg:
        want, got = msg[len("Expected `"):].split("`, got `")
        want, got = want.split(" | ")[0], got.rstrip("`")
        if want == "int" and got == "float":
            msg = "type must be an integer, but is a float"
        else:
            # nlohmann::json's type_error as llama.cpp's field parser passes it on
            msg = (f"[json.exception.type_error.302] type must be {_JSON_TYPES.get(want, want)}, "
                   f"but is {_JSON_TYPES.get(got, got)}")
    return f"Field '{name}': {msg}" if name else msg


def decode_body(raw: bytes, kind: type):
    """Parse a request body: malformed JSON / bad UTF-8 → 500 (as llama.cpp), wrong types → 400."""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ServerError(500, f"[json.exception.parse_error.101] parse error: invalid UTF-8 byte "
                               f"at index {e.start}")
    if not raw.strip():
        raise ServerError(500, "[json.exception.parse_error.101] parse error at line 1, column 1: "
                               "attempting to parse an empty input; check that your input string "
                               "or stream contains the expected JSON")
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as e:
        if "got `" in str(e) and " - at `$" not in str(e):
            raise ServerError(500, f"[json.exception.type_error.302] {e}")
        raise invalid(_validation_message(e))
    except msgspec.DecodeError as e:
        raise ServerError(500, f"[json.exception.parse_error.101] parse error: {e}")


# ----------------------------------------------------------------------------- task params
@dataclass
class TaskParams:
    """What the engine needs to run one completion (after defaults, aliases and checks)."""
    n_predict: int = -1
    n_keep: int = 0
    n_discard: int = 0               # context shift: tokens dropped after n_keep (0 = half)
    n_cache_reuse: int = 0           # min chunk size reused from the cache by KV shifting
    stop: list[str] = field(default_factory=list)
    n_probs: int = 0
    post_sampling_probs: bool = False
    cache_prompt: bool = True
    id_slot: int = -1
    stream: bool = False
    return_tokens: bool = False
    return_progress: bool = False
    verbose: bool = False
    timings_per_token: bool = False
    ignore_eos: bool = False
    embd_normalize: int = 2          # embeddings: common_embd_normalize's rule (pooled only)
    reasoning_budget: Any = None     # chat_parse.ReasoningBudget (a template with thinking)
    reasoning_control: bool = False  # /v1/chat/completions/control may end the thinking
    t_max_predict_ms: int = -1
    sampling: Any = None           # SamplerParams
    lora: dict | None = None       # per-request adapter scales {id: scale} (None: the server's)
    settings: dict = field(default_factory=dict)  # generation_settings as reported


def _check_range(name: str, value, lo, hi=INT_MAX):
    if value is not None and not lo <= value <= hi:
        raise invalid(f"Field '{name}': Value must be between {lo} <= value <= {hi}, "
                      f"but got {value}")
    return value


def _first(body, *names):
    for n in names:
        v = getattr(body, n, None)
        if v is not None:
            return n, v
    return names[0], None


# request field -> SamplerParams field (llama.cpp common_params_sampling names)
SAMPLING_FIELDS = {
    "temperature": "temp", "dynatemp_range": "dynatemp_range",
    "dynatemp_exponent": "dynatemp_exponent", "top_k": "top_k", "top_p": "top_p",
    "min_p": "min_p", "typical_p": "typ_p", "top_n_sigma": "top_n_sigma",
    "xtc_probability": "xtc_probability", "xtc_threshold": "xtc_threshold",
    "repeat_last_n": "penalty_last_n", "repeat_penalty": "penalty_repeat",
    "presence_penalty": "penalty_present", "frequency_penalty": "penalty_freq",
    "dry_multiplier": "dry_multiplier", "dry_base": "dry_base",
    "dry_allowed_length": "dry_allowed_length", "dry_penalty_last_n": "dry_penalty_last_n",
    "dry_sequence_breakers": "dry_sequence_breakers", "mirostat": "mirostat",
    "mirostat_tau": "mirostat_tau", "mirostat_eta": "mirostat_eta", "seed": "seed",
    "adaptive_target": "adaptive_target", "adaptive_decay": "adaptive_decay",
    "min_keep": "min_keep", "ignore_eos": "ignore_eos",
}


def _clamped(body) -> dict:
    """Request sampling values with llama.cpp's silent clamps applied."""
    v = {k: getattr(body, k) for k in SAMPLING_FIELDS if getattr(body, k, None) is not None}
    clamps = {"temperature": (0.0, math.inf), "top_k": (0, INT_MAX), "top_p": (0.0, 1.0),
              "min_p": (0.0, 1.0), "xtc_probability": (0.0, 1.0), "xtc_threshold": (0.0, 1.0),
              "mirostat": (0, 2)}
    for k, (lo, hi) in clamps.items():
        if k in v:
            v[k] = min(max(v[k], lo), hi)
    for k in ("repeat_last_n", "dry_allowed_length", "dry_penalty_last_n", "min_keep"):
        _check_range(k, v.get(k), 0)
    if v.get("adaptive_target") is not None:
        v["adaptive_target"] = min(v["adaptive_target"], 1.0)
    _check_range("adaptive_decay", v.get("adaptive_decay"), 0.0, 0.99)
    if "dry_sequence_breakers" in v and not v["dry_sequence_breakers"]:
        raise invalid("Error: dry_sequence_breakers must be a non-empty array of strings")
    if v.get("dry_base") is not None and v["dry_base"] < 1.0:
        del v["dry_base"]
    if "seed" in v:
        v["seed"] = v["seed"] & 0xFFFFFFFF
    return v


def _logit_bias(raw, n_vocab: int, tokenize) -> dict[int, float]:
    """`[[tok_or_string, bias_or_false], ...]` or `{"tok_or_string": bias}` → {id: bias}. As
    llama.cpp's logit_bias handler (server-schema.cpp): any other value, and any entry that is
    not a [token, number-or-false] pair, is ignored."""
    if not isinstance(raw, (list, dict)):
        return {}
    pairs = raw.items() if isinstance(raw, dict) else raw
    out: dict[int, float] = {}
    for pair in pairs:
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            continue
        tok, bias = pair
        bias = -math.inf if bias is False else bias
        if not isinstance(bias, (int, float)) or isinstance(bias, bool):
            continue
        if not isinstance(tok, (int, str)) or isinstance(tok, bool):
            continue
        if isinstance(tok, str) and tok.lstrip("-").isdigit() and isinstance(raw, dict):
            tok = int(tok)
        ids = tokenize(tok) if isinstance(tok, str) else [tok]
        for t in ids:
            if isinstance(t, int) and 0 <= t < n_vocab:
                out[t] = float(bias)
    return out


def build_params(body: CompletionBody, defaults: "RequestDefaults", *, n_vocab: int,
                 tokenize, chat: bool = False) -> TaskParams:
    """Apply llama.cpp's defaults, aliases, clamps and range checks to one request body."""
    name, n_predict = _first(body, "n_predict", "max_completion_tokens", "max_tokens")
    _check_range(name, n_predict, -1)
    _check_range("n_keep", body.n_keep, -1)
    _check_range("n_discard", body.n_discard, 0)
    _check_range("n_cache_reuse", body.n_cache_reuse, 0)
    _check_range("t_max_predict_ms", body.t_max_predict_ms, -1)
    stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
    p = TaskParams(
        n_predict=defaults.n_predict if n_predict is None else n_predict,
        n_keep=defaults.n_keep if body.n_keep is None else body.n_keep,
        n_discard=0 if body.n_discard is None else body.n_discard,
        n_cache_reuse=(defaults.n_cache_reuse if body.n_cache_reuse is None
                       else body.n_cache_reuse),
        stop=[s for s in stop if s] or list(defaults.stop),
        n_probs=_n_probs(body, chat), post_sampling_probs=bool(body.post_sampling_probs),
        cache_prompt=defaults.cache_prompt if body.cache_prompt is None else body.cache_prompt,
        id_slot=-1 if body.id_slot is None else body.id_slot, stream=bool(body.stream),
        return_tokens=bool(body.return_tokens), timings_per_token=bool(body.timings_per_token),
        return_progress=bool(body.return_progress),
        verbose=defaults.verbose if body.verbose is None else bool(body.verbose),
        ignore_eos=bool(body.ignore_eos),
        t_max_predict_ms=-1 if body.t_max_predict_ms is None else body.t_max_predict_ms)
    if 0 < defaults.n_ctx_slot <= p.n_keep:
        # llama.cpp clamps n_keep to n_ctx - 4 silently; a prompt prefix that large can never
        # be kept (docs/architecture.md, departures)
        raise invalid(f"n_keep ({p.n_keep}) must be smaller than the slot context size "
                      f"({defaults.n_ctx_slot})")
    if body.lora is not None:
        p.lora = parse_lora(body.lora, "Error: 'lora' must be an array of objects with 'id' and "
                            "'scale' fields")
    elif isinstance(body.model, str) and body.model in defaults.lora_names:
        # pyllama's extension for the inference gateway's model server protocol: a `model` that
        # names a loaded adapter serves that adapter alone at scale 1 (llama.cpp ignores `model`)
        p.lora = {defaults.lora_names.index(body.model): 1.0}
    values = _clamped(body)
    p.sampling = _sampler_params(defaults.sampling, values, body, n_vocab, tokenize)
    from .structured import constrain
    p.sampling = constrain(body, p.sampling, chat=chat, oai=chat, family=defaults.tool_family)
    p.settings = generation_settings(p, defaults, chat={
        "reasoning_format": getattr(body, "reasoning_format", None) or defaults.reasoning_format})
    p.settings["logit_bias"] = _logit_bias_json(p.sampling, defaults.eog_ids)
    return p


def parse_lora(data, not_array: str) -> dict:
    """parse_lora_request (server-common.cpp): [{id, scale}] -> {id: scale}; a missing or
    non-number id is -1, scale 0.0 (json_value's defaults); later entries win."""
    if not isinstance(data, list):
        raise invalid(not_array)
    out = {}
    for e in data:
        e = e if isinstance(e, dict) else {}
        i, sc = e.get("id", -1), e.get("scale", 0.0)
        i = i if isinstance(i, int) and not isinstance(i, bool) else -1
        sc = float(sc) if isinstance(sc, (int, float)) and not isinstance(sc, bool) else 0.0
        out[i] = sc
    return out


def _logit_bias_json(sampling, eog_ids) -> list:
    """generation_settings.logit_bias as task_params::format_logit_bias writes it: the
    request's biases, then with ignore_eos every EOG token at -inf (null in JSON)."""
    pairs = list((getattr(sampling, "logit_bias", None) or {}).items())
    if getattr(sampling, "ignore_eos", False):
        pairs += [(t, -math.inf) for t in eog_ids]
    return [{"bias": None if math.isinf(b) else b, "token": int(t)} for t, b in pairs]


def _n_probs(body: CompletionBody, chat: bool) -> int:
    if chat:
        if body.logprobs is True:
            n = 20 if body.top_logprobs is None else body.top_logprobs
            return max(1, _check_range("top_logprobs", n, 0, 20))
        return 0
    if body.n_probs is not None:
        return _check_range("n_probs", body.n_probs, 0, 1024)
    if body.logprobs is not None and not isinstance(body.logprobs, bool):
        return _check_range("logprobs", body.logprobs, 0, 1024)
    return 0


def _sampler_params(base, values: dict, body, n_vocab: int, tokenize):
    from pyllama.sampling import SamplerParams
    base = base if base is not None else SamplerParams()
    known = {f.name for f in dataclasses.fields(base)}
    changes = {SAMPLING_FIELDS[k]: v for k, v in values.items() if SAMPLING_FIELDS[k] in known}
    bias = _logit_bias(body.logit_bias, n_vocab, tokenize)
    if bias and "logit_bias" in known:
        changes["logit_bias"] = {**(base.logit_bias or {}), **bias}
    if body.samplers is not None and "samplers" in known:
        changes["samplers"] = _sampler_names(body.samplers)
    return dataclasses.replace(base, **changes)


def _sampler_names(value) -> list[str]:
    """`samplers`: an array of names or a string of letters (llama.cpp's --sampling-seq)."""
    from pyllama.sampling import parse_sampler_chars, parse_sampler_names
    if isinstance(value, list):
        return parse_sampler_names([str(s) for s in value])
    return parse_sampler_chars(value)


@dataclass
class RequestDefaults:
    """The server's per-request defaults (from the command line)."""
    n_predict: int = -1
    n_keep: int = 0
    n_cache_reuse: int = 0
    n_ctx_slot: int = 0          # n_keep must stay below it (0: unchecked)
    stop: list[str] = field(default_factory=list)
    cache_prompt: bool = True
    sampling: Any = None
    eog_ids: tuple = ()          # ignore_eos adds these with bias -inf (logit_bias_eog)
    verbose: bool = False        # server -v: `__verbose` in OpenAI-style responses
    reasoning_format: str = "deepseek"   # --reasoning-format (common_params' default: deepseek)
    lora_names: tuple = ()       # the loaded adapters' names (file names without .gguf), by id
    tool_family: str = "hermes"  # the chat template's tool-call family (tool_calls.family)


def generation_settings(p: TaskParams, defaults: RequestDefaults | None = None,
                        only_metrics: bool = False, chat: dict | None = None) -> dict:
    """The `generation_settings` / `params` object llama.cpp reports for a task
    (task_params::to_json, server-task.cpp); `only_metrics` is the shorter form /props shows
    (no stop, logit_bias, grammar, triggers, preserved tokens, DRY breakers). `chat` holds the
    chat parser's fields (chat_format, reasoning_format, generation_prompt, preserved_tokens)."""
    s = p.sampling
    g = (lambda name, d=None: getattr(s, name, d)) if s is not None else (lambda n, d=None: d)
    seed = g("seed", 0xFFFFFFFF)
    c = {"chat_format": "Content-only", "reasoning_format": "none", "generation_prompt": "",
         "preserved_tokens": [], **(chat or {})}
    # reasoning_in_content: streaming with deepseek-legacy (server-schema.cpp post-processing)
    in_content = bool(p.stream and c["reasoning_format"] == "deepseek-legacy")
    out = {
        "seed": 0xFFFFFFFF if seed is None or seed < 0 else seed,
        "temperature": g("temp", 0.8), "dynatemp_range": g("dynatemp_range", 0.0),
        "dynatemp_exponent": g("dynatemp_exponent", 1.0), "top_k": g("top_k", 40),
        "top_p": g("top_p", 0.95), "min_p": g("min_p", 0.05), "top_n_sigma": g("top_n_sigma", -1.0),
        "xtc_probability": g("xtc_probability", 0.0), "xtc_threshold": g("xtc_threshold", 0.1),
        "typical_p": g("typ_p", 1.0), "repeat_last_n": g("penalty_last_n", 64),
        "repeat_penalty": g("penalty_repeat", 1.0), "presence_penalty": g("penalty_present", 0.0),
        "frequency_penalty": g("penalty_freq", 0.0), "dry_multiplier": g("dry_multiplier", 0.0),
        "dry_base": g("dry_base", 1.75), "dry_allowed_length": g("dry_allowed_length", 2),
        "dry_penalty_last_n": g("dry_penalty_last_n", 64),
        "dry_sequence_breakers": list(g("dry_sequence_breakers", None) or ["\n", ":", '"', "*"]),
        "mirostat": g("mirostat", 0),
        "mirostat_tau": g("mirostat_tau", 5.0), "mirostat_eta": g("mirostat_eta", 0.1),
        "adaptive_target": g("adaptive_target", -1.0), "adaptive_decay": g("adaptive_decay", 0.9),
        "stop": list(p.stop),
        "max_tokens": p.n_predict, "n_predict": p.n_predict, "n_keep": p.n_keep,
        "n_discard": p.n_discard,
        "ignore_eos": bool(g("ignore_eos", p.ignore_eos)), "stream": p.stream,
        "logit_bias": [],
        "n_probs": p.n_probs, "min_keep": g("min_keep", 0),
        "grammar": _grammar_text(g("grammar", "")), "grammar_lazy": bool(g("grammar_lazy", False)),
        "grammar_triggers": [_trigger_json(t) for t in (g("grammar_triggers", ()) or ())],
        "preserved_tokens": list(c["preserved_tokens"]),
        "chat_format": c["chat_format"], "reasoning_format": c["reasoning_format"],
        "reasoning_in_content": in_content, "generation_prompt": c["generation_prompt"],
        "samplers": list(g("samplers", []) or []),
        "speculative.types": "none", "timings_per_token": p.timings_per_token,
        "post_sampling_probs": p.post_sampling_probs,
        "backend_sampling": False,   # pyllama samples on the host (llama.cpp's default)
        "lora": [{"id": i, "scale": sc} for i, sc in sorted((p.lora or {}).items())],
    }
    if only_metrics:
        for k in ("dry_sequence_breakers", "stop", "logit_bias", "grammar", "grammar_lazy",
                  "grammar_triggers", "preserved_tokens"):
            del out[k]
    return out


def _grammar_text(grammar) -> str:
    return getattr(grammar, "text", grammar) or ""


def _trigger_json(trigger) -> dict:
    """server_grammar_trigger::to_json: {"type": <common_grammar_trigger_type>, "value"}."""
    kind, value = trigger
    types = {"token": 0, "word": 1, "pattern": 2, "pattern_full": 3}
    out = {"type": types.get(kind, 1), "value": str(value)}
    if kind == "token":
        out["token"] = int(value)
    return out


# ----------------------------------------------------------------------------- results
@dataclass
class Timings:
    cache_n: int = 0
    prompt_n: int = 0
    prompt_ms: float = 0.0
    predicted_n: int = 0
    predicted_ms: float = 0.0
    draft_n: int = 0                 # draft tokens generated (speculative decoding)
    draft_n_accepted: int = 0

    def to_json(self) -> dict:
        d = max(self.predicted_n - 1, 0)
        out = {
            "cache_n": self.cache_n, "prompt_n": self.prompt_n, "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": self.prompt_ms / self.prompt_n if self.prompt_n else 0.0,
            "prompt_per_second": 1e3 * self.prompt_n / self.prompt_ms if self.prompt_ms else 0.0,
            "predicted_n": self.predicted_n, "predicted_ms": self.predicted_ms,
            "predicted_per_token_ms": self.predicted_ms / d if d else 0.0,
            "predicted_per_second": 1e3 * d / self.predicted_ms if d and self.predicted_ms else 0.0,
        }
        if self.draft_n > 0:     # llama.cpp: only when drafts were generated
            out.update(draft_n=self.draft_n, draft_n_accepted=self.draft_n_accepted)
        return out


@dataclass
class TokenProb:
    """One generated token with its top candidates (log-probabilities or probabilities)."""
    id: int
    piece: bytes
    value: float                         # logprob (or prob with post_sampling_probs)
    top: list[tuple[int, bytes, float]]

    def to_json(self, post: bool = False) -> dict:
        key, top_key = ("prob", "top_probs") if post else ("logprob", "top_logprobs")
        return {**_tok_json(self.id, self.piece), key: self.value,
                top_key: [{**_tok_json(i, b), key: v} for i, b, v in self.top]}


def _tok_json(i: int, piece: bytes) -> dict:
    return {"id": i, "token": piece.decode("utf-8", "replace"), "bytes": list(piece)}


@dataclass
class Partial:
    index: int
    text: str
    tokens: list[int]
    probs: list[TokenProb]
    n_decoded: int
    n_prompt: int
    timings: Timings | None = None
    n_cached: int = 0                # prompt tokens taken from the slot's cache


@dataclass
class Progress:
    """Prompt processing progress of one task (`return_progress`)."""
    index: int
    total: int
    cache: int
    processed: int
    time_ms: float
    timings: "Timings | None" = None     # with timings_per_token

    def to_json(self) -> dict:
        return {"total": self.total, "cache": self.cache, "processed": self.processed,
                "time_ms": round(self.time_ms)}


@dataclass
class Final:
    index: int
    text: str
    tokens: list[int]
    stop_type: str             # eos | limit | word | none
    stopping_word: str
    n_prompt: int
    n_decoded: int
    n_cached: int
    timings: Timings
    probs: list[TokenProb]
    id_slot: int
    truncated: bool = False
    prompt: str = ""
    settings: dict = field(default_factory=dict)

    @property
    def finish_reason(self) -> str:
        return "stop" if self.stop_type in ("eos", "word") else "length"


@dataclass
class EmbdResult:
    """One embedding or rerank task's result: the vectors (one per token with pooling none, else
    one pooled vector), the prompt length and (rerank) the score."""
    index: int
    embedding: list
    n_tokens: int
    score: float = 0.0


def completion_id() -> str:
    return "chatcmpl-" + "".join(random.choices(string.ascii_letters + string.digits, k=32))


def native_partial(p: Partial, post: bool) -> dict:
    d = {"index": p.index, "content": p.text, "tokens": p.tokens, "stop": False, "id_slot": -1,
         "tokens_predicted": p.n_decoded, "tokens_evaluated": p.n_prompt}
    if p.probs:
        d["completion_probabilities"] = [x.to_json(post) for x in p.probs]
    if p.timings is not None:
        d["timings"] = p.timings.to_json()
    return d


def native_final(f: Final, model: str, stream: bool, params: TaskParams,
                 fields: list[str] | None = None) -> dict:
    d = {"index": f.index, "content": "" if stream else f.text,
         "tokens": [] if stream or not params.return_tokens else f.tokens,
         "id_slot": f.id_slot, "stop": True, "model": model, "tokens_predicted": f.n_decoded,
         "tokens_evaluated": f.n_prompt, "generation_settings": f.settings, "prompt": f.prompt,
         "has_new_line": "\n" in f.text, "truncated": f.truncated, "stop_type": f.stop_type,
         "stopping_word": f.stopping_word, "tokens_cached": f.n_cached,
         "timings": f.timings.to_json()}
    if params.n_probs and not stream:
        d["completion_probabilities"] = [x.to_json(params.post_sampling_probs) for x in f.probs]
    return _filter_fields(d, fields) if fields else d


def _filter_fields(d: dict, fields: list[str]) -> dict:
    out = {}
    for name in fields:
        cur: Any = d
        for part in name.split("/"):
            cur = cur.get(part) if isinstance(cur, dict) else None
        if cur is not None:     # json_get_nested_values: keyed by the whole path
            out[name] = cur
    return out


def usage(f: Final) -> dict:
    return {"completion_tokens": f.n_decoded, "prompt_tokens": f.n_prompt,
            "total_tokens": f.n_decoded + f.n_prompt,
            "prompt_tokens_details": {"cached_tokens": f.timings.cache_n}}


def oai_logprobs(probs: list[TokenProb]) -> dict:
    return {"content": [p.to_json(False) for p in probs]}


def oai_completion(finals: list[Final], model: str, cid: str, n_probs: int) -> dict:
    f0 = finals[0]
    return {"choices": [{"text": f.text, "index": f.index,
                         "logprobs": oai_logprobs(f.probs) if n_probs else None,
                         "finish_reason": f.finish_reason} for f in finals],
            "created": int(time.time()), "model": model, "system_fingerprint": FINGERPRINT,
            "object": "text_completion", "usage": usage(f0), "id": cid,
            "timings": f0.timings.to_json()}


def oai_completion_chunk(index: int, text: str, model: str, cid: str, probs=None,
                         finish=None) -> dict:
    return {"choices": [{"text": text, "index": index,
                         "logprobs": oai_logprobs(probs) if probs else None,
                         "finish_reason": finish}],
            "created": int(time.time()), "model": model, "system_fingerprint": FINGERPRINT,
            "object": "text_completion", "id": cid}


def chat_message(f: Final, content: str, tool_calls: list[dict]) -> dict:
    # common_chat_msg::to_json_oaicompat: content is "" when empty, tool calls or not
    msg: dict = {"role": "assistant", "content": content or ""}
    if tool_calls:
        msg["tool_calls"] = tool_calls
    return msg


def chat_completion(results: list[tuple[Final, str, list[dict]]], model: str, cid: str,
                    n_probs: int) -> dict:
    choices = []
    for f, content, calls in results:
        # to_json_oaicompat_chat: "tool_calls" only for a generation that stopped (EOS or a
        # stop word); one cut by the token limit is "length", calls or not
        c = {"finish_reason": "tool_calls" if calls and f.finish_reason == "stop"
             else f.finish_reason, "index": f.index,
             "message": chat_message(f, content, calls)}
        if n_probs:
            c["logprobs"] = oai_logprobs(f.probs)
        choices.append(c)
    f0 = results[0][0]
    return {"choices": choices, "created": int(time.time()), "model": model,
            "system_fingerprint": FINGERPRINT, "object": "chat.completion", "usage": usage(f0),
            "id": cid, "timings": f0.timings.to_json()}


def chat_chunk(choices: list[dict], model: str, cid: str, **extra) -> dict:
    return {"choices": choices, "created": int(time.time()), "id": cid, "model": model,
            "system_fingerprint": FINGERPRINT, "object": "chat.completion.chunk", **extra}


def chat_delta(index: int, delta: dict, probs=None, finish=None) -> dict:
    c = {"finish_reason": finish, "index": index, "delta": delta}
    if probs:
        c["logprobs"] = oai_logprobs(probs)
    return c
