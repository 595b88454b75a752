"""Typed llama-server configuration: what tools/server.py turns the command line into.

No argparse here and no engine logic; llama.cpp counterpart: the server half of `common_params`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ServerConfig:
    """Everything llama-server needs; defaults are llama.cpp's (llama.cpp common/arg.cpp, common/common.h `common_params`)."""
    model: str | None = None
    alias: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)   # --tags: informational, in /models
    host: str = "127.0.0.1"
    port: int = 8080
    api_keys: list[str] = field(default_factory=list)
    timeout: float = 3600.0          # -to: HTTP read/write timeout (idle half-open sockets close)
    max_body_size: int = 32 << 20    # pyllama extension: request body limit in bytes, 0 = none
    drain_timeout: float = 10.0      # pyllama extension: seconds in-flight requests get on SIGTERM
    # context
    n_ctx: int = 0                  # 0 = the model's training context
    n_batch: int = 2048
    n_ubatch: int = 512
    n_parallel: int = -1            # -1 = auto: 4 slots, unified KV
    n_threads: int | None = None
    swa_full: bool = False
    swa_extra: int = 0
    numerics: str = "invariant"     # Context numerics: results independent of slots and batching
    kv_k_center: bool | None = None  # None: auto (pyllama.Context)
    type_k: str = "f16"
    type_v: str = "f16"
    kv_unified: bool | None = None  # None: on only with -np auto (llama-server's rule)
    kv_unified_per_slot: int = 0    # --kv-unified-per-slot: per-slot context cap (0 = none)
    # request defaults
    n_predict: int = -1
    n_keep: int = 0
    ctx_shift: bool = False         # --context-shift (turned off when the memory cannot shift)
    cache_prompt: bool = True
    n_cache_reuse: int = 0          # --cache-reuse: min chunk size reused by KV shifting (0 = off)
    reverse_prompts: list[str] = field(default_factory=list)
    special: bool = False           # -sp: special tokens (EOG included) appear in the text
    sampling: Any = None            # pyllama.sampling.SamplerParams or None for its defaults
    slot_prompt_similarity: float = 0.10
    cache_ram_mib: int = 8192        # -cram: host-memory prompt cache in MiB (0 off, -1 no limit)
    cache_idle_slots: bool = True    # --cache-idle-slots: idle slots saved (and, unified, cleared)
    # endpoints and chat
    endpoint_metrics: bool = False
    endpoint_slots: bool = True
    endpoint_props: bool = False
    slot_save_path: str | None = None
    chat_template: str | None = None  # a built-in name or Jinja source
    jinja: bool = True
    chat_template_kwargs: dict = field(default_factory=dict)
    cors_origins: str = "*"
    cors_methods: str = "GET, POST, DELETE, OPTIONS"
    cors_headers: str = "*"
    cors_credentials: bool = True
    verbose: bool = False            # -v (verbosity > 9): `__verbose` in OpenAI responses
    ui_mcp_proxy: bool = False       # --ui-mcp-proxy: /cors-proxy forwards (else 403)
    server_tools: list = field(default_factory=list)  # --tools names ("all"); none: /tools is 403
    server_tools_runtime: str = ""   # --tools-runtime (tools_builtin.make_runtime)
    mcp_servers_config: str = ""     # --mcp-servers-config: a JSON file (pyllama/server/mcp.py)
    mcp_servers_json: str = ""       # --mcp-servers-json: the same inline
    ui_config: dict | None = None    # --ui-config(-file): default Web UI settings, in /props
    prefill_assistant: bool = True   # a trailing assistant message is continued, not closed
    flash_attn: bool = True          # -fa: llama.cpp's flash-attention arithmetic (auto = on)
    rope: dict | None = None         # --rope-* / --yarn-*: Context(rope=...)
    adapters: dict = field(default_factory=dict)   # --lora* / --control-vector*: Context kwargs
    api_prefix: str = ""
    public_path: str = ""            # --path: static files served before the routes
    ssl_key_file: str = ""           # --ssl-key-file / --ssl-cert-file: HTTPS (uvicorn's TLS)
    ssl_cert_file: str = ""
    reuse_port: bool = False         # --reuse-port: SO_REUSEPORT on the listening sockets
    sleep_idle_seconds: int = -1     # --sleep-idle-seconds: unload the model when idle (-1 = never)
    ui: bool = True
    embeddings: bool = False        # --embeddings (and --rerank): the embedding endpoints
    pooling: str | None = None      # --pooling; None: the model's default (pyllama.Context)
    embd_normalize: int = 2         # --embd-normalize: common_embd_normalize of pooled vectors
    spm_infill: bool = False        # --spm-infill: Suffix/Prefix/Middle order for /infill
    reasoning_format: str = "deepseek"  # --reasoning-format: none | auto | deepseek | deepseek-legacy
    reasoning_budget: int = -1      # --reasoning-budget: thinking tokens before </think> is forced
    warmup: bool = True
    sse_ping_interval: float = 30.0
    model_params: dict = field(default_factory=dict)  # extra load_model kwargs (e.g. n_gpu_layers)
    # speculative decoding (-md alone enables draft-simple, docs/architecture.md)
    draft_model: str | None = None
    spec_types: list[str] = field(default_factory=list)   # --spec-type values ("none" ignored)
    spec_n_max: int = 3
    spec_n_min: int = 0
    spec_p_min: float = 0.0
    spec_policy: str = "cost"      # --spec-policy: cost-aware draft length, or llama.cpp's fixed
    spec_ngram_size_n: int = 12
    spec_ngram_size_m: int = 48
    # the n-gram drafters' settings by pyllama.speculative.drafter_chain's names
    spec_ngram_settings: dict = field(default_factory=dict)
    draft_type_k: str = "f16"
    draft_type_v: str = "f16"
    # SWA context checkpoints (-ctxcp, -cms)
    n_ctx_checkpoints: int = 32
    checkpoint_min_step: int = 8192

    @property
    def n_slots(self) -> int:
        return 4 if self.n_parallel < 0 else self.n_parallel

    @property
    def spec_draft(self) -> bool:
        """Draft-model speculation: -md with no --spec-type (as older llama.cpp), or with draft-simple
        among the types (an explicit `--spec-type none` turns it off)."""
        return bool(self.draft_model) and (not self.spec_types
                                           or "draft-simple" in self.spec_types)

    @property
    def spec_ngram(self) -> bool:
        """A model-free drafter is listed (ngram-simple, ngram-map-k(4v), ngram-mod, ngram-cache)."""
        return any(t in self.spec_types for t in
                   ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache"))

    @property
    def spec_settings(self) -> dict:
        return {"ngram_simple_size_n": self.spec_ngram_size_n,
                "ngram_simple_size_m": self.spec_ngram_size_m, **self.spec_ngram_settings}

    @property
    def spec_n_max_all(self) -> int:
        """The longest draft of the enabled drafters (common_speculative_n_max)."""
        from pyllama.speculative import drafter_chain
        st = self.spec_settings
        types = [t for t in self.spec_types if t != "draft-simple"]
        n = drafter_chain(types, st, lookup=({}, {}))[1] if self.spec_ngram else 0
        return max(n, self.spec_n_max if self.spec_draft else 0)

    @property
    def unified(self) -> bool:
        """llama-server: -np auto means 4 slots and a unified cache; an explicit -np keeps
        llama.cpp's default (not unified) unless --kv-unified."""
        return self.n_parallel < 0 if self.kv_unified is None else self.kv_unified

    @property
    def n_ctx_pool(self) -> int:
        """-c, or with -c 0 and --kv-unified-per-slot N: n_slots * N (server.cpp sizes the pool)."""
        if self.n_ctx == 0 and self.kv_unified_per_slot > 0:
            return self.n_slots * self.kv_unified_per_slot
        return self.n_ctx
