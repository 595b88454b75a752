"""Typed parameters the llama.cpp-style flags parse into (field names follow llama.cpp's
common_params / common_params_sampling / common_params_speculative), and their mapping onto
library calls: load_model kwargs, Context kwargs, SamplerParams.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

SEED_RANDOM = 0xFFFFFFFF  # LLAMA_DEFAULT_SEED
K_CENTER = {"auto": None, "on": True, "off": False}      # --kv-k-center -> Context kwarg
# tools whose default --numerics is llama.cpp's (Params.numerics_for)
LLAMA_CPP_NUMERICS_TOOLS = frozenset({"cli", "completion", "perplexity", "embedding", "speculative"})


@dataclass
class SamplingArgs:
    """common_params_sampling names and defaults (common/common.h)."""
    seed: int = SEED_RANDOM
    n_probs: int = 0
    temp: float = 0.80
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typ_p: float = 1.00
    top_n_sigma: float = -1.00
    xtc_probability: float = 0.00
    xtc_threshold: float = 0.10
    penalty_last_n: int = 64
    penalty_repeat: float = 1.00
    penalty_freq: float = 0.00
    penalty_present: float = 0.00
    dry_multiplier: float = 0.00
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: list = field(default_factory=lambda: ["\n", ":", '"', "*"])
    dynatemp_range: float = 0.00
    dynatemp_exponent: float = 1.00
    mirostat: int = 0
    mirostat_tau: float = 5.00
    mirostat_eta: float = 0.10
    adaptive_target: float = -1.00
    adaptive_decay: float = 0.90
    ignore_eos: bool = False
    logit_bias: list = field(default_factory=list)          # [(token_id, bias)]
    samplers: list = field(default_factory=lambda: [
        "penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc",
        "temperature"])
    grammar: str = ""
    user_set: set = field(default_factory=set)  # fields given on the command line / env


@dataclass
class SpeculativeArgs:
    """common_params_speculative: draft model, draft lengths, n-gram settings."""
    types: list = field(default_factory=list)   # --spec-type values, accumulated
    model: str = ""
    n_max: int = 3
    n_min: int = 0
    p_min: float = 0.0
    p_split: float = 0.1
    n_gpu_layers: str = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    ngram_mod_n_match: int = 24
    ngram_mod_n_min: int = 48
    ngram_mod_n_max: int = 64
    ngram_simple_size_n: int = 12
    ngram_simple_size_m: int = 48
    ngram_simple_min_hits: int = 1
    ngram_map_k_size_n: int = 12
    ngram_map_k_size_m: int = 48
    ngram_map_k_min_hits: int = 1
    ngram_map_k4v_size_n: int = 12
    ngram_map_k4v_size_m: int = 48
    ngram_map_k4v_min_hits: int = 1
    spec_default: bool = False                  # --spec-default: adds ngram-mod
    policy: str = "cost"                        # --spec-policy: cost-aware or fixed draft length
    lookup_cache_static: str = ""               # -lcs (ngram-cache)
    lookup_cache_dynamic: str = ""              # -lcd (ngram-cache)


@dataclass
class Params:
    """Everything a tool needs from its flags; tools read it, the library never sees it."""
    tool: str = ""
    # model, prompt, generation
    model: str = ""
    prompt: str = ""
    prompt_file: str = ""
    prompt_is_binary: bool = False
    system_prompt: str = ""
    n_predict: int = -1
    n_keep: int = 0
    escape: bool = True
    antiprompt: list = field(default_factory=list)
    special: bool = False
    # context, batching, threads, cache
    n_ctx: int = 0
    n_batch: int = 2048
    n_ubatch: int = 512
    n_parallel: int = 1
    n_threads: int = -1
    n_threads_batch: int = -1
    swa_full: bool = False
    swa_extra: int = 0
    numerics: str = ""              # "" = the tool's default (see numerics_for)
    kv_k_center: str = "auto"
    kv_unified: bool = False
    kv_unified_per_slot: int = 0
    ctx_shift: bool = False
    path_prompt_cache: str = ""     # llama-completion --prompt-cache
    prompt_cache_all: bool = False
    prompt_cache_ro: bool = False
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    flash_attn: str = "auto"
    # RoPE / YaRN (common_params: 0 / -1 = the model's) and metadata overrides
    rope_scaling_type: str = ""
    rope_freq_base: float = 0.0
    rope_freq_scale: float = 0.0
    yarn_orig_ctx: int = 0
    yarn_ext_factor: float = -1.0
    yarn_attn_factor: float = -1.0
    yarn_beta_slow: float = -1.0
    yarn_beta_fast: float = -1.0
    kv_overrides: list = field(default_factory=list)     # [(key, value)] from --override-kv
    # LoRA adapters and control vectors: [(path, scale)] in command-line order
    lora_adapters: list = field(default_factory=list)
    lora_init_without_apply: bool = False
    control_vectors: list = field(default_factory=list)
    control_vector_layer_range: tuple = (0, 0)   # (start, end), <= 0: 1 / n_layer
    perf: bool = True
    warmup: bool = True
    n_gpu_layers: str = "auto"
    devices: str = ""
    # logging and misc
    verbosity: int = 3
    log_disable: bool = False
    log_file: str = ""
    log_prefix: bool = True
    log_timestamps: bool = True
    usage: bool = False
    version: bool = False
    list_devices: bool = False
    cache_list: bool = False
    completion_bash: bool = False
    verbose_prompt: bool = False
    display_prompt: bool = True
    color: str = "auto"
    # completion / cli
    conversation: bool | None = None  # None = auto (on when the model has a template)
    interactive: bool = False
    interactive_first: bool = False
    single_turn: bool = False
    multiline_input: bool = False
    input_prefix_bos: bool = False
    input_prefix: str = ""
    input_suffix: str = ""
    use_jinja: bool = True
    chat_template: str = ""
    chat_template_file: str = ""
    chat_template_kwargs: str = ""
    show_timings: bool = True
    simple_io: bool = False
    n_print: int = -1
    # server
    hostname: str = "127.0.0.1"
    port: int = 8080
    reuse_port: bool = False
    public_path: str = ""
    ssl_file_key: str = ""
    ssl_file_cert: str = ""
    sleep_idle_seconds: int = -1
    models_dir: str = ""
    models_preset: str = ""
    models_max: int = 4
    models_autoload: bool = True
    api_keys: list = field(default_factory=list)
    api_key_file: str = ""
    timeout: int = 3600
    max_body_size: int = 32 << 20
    drain_timeout: int = 10
    n_threads_http: int = -1
    sse_ping_interval: int = 30
    alias: str = ""
    cont_batching: bool = True
    cache_prompt: bool = True
    n_cache_reuse: int = 0
    endpoint_metrics: bool = False
    endpoint_slots: bool = True
    endpoint_props: bool = False
    slot_save_path: str = ""
    api_prefix: str = ""
    webui: bool = True
    slot_prompt_similarity: float = 0.10
    cache_ram_mib: int = 8192        # -cram: host-memory prompt cache (pyllama/server/prompt_cache.py)
    cache_idle_slots: bool = True    # --cache-idle-slots
    tags: str = ""
    reasoning_format: str = "deepseek"
    reasoning: str = "auto"          # -rea: on / off set enable_thinking for the template
    reasoning_budget: int = -1
    reasoning_effort: str = "default"
    reasoning_preserve: bool | None = None
    prefill_assistant: bool = True
    cors_origins: str = "*"
    cors_methods: str = "GET, POST, DELETE, OPTIONS"
    cors_headers: str = "*"
    cors_credentials: bool = True
    ui_config_json: str = ""
    ui_mcp_proxy: bool = False
    server_tools: str = ""           # --tools (CSV; "all"), pyllama/server/tools_builtin.py
    server_tools_runtime: str = ""   # --tools-runtime
    mcp_servers_config: str = ""     # --mcp-servers-config, pyllama/server/mcp.py
    mcp_servers_json: str = ""       # --mcp-servers-json
    agent: bool = False              # -ag: --tools all and --ui-mcp-proxy
    # embeddings, rerank, infill (server; llama-embedding)
    embedding: bool = False
    reranking: bool = False
    pooling: str = ""               # "" = unspecified: the model's default
    embd_normalize: int = 2
    spm_infill: bool = False
    embd_out: str = ""              # llama-embedding --embd-output-format
    embd_sep: str = "\n"
    cls_sep: str = "\t"
    # perplexity
    ppl_stride: int = 0
    ppl_output_type: int = 0
    n_chunks: int = -1
    kl_divergence: bool = False
    logits_file: str = ""
    hellaswag: bool = False
    hellaswag_tasks: int = 400
    winogrande: bool = False
    winogrande_tasks: int = 0
    multiple_choice: bool = False
    multiple_choice_tasks: int = 0
    # tokenize
    ids_only: bool = False
    use_stdin: bool = False
    no_bos: bool = False
    parse_special: bool = True
    show_count: bool = False

    sampling: SamplingArgs = field(default_factory=SamplingArgs)
    speculative: SpeculativeArgs = field(default_factory=SpeculativeArgs)
    set_fields: set = field(default_factory=set)  # dests set by env or command line

    # ---- mapping onto library calls ------------------------------------------------------
    def model_kwargs(self) -> dict:
        """kwargs for pyllama.load_model beyond the path (-ngl 0 / -dev none: CPU backend)."""
        kw = {"n_threads": self.n_threads if self.n_threads > 0 else None,
              "n_gpu_layers": _ngl(self.n_gpu_layers)}
        if kw["n_gpu_layers"] == 0:
            kw["backend"] = "cpu"
        if self.kv_overrides:
            kw["kv_overrides"] = dict(self.kv_overrides)
        return kw

    def context_kwargs(self, n_ctx_train: int | None = None) -> dict:
        """kwargs for pyllama.Context; -c 0 means the model's training context."""
        n_ctx = self.n_ctx if self.n_ctx > 0 else (n_ctx_train or 4096)
        return dict(n_ctx=n_ctx, n_batch=self.n_batch, n_ubatch=min(self.n_ubatch, self.n_batch),
                    n_seq_max=max(1, self.n_parallel), swa_full=self.swa_full,
                    swa_extra=self.swa_extra, kv_unified=self.kv_unified,
                    type_k=self.cache_type_k, type_v=self.cache_type_v,
                    n_threads=self.n_threads if self.n_threads > 0 else None,
                    kv_k_center=K_CENTER[self.kv_k_center],
                    flash_attn=self.flash_attn != "off", rope=self.rope_kwargs(),
                    **self.adapter_kwargs())

    def adapter_kwargs(self) -> dict:
        """Context kwargs for --lora / --lora-scaled / --control-vector* (none when unused)."""
        kw = {}
        if self.lora_adapters:
            kw.update(lora_adapters=list(self.lora_adapters),
                      lora_apply=not self.lora_init_without_apply)
        if self.control_vectors:
            kw.update(control_vectors=list(self.control_vectors),
                      control_vector_layer_range=tuple(self.control_vector_layer_range))
        return kw

    def rope_kwargs(self) -> dict:
        """Context(rope=...): llama_context_params' RoPE / YaRN fields from the flags."""
        return dict(rope_scaling_type=self.rope_scaling_type or None,
                    rope_freq_base=self.rope_freq_base, rope_freq_scale=self.rope_freq_scale,
                    yarn_ext_factor=self.yarn_ext_factor, yarn_attn_factor=self.yarn_attn_factor,
                    yarn_beta_fast=self.yarn_beta_fast, yarn_beta_slow=self.yarn_beta_slow,
                    yarn_orig_ctx=self.yarn_orig_ctx)

    def template_kwargs(self) -> dict:
        """Extra chat template variables: --chat-template-kwargs (a JSON object), then
        --reasoning on|off (enable_thinking), --reasoning-effort (not 'default') and
        --reasoning-preserve as llama.cpp sets them in default_template_kwargs (common/arg.cpp)."""
        import json
        kw = json.loads(self.chat_template_kwargs) if self.chat_template_kwargs else {}
        if self.reasoning in ("on", "off"):
            kw["enable_thinking"] = self.reasoning == "on"
        if self.reasoning_effort != "default":
            kw["reasoning_effort"] = self.reasoning_effort
        if self.reasoning_preserve is not None:
            kw["preserve_reasoning"] = self.reasoning_preserve
        return kw

    def numerics_for(self, backend_name: str) -> str:
        """--numerics, else llama.cpp's arithmetic where llama.cpp's CPU outputs are the
        reference users compare with (one sequence, prompt then token by token: llama-cli,
        llama-completion, llama-perplexity, and llama-speculative(-simple), whose one-row
        verification prints llama-completion's text) and the batch-invariant one elsewhere
        (server slots, llama-lookup)."""
        if self.numerics:
            return self.numerics
        single = self.tool in LLAMA_CPP_NUMERICS_TOOLS
        return "llama.cpp" if single and backend_name in ("cpu", "ref") else "invariant"

    def sampler_params(self, cls=None, **overrides):
        """A pyllama.sampling.SamplerParams from the sampling fields it declares; user_set names
        the fields given on the command line or in the environment."""
        if cls is None:
            from pyllama.sampling import SamplerParams as cls
        values = {f.name: getattr(self.sampling, f.name)
                  for f in dataclasses.fields(self.sampling)}
        values["logit_bias"] = dict(self.sampling.logit_bias)
        values["user_set"] = frozenset(self.sampling.user_set)
        values.update(overrides)
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in names})


def _ngl(v: str) -> int:
    """-ngl value → llama.cpp's int: auto = -1, all = -2, else the number."""
    return {"auto": -1, "all": -2}[v] if v in ("auto", "all") else int(v)
