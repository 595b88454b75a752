"""llama-server: flags (tools/_args.py, llama.cpp spellings) → ServerConfig → pyllama.server.serve."""
from __future__ import annotations

import json
import sys

from ._common import guard, parse_or_exit
from ._params import K_CENTER


def _api_keys(params) -> list[str]:
    keys = list(params.api_keys or [])
    if isinstance(keys, str):
        keys = [k for k in keys.split(",") if k]
    if params.api_key_file:
        with open(params.api_key_file, encoding="utf-8") as f:
            keys += [ln.strip() for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
    return keys


def to_config(params):
    """The typed server config for parsed llama.cpp flags."""
    from pyllama import models
    from pyllama.server import ServerConfig
    from pyllama.server.gcp import port as gcp_port   # AIP_MODE=PREDICTION: AIP_HTTP_PORT
    alias = params.alias
    kwargs = params.template_kwargs()
    model_kw = {k: v for k, v in params.model_kwargs().items() if k != "n_threads"}
    return ServerConfig(
        model=models.resolve(params.model or None), host=params.hostname,
        port=gcp_port(params.port),
        alias=[a for a in (alias.split(",") if isinstance(alias, str) else alias or []) if a],
        tags=[t.strip() for t in (params.tags or "").split(",") if t.strip()],
        api_keys=_api_keys(params), timeout=float(params.timeout), n_ctx=params.n_ctx,
        max_body_size=_max_body_size(params.max_body_size),
        drain_timeout=_non_negative("--drain-timeout", params.drain_timeout),
        n_batch=params.n_batch, n_ubatch=params.n_ubatch, n_parallel=params.n_parallel,
        n_threads=params.n_threads if params.n_threads > 0 else None,
        swa_full=params.swa_full, swa_extra=params.swa_extra, type_k=params.cache_type_k,
        numerics=params.numerics or "invariant",
        kv_k_center=K_CENTER[params.kv_k_center],
        type_v=params.cache_type_v,
        kv_unified=params.kv_unified if "kv_unified" in params.set_fields else None,
        kv_unified_per_slot=params.kv_unified_per_slot,
        n_predict=params.n_predict, n_keep=params.n_keep, ctx_shift=params.ctx_shift, cache_prompt=params.cache_prompt,
        n_cache_reuse=params.n_cache_reuse,
        reverse_prompts=list(params.antiprompt), special=params.special,
        sampling=_sampling(params),
        slot_prompt_similarity=getattr(params, "slot_prompt_similarity", 0.10),
        cache_ram_mib=params.cache_ram_mib, cache_idle_slots=params.cache_idle_slots,
        endpoint_metrics=params.endpoint_metrics, endpoint_slots=params.endpoint_slots,
        endpoint_props=params.endpoint_props, slot_save_path=params.slot_save_path or None,
        chat_template=params.chat_template or None, jinja=params.use_jinja,
        chat_template_kwargs=kwargs, api_prefix=params.api_prefix, ui=params.webui,
        cors_origins=cors_origins(params), cors_methods=params.cors_methods,
        cors_headers=params.cors_headers, cors_credentials=params.cors_credentials,
        public_path=_static_dir(params.public_path), ssl_key_file=params.ssl_file_key,
        ssl_cert_file=params.ssl_file_cert, reuse_port=params.reuse_port,
        sleep_idle_seconds=_sleep_seconds(params.sleep_idle_seconds),
        ui_config=_ui_config(params.ui_config_json),
        prefill_assistant=params.prefill_assistant, verbose=params.verbosity > 9,
        ui_mcp_proxy=params.ui_mcp_proxy or params.agent, flash_attn=params.flash_attn != "off",
        server_tools=server_tools(params), server_tools_runtime=params.server_tools_runtime,
        mcp_servers_config=params.mcp_servers_config, mcp_servers_json=params.mcp_servers_json,
        warmup=params.warmup, sse_ping_interval=float(params.sse_ping_interval),
        embeddings=params.embedding or params.reranking,
        pooling="rank" if params.reranking else (params.pooling or None),
        embd_normalize=params.embd_normalize, spm_infill=params.spm_infill,
        reasoning_format=params.reasoning_format, reasoning_budget=params.reasoning_budget,
        model_params=model_kw, rope=params.rope_kwargs(),
        adapters=params.adapter_kwargs(), **_spec_and_checkpoints(params))


def server_tools(params) -> list[str]:
    """--tools a,b (llama.cpp parse_csv_row) or "all" from --agent."""
    if params.agent:
        return ["all"]
    return [t.strip() for t in (params.server_tools or "").split(",") if t.strip()]


def cors_origins(params) -> str:
    """llama.cpp's common_params_parse: with built-in tools or MCP servers and no explicit
    --cors-origins (flag or LLAMA_ARG_CORS_ORIGINS), only localhost origins are allowed."""
    if "cors_origins" in params.set_fields:
        return params.cors_origins
    if server_tools(params) or params.mcp_servers_config or params.mcp_servers_json:
        from pyllama.log import get_logger
        get_logger("server").warning("server tools or MCP servers are enabled, using localhost as "
                                     "default CORS origin (change via --cors-origins)")
        return "localhost"
    return params.cors_origins


def _ui_config(text: str):
    """--ui-config(-file): a JSON object of Web UI defaults (llama.cpp fails the start on bad
    JSON: 'failed to parse UI config')."""
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SystemExit(f"error: failed to parse UI config: {e}") from None


def _sleep_seconds(value: int) -> int:
    from pyllama.server.sleep import check_seconds
    return check_seconds(value)


def _static_dir(path: str) -> str:
    from pyllama.server.static import check_dir
    return check_dir(path) if path else ""


def _non_negative(flag: str, value: int) -> int:
    if value < 0:
        raise SystemExit(f"error: {flag} must be >= 0")
    return value


def _max_body_size(value: int) -> int:
    if value < 0:
        raise SystemExit("error: --max-body-size must be >= 0 (0 = no limit)")
    return value


def _spec_and_checkpoints(params) -> dict:
    """Speculative decoding and SWA context checkpoint settings."""
    from pyllama import models
    sp = params.speculative
    return dict(
        draft_model=models.resolve(sp.model) if sp.model else None, spec_types=list(sp.types),
        spec_n_max=sp.n_max, spec_n_min=sp.n_min, spec_p_min=sp.p_min, spec_policy=sp.policy,
        spec_ngram_size_n=sp.ngram_simple_size_n, spec_ngram_size_m=sp.ngram_simple_size_m,
        spec_ngram_settings={k: v for k, v in vars(sp).items()
                             if k.startswith(("ngram_", "lookup_cache_"))},
        draft_type_k=sp.cache_type_k, draft_type_v=sp.cache_type_v,
        n_ctx_checkpoints=getattr(params, "n_ctx_checkpoints", 32),
        checkpoint_min_step=getattr(params, "checkpoint_min_step", 8192))


def _sampling(params):
    """SamplerParams from the sampling flags; None (= the model's general.sampling.* defaults
    over llama.cpp's) when no sampling flag was given."""
    if not params.sampling.user_set:
        return None
    return params.sampler_params()


def run(argv) -> int:
    params = parse_or_exit("server", argv)
    if not params.model and (params.models_dir or params.models_preset):   # router mode
        from pyllama.server import ServerConfig, router      # (pyllama/server/router.py)
        tools_cfg = ServerConfig(server_tools=server_tools(params),   # /tools on the router
                                 server_tools_runtime=params.server_tools_runtime,
                                 mcp_servers_config=params.mcp_servers_config,
                                 mcp_servers_json=params.mcp_servers_json)
        return router.serve_router(params.hostname, params.port, params.models_dir,
                                   params.models_max, params.models_autoload,
                                   router.child_args(list(argv)), params.models_preset,
                                   tools_cfg=tools_cfg)
    from pyllama.server import serve
    return serve(to_config(params))


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
