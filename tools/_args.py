"""The llama.cpp command-line flags as ONE declarative table, and llama.cpp's parser rules.

Every option has exactly one disposition (`status`):
  impl         implemented: changes what pyllama does
  noop         accepted, means nothing here (mmap/numa/GPU placement...); one warning line
  unsupported  not supported yet: using it exits 1 (for a +/- pair only the non-default side)
  deprecated   an old spelling llama.cpp removed; still works, with a one-line note
Parser rules (common/arg.cpp): config files < environment < command line; `_` → `-` in long names;
no `--opt=value`; no-value flags from env only when truthy; `LLAMA_ARG_NO_X` forces a +/- pair
off; a repeated option warns (lists accumulate). docs/flags.md is generated from this table.
"""
from __future__ import annotations

import dataclasses
import math
import os
import sys
from dataclasses import dataclass
from typing import Any, Callable

from ._convert import ConvertError, is_truthy, parse_bool, process_escapes, stof, stoi, stoul
from ._params import Params

S, C, CO, SP, P, T = "server", "cli", "completion", "speculative", "perplexity", "tokenize"
E = "embedding"
LK = "lookup"            # llama-lookup, -lookup-create, -lookup-stats (LLAMA_EXAMPLE_LOOKUP)
ALL = frozenset({S, C, CO, SP, P, T, E, LK})
TOOL_NAMES = {S: "llama-server", C: "llama-cli", CO: "llama-completion",
              SP: "llama-speculative", P: "llama-perplexity", T: "llama-tokenize",
              E: "llama-embedding", LK: "llama-lookup"}
IMPL, NOOP, UNSUP, DEPR = "impl", "noop", "unsupported", "deprecated"
KV_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


class ArgError(Exception):
    """A parse error; str() is the complete message llama.cpp prints (exit 1)."""


@dataclass(frozen=True)
class Opt:
    args: tuple            # positive spellings, first is usually the short one
    kind: str              # flag | bool | int | uint | float | str | enum | list | optenum | pair
    dest: str              # Params field, dotted for sampling./speculative.
    help: str
    neg: tuple = ()        # negative spellings of a bool pair
    env: str | None = None
    tools: frozenset = ALL
    status: str = IMPL
    hint: str | None = None
    choices: tuple = ()
    const: Any = True      # value a flag stores (or optenum's bare value)
    group: str = "common"  # common | sampling | speculative | example
    note: str = ""         # noop/deprecated/unsupported message
    old_env: tuple = ()    # deprecated env names read too
    conv: Callable | None = None  # custom converter str -> value (raises ConvertError)

    @property
    def all_args(self) -> tuple:
        return self.args + self.neg

    def value_hint(self) -> str | None:
        if self.hint is not None:
            return self.hint
        return {"int": "N", "uint": "N", "float": "N", "str": "STRING", "list": "STRING"}.get(
            self.kind, "{" + ",".join(self.choices) + "}" if self.kind == "enum" else None)


def _O(args, kind, dest, help, **kw) -> Opt:
    a = tuple(args.split()) if isinstance(args, str) else tuple(args)
    if "neg" in kw and isinstance(kw["neg"], str):
        kw["neg"] = tuple(kw["neg"].split())
    if "tools" in kw and not isinstance(kw["tools"], frozenset):
        kw["tools"] = frozenset(kw["tools"])
    return Opt(a, kind, dest, help, **kw)


def _csv(s: str) -> list[str]:
    """common/arg.cpp parse_csv_row: comma-separated fields, double quotes group a field
    (a doubled quote inside one is a quote)."""
    out, cur, quoted, i = [], "", False, 0
    while i < len(s):
        ch = s[i]
        if quoted:
            if ch == '"' and i + 1 < len(s) and s[i + 1] == '"':
                cur += '"'
                i += 1
            elif ch == '"':
                quoted = False
            else:
                cur += ch
        elif ch == '"':
            quoted = True
        elif ch == ",":
            out.append(cur)
            cur = ""
        else:
            cur += ch
        i += 1
    out.append(cur)
    return out


def _scaled(s: str, what: str) -> list:
    """FNAME:SCALE,... (--lora-scaled, --control-vector-scaled) -> [(fname, scale)]."""
    out = []
    for item in _csv(s):
        parts = item.split(":")
        if len(parts) != 2:
            raise ConvertError(f"{what} format: FNAME:SCALE")
        out.append((parts[0], stof(parts[1])))
    return out


def _rope_scale(s: str) -> float:
    """--rope-scale N sets rope_freq_scale = 1/N (common/arg.cpp)."""
    return 1.0 / stof(s)


def _kv_overrides(s: str) -> list:
    """--override-kv KEY=TYPE:VALUE[,...] -> [(key, value)] as string_parse_kv_override reads
    them (common/common.cpp): int (atol), float (atof), bool (true|false), str (<= 127 chars)."""
    out = []
    for item in s.split(","):
        key, sep, rest = item.partition("=")
        value = None
        if sep and len(key) < 128:
            typ, _, val = rest.partition(":")
            if typ == "int" and _:
                value = _atol(val)
            elif typ == "float" and _:
                value = _atof(val)
            elif typ == "bool" and val in ("true", "false"):
                value = val == "true"
            elif typ == "str" and _ and len(val) <= 127:
                value = val
        if value is None:
            raise ConvertError(f"error: Invalid type for KV override: {item}")
        out.append((key, value))
    return out


def _atol(s: str) -> int:
    import re
    m = re.match(r"\s*[+-]?\d+", s)
    return int(m.group()) if m else 0


def _atof(s: str) -> float:
    import re
    m = re.match(r"\s*[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan)", s,
                 re.IGNORECASE)
    return float(m.group()) if m else 0.0


def _kv_type(s: str) -> str:
    if s not in KV_TYPES:
        raise ConvertError(f"Unsupported cache type: {s}")
    return s


def _on_off_auto(flag: str) -> Callable:
    table = {"on": "on", "enabled": "on", "true": "on", "1": "on", "off": "off",
             "disabled": "off", "false": "off", "0": "off", "auto": "auto", "-1": "auto"}

    def conv(s: str) -> str:
        if s not in table:
            raise ConvertError(f"error: unknown value for {flag}: '{s}'")
        return table[s]
    return conv


def _ngl(s: str) -> str:
    if s in ("auto", "all"):
        return s
    return str(stoi(s))


def _read_file(path: str) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        raise ConvertError(f"error: failed to open file '{path}'") from None
    text = data.decode("utf-8", errors="replace")
    return text[:-1] if text.endswith("\n") else text


def _json_schema(text: str) -> str:
    """-j/-jf: llama.cpp converts the schema while parsing the flag (json_schema_to_grammar)."""
    from pyllama.grammar import GrammarError, json_schema_to_gbnf
    try:
        return json_schema_to_gbnf(text)
    except GrammarError as e:
        raise ConvertError(str(e).replace("\n", " ")) from None


def _logit_bias(s: str) -> tuple:
    import re
    m = re.fullmatch(r"\s*(\d+)\s*([+-])\s*(.*)", s)
    if not m:
        raise ConvertError("invalid input format")
    return int(m.group(1)), stof(m.group(2) + m.group(3))


_SAMPLER_ALIASES = {
    "dry": "dry", "top_k": "top_k", "top-k": "top_k", "topk": "top_k", "top_p": "top_p",
    "top-p": "top_p", "topp": "top_p", "nucleus": "top_p", "top_n_sigma": "top_n_sigma",
    "top-n-sigma": "top_n_sigma", "topnsigma": "top_n_sigma", "typ_p": "typ_p",
    "typ-p": "typ_p", "typp": "typ_p", "typ": "typ_p", "typical": "typ_p", "typical_p": "typ_p",
    "min_p": "min_p", "min-p": "min_p", "minp": "min_p", "temperature": "temperature",
    "temp": "temperature", "xtc": "xtc", "infill": "infill", "penalties": "penalties",
    "adaptive_p": "adaptive_p", "adaptive-p": "adaptive_p"}
_SAMPLER_CHARS = {"e": "penalties", "d": "dry", "s": "top_n_sigma", "k": "top_k", "y": "typ_p",
                  "p": "top_p", "m": "min_p", "x": "xtc", "t": "temperature", "i": "infill",
                  "a": "adaptive_p"}


def _samplers(s: str) -> list:
    return [_SAMPLER_ALIASES[n] for n in s.split(";") if n in _SAMPLER_ALIASES]


def _sampler_seq(s: str) -> list:
    return [_SAMPLER_CHARS[c] for c in s if c in _SAMPLER_CHARS]


def _repeat_last_n(s: str) -> int:
    v = stoi(s)
    if v < 0:
        raise ConvertError(f"error: invalid repeat-last-n = {v}")
    return v


def _repeat_penalty(s: str) -> float:
    v = stof(s)
    if not v > 0 or v == float("inf"):
        raise ConvertError("error: repeat-penalty must be finite and greater than 0")
    return v


def _n_parallel(s: str) -> int:
    v = stoi(s)
    if v == 0:
        raise ConvertError("error: invalid value for n_parallel")
    return v


def _device(s: str) -> str:
    if s != "none" and not all(d.startswith("CUDA") for d in s.split(",")):
        raise ConvertError(f"invalid device: {s}")
    return s


def _hosts(s: str) -> str:
    hosts = [h.strip() for h in s.split(",") if h.strip()]
    if not hosts:
        raise ConvertError("--host requires at least one address")
    return ",".join(hosts)


ALL_BUT_S = ALL - {S}
SCCO = {S, C, CO}
SCSP = {S, C, SP}
_GPU_NOTE = "GPU placement: pyllama uses one device"
_CPU_NOTE = "CPU affinity/priority/polling: pyllama leaves thread placement to the OS"

OPTIONS: list[Opt] = [
    # ---- misc ------------------------------------------------------------------------------
    _O("-h --help --usage", "flag", "usage", "print usage and exit"),
    _O("--version", "flag", "version", "show version and build info"),
    _O("--completion-bash", "flag", "completion_bash",
       "print source-able bash completion script for llama.cpp"),
    _O("-cl --cache-list", "flag", "cache_list", "show list of models in cache"),
    _O("--verbose-prompt", "flag", "verbose_prompt",
       "print a verbose prompt before generation (default: false)", tools={C, CO, E}),
    _O("--display-prompt", "bool", "display_prompt", "whether to print prompt at generation "
       "(default: true)", neg="--no-display-prompt", tools={C, CO}),
    _O("-co --color", "optenum", "color", "Colorize output to distinguish prompt and user input "
       "from generations ('on', 'off', or 'auto', default: 'auto')", hint="[on|off|auto]",
       choices=("on", "off", "auto"), const="on", tools={C, CO, SP, LK}, conv=_on_off_auto("--color"),
       status=NOOP, note="pyllama prints plain text"),
    # ---- model, prompt, generation length --------------------------------------------------
    _O("-m --model", "str", "model", "model path to load", hint="FNAME", env="LLAMA_ARG_MODEL"),
    _O("-mu --model-url", "str", "model_url", "model download url", hint="MODEL_URL",
       env="LLAMA_ARG_MODEL_URL", status=UNSUP, note="downloads: pass a local GGUF with -m"),
    _O("-hf -hfr --hf-repo", "str", "hf_repo", "Hugging Face model repository", hint="<user>/<model>[:quant]",
       env="LLAMA_ARG_HF_REPO", status=UNSUP, note="downloads: pass a local GGUF with -m"),
    _O("-hff --hf-file", "str", "hf_file", "Hugging Face model file", hint="FILE",
       env="LLAMA_ARG_HF_FILE", status=UNSUP, note="downloads: pass a local GGUF with -m"),
    _O("-hft --hf-token", "str", "hf_token", "Hugging Face access token", hint="TOKEN",
       env="HF_TOKEN", status=NOOP, note="pyllama never downloads"),
    _O("--offline", "flag", "offline", "Offline mode: forces use of cache, prevents network access",
       env="LLAMA_ARG_OFFLINE", status=NOOP, note="pyllama never uses the network"),
    _O("-p --prompt", "str", "prompt", "prompt to start generation with", hint="PROMPT",
       tools=ALL_BUT_S),
    _O("-f --file", "str", "prompt", "a file containing the prompt (default: none)", hint="FNAME",
       tools=ALL_BUT_S, conv=_read_file),
    _O("-bf --binary-file", "str", "prompt", "binary file containing the prompt (default: none)",
       hint="FNAME", tools=ALL_BUT_S),
    _O("-sys --system-prompt", "str", "system_prompt", "system prompt to use with model (if "
       "applicable, depending on chat template)", hint="PROMPT", tools={C, CO}),
    _O("-sysf --system-prompt-file", "str", "system_prompt", "a file containing the system "
       "prompt (default: none)", hint="FNAME", tools={C, CO}, conv=_read_file),
    _O("-n --predict --n-predict", "int", "n_predict", "number of tokens to predict (default: "
       "-1, -1 = infinity)", env="LLAMA_ARG_N_PREDICT"),
    _O("--keep", "int", "n_keep", "number of tokens to keep from the initial prompt (default: 0, "
       "-1 = all)"),
    _O("-e --escape", "bool", "escape", "process escapes sequences (\\n, \\r, \\t, \\', \\\", "
       "\\\\) (default: true)", neg="--no-escape"),
    _O("-r --reverse-prompt", "list", "antiprompt", "halt generation at PROMPT, return control "
       "in interactive mode", hint="PROMPT", tools=SCCO),
    _O("-sp --special", "flag", "special", "special tokens output enabled (default: false)",
       tools=SCCO),
    # ---- context, batching, threads, KV cache ----------------------------------------------
    _O("-c --ctx-size", "int", "n_ctx", "size of the prompt context (default: 0, 0 = loaded "
       "from model)", env="LLAMA_ARG_CTX_SIZE"),
    _O("-b --batch-size", "int", "n_batch", "logical maximum batch size (default: 2048)",
       env="LLAMA_ARG_BATCH"),
    _O("-ub --ubatch-size", "int", "n_ubatch", "physical maximum batch size (default: 512)",
       env="LLAMA_ARG_UBATCH"),
    _O("-np --parallel", "int", "n_parallel", "number of parallel sequences to decode "
       "(default: 1)", env="LLAMA_ARG_N_PARALLEL", conv=_n_parallel),
    _O("-t --threads", "int", "n_threads", "number of CPU threads to use during generation "
       "(default: -1)", env="LLAMA_ARG_THREADS"),
    _O("-tb --threads-batch", "int", "n_threads_batch", "number of threads to use during batch "
       "and prompt processing (default: same as --threads)", status=NOOP,
       note="pyllama uses the -t thread count for batches too"),
    _O("-C --cpu-mask", "str", "cpu_mask", "CPU affinity mask", hint="M", status=NOOP, note=_CPU_NOTE),
    _O("-Cr --cpu-range", "str", "cpu_range", "range of CPUs for affinity", hint="lo-hi",
       status=NOOP, note=_CPU_NOTE),
    _O("--cpu-strict", "int", "cpu_strict", "use strict CPU placement (default: 0)", hint="<0|1>",
       status=NOOP, note=_CPU_NOTE),
    _O("--prio", "int", "prio", "set process/thread priority (default: 0)", hint="N",
       status=NOOP, note=_CPU_NOTE),
    _O("--poll", "int", "poll", "use polling level to wait for work (default: 50)", hint="<0...100>",
       note="OpenMP spin before sleeping; default 50 on an idle machine, else 0 (pyllama/omp.py)"),
    _O("-Cb --cpu-mask-batch", "str", "cpu_mask_batch", "CPU affinity mask for batches",
       hint="M", status=NOOP, note=_CPU_NOTE),
    _O("-Crb --cpu-range-batch", "str", "cpu_range_batch", "ranges of CPUs for batches",
       hint="lo-hi", status=NOOP, note=_CPU_NOTE),
    _O("--cpu-strict-batch", "int", "cpu_strict_batch", "use strict CPU placement for batches",
       hint="<0|1>", status=NOOP, note=_CPU_NOTE),
    _O("--prio-batch", "int", "prio_batch", "set process/thread priority for batches", hint="N",
       status=NOOP, note=_CPU_NOTE),
    _O("--poll-batch", "int", "poll_batch", "use polling to wait for work for batches",
       hint="<0|1>", status=NOOP, note=_CPU_NOTE),
    _O("--numa", "enum", "numa", "attempt optimizations that help on some NUMA systems",
       choices=("distribute", "isolate", "numactl"), hint="TYPE", env="LLAMA_ARG_NUMA",
       status=NOOP, note="NUMA placement is left to the OS"),
    _O("-fa --flash-attn", "optenum", "flash_attn", "set Flash Attention use ('on', 'off', or "
       "'auto', default: 'auto')", hint="[on|off|auto]", choices=("on", "off", "auto"), const="on",
       env="LLAMA_ARG_FLASH_ATTN", conv=_on_off_auto("--flash-attn"),
       note="with llama.cpp numerics (--numerics; the CPU default of llama-cli, -completion, "
       "-perplexity, -simple) on/auto pick llama.cpp's CPU flash-attention arithmetic, as "
       "llama.cpp's auto does on the CPU; invariant numerics have one attention path"),
    _O("-ctk --cache-type-k", "str", "cache_type_k", "KV cache data type for K\nallowed values: "
       + ", ".join(KV_TYPES) + "\n(default: f16)", hint="TYPE", env="LLAMA_ARG_CACHE_TYPE_K",
       conv=_kv_type),
    _O("-ctv --cache-type-v", "str", "cache_type_v", "KV cache data type for V\nallowed values: "
       + ", ".join(KV_TYPES) + "\n(default: f16)", hint="TYPE", env="LLAMA_ARG_CACHE_TYPE_V",
       conv=_kv_type),
    _O("--swa-full", "flag", "swa_full", "use full-size SWA cache (default: false)",
       env="LLAMA_ARG_SWA_FULL"),
    _O("--swa-extra", "int", "swa_extra", "keep N positions beyond the sliding window per "
       "sequence so a rollback of up to N tokens stays exact (default: 0)",
       env="LLAMA_ARG_SWA_EXTRA"),
    _O("--kv-k-center", "enum", "kv_k_center", "store a quantized K cache minus the model's K bias "
       "(same logits in exact arithmetic, far less q8_0/q4_0 error on Qwen2; not llama.cpp's "
       "bytes)\n(default: auto = on for a quantized K cache of a model with K biases)",
       choices=("auto", "on", "off"), hint="MODE", env="LLAMA_ARG_KV_K_CENTER",
       tools={S, C, CO, SP, P}),
    _O("--numerics", "enum", "numerics", "arithmetic: 'llama.cpp' (llama.cpp's CPU kernels, chosen by "
       "batch size as llama.cpp does: same tokens as llama.cpp) or 'invariant' (results independent "
       "of batch shape; exact speculative decoding)\n(default: llama.cpp on the CPU for "
       "llama-cli/-completion/-perplexity/-speculative(-simple), else invariant)", choices=("invariant", "llama.cpp"),
       hint="MODE", env="LLAMA_ARG_NUMERICS", tools={S, C, CO, SP, P, LK}),
    _O("-kvu --kv-unified", "bool", "kv_unified", "use single unified KV buffer shared across "
       "all sequences (default: false)", neg="-no-kvu --no-kv-unified", env="LLAMA_ARG_KV_UNIFIED",
       tools={S, P}),
    _O("--kv-unified-per-slot", "int", "kv_unified_per_slot", "per-slot context cap in a "
       "unified cache (default: 0 = unset)", env="LLAMA_ARG_KV_UNIFIED_PER_SLOT", tools={S}),
    _O("--context-shift", "bool", "ctx_shift", "whether to use context shift on infinite text "
       "generation (default: disabled)", neg="--no-context-shift", env="LLAMA_ARG_CONTEXT_SHIFT",
       tools={S, C, CO, P}),
    _O("-kvo --kv-offload", "bool", "kv_offload", "whether to enable KV cache offloading "
       "(default: enabled)", neg="-nkvo --no-kv-offload", env="LLAMA_ARG_KV_OFFLOAD",
       status=NOOP, note="the KV cache lives with the weights' backend"),
    _O("--repack", "bool", "repack", "whether to enable weight repacking (default: enabled)",
       neg="-nr --no-repack", env="LLAMA_ARG_REPACK", status=NOOP,
       note="pyllama does not repack weights"),
    _O("--no-host", "flag", "no_host", "bypass host buffer allowing extra buffers to be used",
       env="LLAMA_ARG_NO_HOST", status=NOOP, note="no extra host buffers here"),
    _O("-lm --load-mode", "enum", "load_mode", "how to load the model weights (default: auto)",
       choices=("auto", "none", "mmap", "mlock", "mmap+mlock", "dio"), hint="MODE",
       env="LLAMA_ARG_LOAD_MODE", status=NOOP, note="pyllama always memory-maps the GGUF"),
    _O("-lzm --lazy-mode", "enum", "lazy_mode", "on-demand reading of some tensors (default: "
       "auto)", choices=("on", "auto", "off"), hint="MODE", env="LLAMA_ARG_LAZY_MODE",
       status=NOOP, note="pyllama always memory-maps the GGUF"),
    _O("-dt --defrag-thold", "str", "defrag_thold", "KV cache defragmentation threshold "
       "(DEPRECATED)", hint="N", env="LLAMA_ARG_DEFRAG_THOLD", status=NOOP,
       note="DEPRECATED: --defrag-thold is deprecated and no longer necessary to specify"),
    _O("--perf", "bool", "perf", "whether to enable internal libllama performance timings "
       "(default: true)", neg="--no-perf", env="LLAMA_ARG_PERF"),
    _O("--warmup", "bool", "warmup", "whether to perform warmup with an empty run (default: "
       "enabled)", neg="--no-warmup", tools={S, C, CO, P}, status=NOOP,
       note="pyllama has no graph or buffers to warm up"),
    _O("--check-tensors", "flag", "check_tensors", "check model tensor data for invalid values "
       "(default: false)", status=UNSUP, note="tensor checking"),
    _O("--override-kv", "list", "kv_overrides", "advanced option to override model metadata by "
       "key", hint="KEY=TYPE:VALUE", conv=_kv_overrides),
    _O("--lora", "list", "lora_adapters", "path to LoRA adapter (use comma-separated values to "
       "load multiple adapters)", hint="FNAME", conv=lambda s: [(f, 1.0) for f in _csv(s)]),
    _O("--lora-scaled", "list", "lora_adapters", "path to LoRA adapter with user defined "
       "scaling (format: FNAME:SCALE,...)\nnote: use comma-separated values",
       hint="FNAME:SCALE,...", conv=lambda s: _scaled(s, "lora-scaled")),
    _O("--lora-init-without-apply", "flag", "lora_init_without_apply", "load LoRA adapters "
       "without applying them (apply later via POST /lora-adapters) (default: disabled)",
       tools={S}),
    _O("--control-vector", "list", "control_vectors", "add a control vector\nnote: use "
       "comma-separated values to add multiple control vectors", hint="FNAME",
       conv=lambda s: [(f, 1.0) for f in _csv(s)]),
    _O("--control-vector-scaled", "list", "control_vectors", "add a control vector with user "
       "defined scaling SCALE\nnote: use comma-separated values (format: FNAME:SCALE,...)",
       hint="FNAME:SCALE,...", conv=lambda s: _scaled(s, "control-vector-scaled")),
    _O("--control-vector-layer-range", "pair", "control_vector_layer_range", "layer range to "
       "apply the control vector(s) to, start and end inclusive", hint="START END",
       conv=lambda a, b: (stoi(a), stoi(b))),
    _O("--rope-scaling", "enum", "rope_scaling_type", "RoPE frequency scaling method, defaults "
       "to linear unless specified by the model", choices=("none", "linear", "yarn"),
       env="LLAMA_ARG_ROPE_SCALING_TYPE"),
    _O("--rope-scale", "float", "rope_freq_scale", "RoPE context scaling factor",
       env="LLAMA_ARG_ROPE_SCALE", conv=_rope_scale),
    _O("--rope-freq-base", "float", "rope_freq_base", "RoPE base frequency (default: loaded "
       "from model)", env="LLAMA_ARG_ROPE_FREQ_BASE"),
    _O("--rope-freq-scale", "float", "rope_freq_scale", "RoPE frequency scaling factor",
       env="LLAMA_ARG_ROPE_FREQ_SCALE"),
    _O("--yarn-orig-ctx", "int", "yarn_orig_ctx", "YaRN: original context size of model "
       "(default: 0 = model training context size)", env="LLAMA_ARG_YARN_ORIG_CTX"),
    _O("--yarn-ext-factor", "float", "yarn_ext_factor", "YaRN: extrapolation mix factor",
       env="LLAMA_ARG_YARN_EXT_FACTOR"),
    _O("--yarn-attn-factor", "float", "yarn_attn_factor", "YaRN: scale sqrt(t) or attention "
       "magnitude", env="LLAMA_ARG_YARN_ATTN_FACTOR"),
    _O("--yarn-beta-slow", "float", "yarn_beta_slow", "YaRN: high correction dim or alpha",
       env="LLAMA_ARG_YARN_BETA_SLOW"),
    _O("--yarn-beta-fast", "float", "yarn_beta_fast", "YaRN: low correction dim or beta",
       env="LLAMA_ARG_YARN_BETA_FAST"),
    # ---- GPU / device ----------------------------------------------------------------------
    _O("-ngl --gpu-layers --n-gpu-layers", "str", "n_gpu_layers", "max. number of layers to "
       "store in VRAM, either an exact number, 'auto', or 'all' (default: auto)", hint="N",
       env="LLAMA_ARG_N_GPU_LAYERS", conv=_ngl),
    _O("-sm --split-mode", "enum", "split_mode", "how to split the model across multiple GPUs",
       choices=("none", "layer", "row", "tensor"), hint="{none,layer,row,tensor}",
       env="LLAMA_ARG_SPLIT_MODE", status=NOOP, note=_GPU_NOTE),
    _O("-ts --tensor-split", "str", "tensor_split", "fraction of the model to offload to each "
       "GPU, comma-separated list of proportions, e.g. 3,1", hint="N0,N1,N2,...",
       env="LLAMA_ARG_TENSOR_SPLIT", status=NOOP, note=_GPU_NOTE),
    _O("-mg --main-gpu", "int", "main_gpu", "the GPU to use for the model (default: 0)",
       hint="INDEX", env="LLAMA_ARG_MAIN_GPU", status=NOOP, note=_GPU_NOTE),
    _O("-dev --device", "str", "devices", "comma-separated list of devices to use for "
       "offloading (none = don't offload)", hint="<dev1,dev2,..>", env="LLAMA_ARG_DEVICE",
       conv=_device),
    _O("--list-devices", "flag", "list_devices", "print list of available devices and exit"),
    _O("-fit --fit", "enum", "fit", "whether to adjust unset arguments to fit in device memory "
       "(default: on)", choices=("on", "off"), hint="[on|off]", env="LLAMA_ARG_FIT",
       status=NOOP, note="nothing is fitted to device memory"),
    _O("-fitt --fit-target", "str", "fit_target", "target margin per device for --fit, in MiB "
       "(default: 1024)", hint="MiB0,MiB1,...", env="LLAMA_ARG_FIT_TARGET", status=NOOP,
       note="nothing is fitted to device memory"),
    _O("-fitc --fit-ctx", "int", "fit_ctx", "minimum ctx size that can be set by --fit "
       "(default: 4096)", env="LLAMA_ARG_FIT_CTX", status=NOOP,
       note="nothing is fitted to device memory"),
    _O("-ot --override-tensor", "list", "tensor_buft_overrides", "override tensor buffer type",
       hint="<tensor name pattern>=<buffer type>,...", env="LLAMA_ARG_OVERRIDE_TENSOR",
       status=NOOP, note=_GPU_NOTE),
    _O("-cmoe --cpu-moe", "flag", "cpu_moe", "keep all Mixture of Experts weights in the CPU",
       env="LLAMA_ARG_CPU_MOE", status=NOOP, note=_GPU_NOTE),
    _O("-ncmoe --n-cpu-moe", "int", "n_cpu_moe", "keep the MoE weights of the first N layers "
       "in the CPU", env="LLAMA_ARG_N_CPU_MOE", status=NOOP, note=_GPU_NOTE),
    _O("-ncffn --n-cpu-ffn", "int", "n_cpu_ffn", "keep the FFN weights of the first N layers "
       "in the CPU", env="LLAMA_ARG_N_CPU_FFN", status=NOOP, note=_GPU_NOTE),
    _O("--op-offload", "bool", "op_offload", "whether to offload host tensor operations to "
       "device (default: true)", neg="--no-op-offload", status=NOOP, note=_GPU_NOTE),
    _O("--rpc", "str", "rpc", "comma separated list of RPC servers", hint="SERVERS",
       env="LLAMA_ARG_RPC", status=UNSUP, note="RPC backends"),
    _O("-bs --backend-sampling", "flag", "backend_sampling", "enable backend sampling "
       "(experimental) (default: disabled)", env="LLAMA_ARG_BACKEND_SAMPLING", status=NOOP,
       note="sampling runs on the host"),
    # ---- logging -----------------------------------------------------------------------------
    _O("--log-disable", "flag", "log_disable", "Log disable"),
    _O("--log-file", "str", "log_file", "Log to file", hint="FNAME", env="LLAMA_ARG_LOG_FILE"),
    _O("--log-colors", "enum", "log_colors", "Set colored logging ('on', 'off', or 'auto', "
       "default: 'auto')", choices=("on", "off", "auto"), hint="[on|off|auto]",
       env="LLAMA_ARG_LOG_COLORS", status=NOOP, note="pyllama logs without colours"),
    _O("--log-jsonl", "bool", "log_jsonl", "print every log line as a JSON object on stdout "
       "(default: false)", neg="--no-log-jsonl", env="LLAMA_ARG_LOG_JSONL", status=UNSUP,
       note="JSON log lines"),
    _O("-v --verbose --log-verbose", "flag", "verbosity", "Set verbosity level to infinity "
       "(i.e. log all messages, useful for debugging)", const=2**31 - 1),
    _O("-lv --verbosity --log-verbosity", "int", "verbosity", "Set the verbosity threshold. "
       "Messages with a higher verbosity will be ignored. Values: 0 - generic output, 1 - error, "
       "2 - warning, 3 - info, 4 - trace, 5 - debug (default: 3)",
       env="LLAMA_ARG_LOG_VERBOSITY"),
    _O("--log-prefix", "bool", "log_prefix", "Enable prefix in log messages", neg="--no-log-prefix",
       env="LLAMA_ARG_LOG_PREFIX"),
    _O("--log-timestamps", "bool", "log_timestamps", "Enable timestamps in log messages",
       neg="--no-log-timestamps", env="LLAMA_ARG_LOG_TIMESTAMPS"),
    _O("--log-prompts-dir", "str", "log_prompts_dir", "dump each prompt to a file in DIR",
       hint="DIR", tools={S, C}, status=UNSUP, note="prompt dumps"),
]

_SP = dict(group="sampling")
OPTIONS += [
    # ---- sampling (common_params_sampling names) -------------------------------------------
    _O("--samplers", "str", "sampling.samplers", "samplers that will be used for generation in "
       "the order, separated by ';'\n(default: penalties;dry;top_n_sigma;top_k;typ_p;top_p;"
       "min_p;xtc;temperature)", hint="SAMPLERS", conv=_samplers, **_SP),
    _O("-s --seed", "uint", "sampling.seed", "RNG seed (default: -1, use random seed for -1)",
       hint="SEED", **_SP),
    _O("--sampler-seq --sampling-seq", "str", "sampling.samplers", "simplified sequence for "
       "samplers that will be used (default: edskypmxt)", hint="SEQUENCE", conv=_sampler_seq,
       **_SP),
    _O("--ignore-eos", "flag", "sampling.ignore_eos", "ignore end of stream token and continue "
       "generating (implies --logit-bias EOS-inf)", **_SP),
    _O("--temp --temperature", "float", "sampling.temp", "temperature (default: 0.80)",
       env="LLAMA_ARG_TEMPERATURE", **_SP),
    _O("--top-k", "int", "sampling.top_k", "top-k sampling (default: 40, 0 = disabled)",
       env="LLAMA_ARG_TOP_K", **_SP),
    _O("--top-p", "float", "sampling.top_p", "top-p sampling (default: 0.95, 1.0 = disabled)",
       env="LLAMA_ARG_TOP_P", **_SP),
    _O("--min-p", "float", "sampling.min_p", "min-p sampling (default: 0.05, 0.0 = disabled)",
       env="LLAMA_ARG_MIN_P", **_SP),
    _O("--top-nsigma --top-n-sigma", "float", "sampling.top_n_sigma", "top-n-sigma sampling "
       "(default: -1.00, -1.0 = disabled)", **_SP),
    _O("--xtc-probability", "float", "sampling.xtc_probability", "xtc probability (default: "
       "0.00, 0.0 = disabled)", **_SP),
    _O("--xtc-threshold", "float", "sampling.xtc_threshold", "xtc threshold (default: 0.10, "
       "1.0 = disabled)", **_SP),
    _O("--typical --typical-p", "float", "sampling.typ_p", "locally typical sampling, parameter "
       "p (default: 1.00, 1.0 = disabled)", **_SP),
    _O("--repeat-last-n", "int", "sampling.penalty_last_n", "last n tokens to consider for "
       "penalize (default: 64, 0 = disabled, -1 = ctx_size)", conv=_repeat_last_n, **_SP),
    _O("--repeat-penalty", "float", "sampling.penalty_repeat", "penalize repeat sequence of "
       "tokens (default: 1.00, 1.0 = disabled)", env="LLAMA_ARG_REPEAT_PENALTY",
       conv=_repeat_penalty, **_SP),
    _O("--presence-penalty", "float", "sampling.penalty_present", "repeat alpha presence "
       "penalty (default: 0.00, 0.0 = disabled)", env="LLAMA_ARG_PRESENCE_PENALTY", **_SP),
    _O("--frequency-penalty", "float", "sampling.penalty_freq", "repeat alpha frequency "
       "penalty (default: 0.00, 0.0 = disabled)", env="LLAMA_ARG_FREQUENCY_PENALTY", **_SP),
    _O("--dry-multiplier", "float", "sampling.dry_multiplier", "set DRY sampling multiplier "
       "(default: 0.00, 0.0 = disabled)", **_SP),
    _O("--dry-base", "float", "sampling.dry_base", "set DRY sampling base value (default: "
       "1.75)", **_SP),
    _O("--dry-allowed-length", "int", "sampling.dry_allowed_length", "set allowed length for "
       "DRY sampling (default: 2)", **_SP),
    _O("--dry-penalty-last-n", "int", "sampling.dry_penalty_last_n", "set DRY penalty for the "
       "last n tokens (default: -1, 0 = disable, -1 = context size)", **_SP),
    _O("--dry-sequence-breaker", "list", "sampling.dry_sequence_breakers", "add sequence "
       "breaker for DRY sampling, clearing out default breakers ('\\n', ':', '\"', '*') in the "
       "process; use \"none\" to not use any sequence breakers", hint="STRING", **_SP),
    _O("--dynatemp-range", "float", "sampling.dynatemp_range", "dynamic temperature range "
       "(default: 0.00, 0.0 = disabled)", **_SP),
    _O("--dynatemp-exp", "float", "sampling.dynatemp_exponent", "dynamic temperature exponent "
       "(default: 1.00)", **_SP),
    _O("--mirostat", "int", "sampling.mirostat", "use Mirostat sampling (default: 0, 0 = "
       "disabled, 1 = Mirostat, 2 = Mirostat 2.0)", **_SP),
    _O("--mirostat-lr", "float", "sampling.mirostat_eta", "Mirostat learning rate, parameter "
       "eta (default: 0.10)", **_SP),
    _O("--mirostat-ent", "float", "sampling.mirostat_tau", "Mirostat target entropy, parameter "
       "tau (default: 5.00)", **_SP),
    _O("--adaptive-target", "float", "sampling.adaptive_target", "adaptive-p target "
       "probability (default: -1.00, disabled)", **_SP),
    _O("--adaptive-decay", "float", "sampling.adaptive_decay", "adaptive-p decay (default: "
       "0.90)", **_SP),
    _O("-l --logit-bias", "list", "sampling.logit_bias", "modifies the likelihood of token "
       "appearing in the completion,\ni.e. `--logit-bias 15043+1` to increase likelihood of "
       "token ' Hello',\nor `--logit-bias 15043-1` to decrease likelihood of token ' Hello'",
       hint="TOKEN_ID(+/-)BIAS", conv=_logit_bias, **_SP),
    _O("--grammar", "str", "sampling.grammar", "BNF-like grammar to constrain generations",
       hint="GRAMMAR", **_SP),
    _O("--grammar-file", "str", "sampling.grammar", "file to read grammar from", hint="FNAME",
       conv=_read_file, **_SP),
    _O("-j --json-schema", "str", "sampling.grammar", "JSON schema to constrain generations",
       hint="SCHEMA", conv=_json_schema, **_SP),
    _O("-jf --json-schema-file", "str", "sampling.grammar", "File containing a JSON schema to "
       "constrain generations", hint="FILE", conv=lambda p: _json_schema(_read_file(p)), **_SP),
]

_SPEC = dict(group="speculative", tools=SCSP)
_SPEC_TYPES = ("none", "draft-simple", "draft-eagle3", "draft-mtp", "draft-dflash", "draft-dspark",
               "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
_SPEC_OK = ("none", "draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod",
            "ngram-cache")
_SPEC_HEADS = {"draft-eagle3": "an EAGLE3", "draft-mtp": "a multi-token-prediction (MTP)",
               "draft-dflash": "a DFlash", "draft-dspark": "a DSpark"}


def _spec_types(s: str) -> list:
    out = []
    for t in s.split(","):
        if t not in _SPEC_TYPES:
            raise ConvertError(f"unknown speculative decoding type: {t}")
        if t in _SPEC_HEADS:
            raise ConvertError(f"speculative decoding type '{t}' needs {_SPEC_HEADS[t]} draft "
                               "head, which no model pyllama loads has")
        if t not in _SPEC_OK:
            raise ConvertError(f"speculative decoding type '{t}' is not supported by pyllama yet")
        out.append(t)
    return out


def _int_in(lo: int, hi: int | None, what: str):
    """An int option with common/arg.cpp's range check and message."""
    def conv(raw: str) -> int:
        v = _NUM["int"](raw)
        if v < lo or (hi is not None and v > hi):
            raise ConvertError(what)
        return v
    return conv


_NG_N = _int_in(1, 1024, "ngram size N must be between 1 and 1024 inclusive")
_NG_M = _int_in(1, 1024, "ngram size M must be between 1 and 1024 inclusive")
_NG_HITS = _int_in(1, None, "ngram min hits must be at least 1")


_DRAFT_NOTE = "draft placement: pyllama uses one device and the OS's thread placement"
OPTIONS += [
    # ---- speculative decoding ----------------------------------------------------------------
    _O("--spec-type", "list", "speculative.types", "comma-separated list of speculative "
       "decoding types: " + ", ".join(_SPEC_TYPES) + " (default: none)", hint="TYPES",
       env="LLAMA_ARG_SPEC_TYPE", conv=_spec_types, **_SPEC),
    _O("-md --model-draft --spec-draft-model", "str", "speculative.model", "draft model for "
       "speculative decoding (default: unused); alone it enables draft-simple",
       hint="FNAME", env="LLAMA_ARG_SPEC_DRAFT_MODEL", **_SPEC),
    _O("--spec-draft-n-max", "int", "speculative.n_max", "number of tokens to draft for "
       "speculative decoding (default: 3)", env="LLAMA_ARG_SPEC_DRAFT_N_MAX", group="speculative", tools=SCSP | {LK}),
    _O("--spec-draft-n-min", "int", "speculative.n_min", "minimum number of draft tokens to use "
       "for speculative decoding (default: 0)", env="LLAMA_ARG_SPEC_DRAFT_N_MIN", group="speculative", tools=SCSP | {LK}),
    _O("--spec-policy", "enum", "speculative.policy", "draft length: 'cost' (cost-aware: only as "
       "many tokens as pay for their verification, from the acceptance seen so far) or 'fixed' "
       "(llama.cpp's: as many as the drafter proposes, up to the limits)\n(default: cost)",
       choices=("cost", "fixed"), hint="POLICY", env="LLAMA_ARG_SPEC_POLICY", **_SPEC),
    _O("--spec-draft-p-min --draft-p-min", "float", "speculative.p_min", "minimum speculative "
       "decoding probability (greedy) (default: 0.00)", hint="P",
       env="LLAMA_ARG_SPEC_DRAFT_P_MIN", **_SPEC),
    _O("--spec-draft-p-split --draft-p-split", "float", "speculative.p_split", "speculative "
       "decoding split probability (default: 0.10)", hint="P",
       env="LLAMA_ARG_SPEC_DRAFT_P_SPLIT", group="speculative", tools=SCSP, status=NOOP,
       note="pyllama drafts a single branch"),
    _O("-ngld --gpu-layers-draft --n-gpu-layers-draft --spec-draft-ngl", "str",
       "speculative.n_gpu_layers", "number of layers to store in VRAM for the draft model "
       "(default: auto)", hint="N", env="LLAMA_ARG_N_GPU_LAYERS_DRAFT", conv=_ngl, status=NOOP,
       note="the draft model runs on the target's backend", **_SPEC),
    _O("-ctkd --cache-type-k-draft --spec-draft-type-k", "str", "speculative.cache_type_k",
       "KV cache data type for K for the draft model (default: f16)", hint="TYPE",
       env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_K", conv=_kv_type, group="speculative"),
    _O("-ctvd --cache-type-v-draft --spec-draft-type-v", "str", "speculative.cache_type_v",
       "KV cache data type for V for the draft model (default: f16)", hint="TYPE",
       env="LLAMA_ARG_SPEC_DRAFT_CACHE_TYPE_V", conv=_kv_type, group="speculative"),
    _O("-td --threads-draft --spec-draft-threads", "int", "speculative.n_threads", "number of "
       "threads to use during generation for the draft (default: same as --threads)",
       status=NOOP, note="the draft model uses the -t thread count", **_SPEC),
    _O("-tbd --threads-batch-draft --spec-draft-threads-batch", "int",
       "speculative.n_threads_batch", "number of threads to use during batch and prompt "
       "processing for the draft", status=NOOP, note="the draft model uses the -t thread count",
       **_SPEC),
    _O("-devd --device-draft --spec-draft-device", "str", "speculative.devices", "devices for "
       "the draft model", hint="<dev1,dev2,..>", status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("-otd --override-tensor-draft --spec-draft-override-tensor", "list",
       "speculative.tensor_buft_overrides", "override tensor buffer type for draft model",
       hint="<tensor name pattern>=<buffer type>,...", status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("-cmoed --cpu-moe-draft --spec-draft-cpu-moe", "flag", "speculative.cpu_moe", "keep all "
       "MoE weights of the draft model in the CPU", env="LLAMA_ARG_SPEC_DRAFT_CPU_MOE",
       status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("-ncmoed --n-cpu-moe-draft --spec-draft-n-cpu-moe --spec-draft-ncmoe", "int", "speculative.n_cpu_moe",
       "keep the MoE weights of the first N draft layers in the CPU",
       env="LLAMA_ARG_SPEC_DRAFT_N_CPU_MOE", status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("-Cd --spec-draft-cpu-mask --cpu-mask-draft", "str", "speculative.cpu_mask", "draft CPU affinity mask",
       hint="M", status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("-Crd --spec-draft-cpu-range --cpu-range-draft", "str", "speculative.cpu_range", "draft CPU range",
       hint="lo-hi", status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("--spec-draft-cpu-strict --cpu-strict-draft", "int", "speculative.cpu_strict", "draft strict CPU placement",
       hint="<0|1>", status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("--spec-draft-prio --prio-draft", "int", "speculative.prio", "draft thread priority", hint="N",
       status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("--spec-draft-poll --poll-draft", "int", "speculative.poll", "draft polling level", hint="<0..100>",
       status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("--spec-draft-backend-sampling", "bool", "speculative.backend_sampling", "draft "
       "backend sampling (default: true)", neg="--no-spec-draft-backend-sampling",
       env="LLAMA_ARG_SPEC_DRAFT_BACKEND_SAMPLING", status=NOOP,
       note="sampling runs on the host", **_SPEC),
    _O("-hfd -hfrd --hf-repo-draft --spec-draft-hf", "str", "speculative.hf_repo", "Hugging "
       "Face draft model repository", hint="<user>/<model>[:quant]",
       env="LLAMA_ARG_SPEC_DRAFT_HF_REPO", status=UNSUP, note="downloads", **_SPEC),
    _O("--spec-ngram-mod-n-match", "int", "speculative.ngram_mod_n_match", "ngram-mod lookup "
       "length (default: 24)", conv=_int_in(1, 1024, "ngram size N must be between 1 and 1024 "
                                            "inclusive"), **_SPEC),
    _O("--spec-ngram-mod-n-min", "int", "speculative.ngram_mod_n_min", "minimum number of ngram "
       "tokens to use for ngram-based speculative decoding (default: 48)",
       conv=_int_in(0, 1024, "ngram n-min must be between 0 and 1024 inclusive"), **_SPEC),
    _O("--spec-ngram-mod-n-max", "int", "speculative.ngram_mod_n_max", "maximum number of ngram "
       "tokens to use for ngram-based speculative decoding (default: 64)",
       conv=_int_in(0, 1024, "ngram n-max must be between 0 and 1024 inclusive"), **_SPEC),
    _O("--spec-ngram-simple-size-n", "int", "speculative.ngram_simple_size_n", "ngram-simple: "
       "n-gram size to look up (default: 12)", conv=_NG_N, **_SPEC),
    _O("--spec-ngram-simple-size-m", "int", "speculative.ngram_simple_size_m", "ngram-simple: "
       "draft length (default: 48)", conv=_NG_M, **_SPEC),
    _O("--spec-ngram-simple-min-hits", "int", "speculative.ngram_simple_min_hits",
       "ngram-simple: minimum earlier occurrences of the matched n-gram (default: 1)",
       conv=_NG_HITS, **_SPEC),
    _O("--spec-ngram-map-k-size-n", "int", "speculative.ngram_map_k_size_n", "ngram size N for "
       "ngram-map-k speculative decoding, length of lookup n-gram (default: 12)", conv=_NG_N,
       **_SPEC),
    _O("--spec-ngram-map-k-size-m", "int", "speculative.ngram_map_k_size_m", "ngram size M for "
       "ngram-map-k speculative decoding, length of draft m-gram (default: 48)", conv=_NG_M,
       **_SPEC),
    _O("--spec-ngram-map-k-min-hits", "int", "speculative.ngram_map_k_min_hits", "minimum hits "
       "for ngram-map-k speculative decoding (default: 1)", conv=_NG_HITS, **_SPEC),
    _O("--spec-ngram-map-k4v-size-n", "int", "speculative.ngram_map_k4v_size_n", "ngram size N "
       "for ngram-map-k4v speculative decoding, length of lookup n-gram (default: 12)",
       conv=_NG_N, **_SPEC),
    _O("--spec-ngram-map-k4v-size-m", "int", "speculative.ngram_map_k4v_size_m", "ngram size M "
       "for ngram-map-k4v speculative decoding, length of draft m-gram (default: 48)",
       conv=_NG_M, **_SPEC),
    _O("--spec-ngram-map-k4v-min-hits", "int", "speculative.ngram_map_k4v_min_hits", "minimum "
       "hits for ngram-map-k4v speculative decoding (default: 1)", conv=_NG_HITS, **_SPEC),
    _O("--spec-synth-len", "float", "speculative.synth_len", "synthetic acceptance length for "
       "benchmarking", env="LLAMA_ARG_SPEC_SYNTH_LEN", status=UNSUP,
       note="synthetic acceptance", group="speculative", tools={S, C}),
    _O("--spec-synth-rates", "str", "speculative.synth_rates", "synthetic acceptance rates",
       env="LLAMA_ARG_SPEC_SYNTH_RATES", status=UNSUP, note="synthetic acceptance",
       group="speculative", tools={S, C}),
    _O("--spec-default", "flag", "speculative.spec_default", "enable default speculative "
       "decoding config (adds ngram-mod with n_match 24, n_min 48, n_max 64)",
       group="speculative", tools={S, C}),
    _O("-lcs --lookup-cache-static", "str", "speculative.lookup_cache_static", "path to static "
       "lookup cache to use for lookup decoding (not updated by generation)", hint="FNAME",
       group="speculative", tools={S, SP, LK}),
    _O("-lcd --lookup-cache-dynamic", "str", "speculative.lookup_cache_dynamic", "path to dynamic "
       "lookup cache to use for lookup decoding (updated by generation)", hint="FNAME",
       group="speculative", tools={S, SP, LK}),
    # ---- old spellings llama.cpp removed (1.10): accepted with a note -------------------------
    _O("--draft-max --draft --draft-n", "int", "speculative.n_max", "old spelling of "
       "--spec-draft-n-max", old_env=("LLAMA_ARG_DRAFT_MAX",), status=DEPR,
       note="use --spec-draft-n-max", group="speculative", tools=SCSP | {LK}),
    _O("--draft-min --draft-n-min", "int", "speculative.n_min", "old spelling of "
       "--spec-draft-n-min", old_env=("LLAMA_ARG_DRAFT_MIN",), status=DEPR,
       note="use --spec-draft-n-min", group="speculative", tools=SCSP | {LK}),
    _O("-cd --ctx-size-draft", "int", "ctx_size_draft", "old: draft context size (the draft "
       "context now equals the target's)", old_env=("LLAMA_ARG_CTX_SIZE_DRAFT",), status=DEPR,
       note="ignored: the draft context size equals the target's", **_SPEC),
    _O("--no-mmap", "flag", "load_mode", "old spelling of --load-mode none", const="none",
       old_env=("LLAMA_ARG_NO_MMAP",), status=DEPR,
       note="use --load-mode none (pyllama always memory-maps; no effect)"),
    _O("--mmap", "flag", "load_mode", "old spelling of --load-mode mmap", const="mmap",
       old_env=("LLAMA_ARG_MMAP",), status=DEPR, note="use --load-mode mmap (no effect)"),
    _O("--mlock", "flag", "load_mode", "old spelling of --load-mode mmap+mlock",
       const="mmap+mlock", old_env=("LLAMA_ARG_MLOCK",), status=DEPR,
       note="use --load-mode mmap+mlock (no effect)"),
]

_EX = dict(group="example")
OPTIONS += [
    # ---- llama-completion / llama-cli ----------------------------------------------------------
    _O("-cnv --conversation", "bool", "conversation", "run in conversation mode (default: "
       "auto enabled if chat template is available)", neg="-no-cnv --no-conversation",
       tools={CO}, **_EX),
    _O("-i --interactive", "flag", "interactive", "run in interactive mode", tools={CO}, **_EX),
    _O("-if --interactive-first", "flag", "interactive_first", "run in interactive mode and "
       "wait for input right away", tools={CO}, **_EX),
    _O("-st --single-turn", "flag", "single_turn", "run conversation for a single turn only, "
       "then exit when done", tools={C, CO}, **_EX),
    _O("-mli --multiline-input", "flag", "multiline_input", "allows you to write or paste "
       "multiple lines without ending each in '\\'", tools={C, CO}, **_EX),
    _O("--in-prefix-bos", "flag", "input_prefix_bos", "prefix BOS to user inputs, preceding the "
       "`--in-prefix` string", tools={CO}, **_EX),
    _O("--in-prefix", "str", "input_prefix", "string to prefix user inputs with (default: empty)",
       tools={CO}, **_EX),
    _O("--in-suffix", "str", "input_suffix", "string to suffix after user inputs with (default: "
       "empty)", tools={CO}, **_EX),
    _O("-ptc --print-token-count", "int", "n_print", "print token count every N tokens "
       "(default: -1)", tools={CO}, **_EX, status=UNSUP, note="token count printing"),
    _O("--prompt-cache", "str", "path_prompt_cache", "file to cache prompt state for faster "
       "startup (default: none)", hint="FNAME", tools={CO},
       **_EX),
    _O("--prompt-cache-all", "flag", "prompt_cache_all", "if specified, saves user input and "
       "generations to cache as well", tools={CO}, **_EX),
    _O("--prompt-cache-ro", "flag", "prompt_cache_ro", "if specified, uses the prompt cache but "
       "does not update it", tools={CO}, **_EX),
    _O("-gan --grp-attn-n", "int", "grp_attn_n", "group-attention factor (default: 1)",
       env="LLAMA_ARG_GRP_ATTN_N", tools={CO}, status=UNSUP, note="self-extend", **_EX),
    _O("-gaw --grp-attn-w", "int", "grp_attn_w", "group-attention width (default: 512)",
       env="LLAMA_ARG_GRP_ATTN_W", tools={CO}, status=UNSUP, note="self-extend", **_EX),
    _O("--simple-io", "flag", "simple_io", "use basic IO for better compatibility in "
       "subprocesses and limited consoles", tools={C, CO}, **_EX, status=NOOP, note="pyllama always uses plain stdin/stdout"),
    _O("--show-timings", "bool", "show_timings", "whether to show timing information after each "
       "response (default: true)", neg="--no-show-timings", env="LLAMA_ARG_SHOW_TIMINGS",
       tools={C}, **_EX),
    _O("--server-base", "str", "server_base", "use an existing llama-server at URL",
       hint="URL", tools={C}, status=UNSUP, note="a remote server", **_EX),
    _O("--jinja", "bool", "use_jinja", "use jinja template for chat (default: enabled)",
       neg="--no-jinja", env="LLAMA_ARG_JINJA", tools=SCCO, **_EX),
    _O("--chat-template", "str", "chat_template", "set custom jinja chat template (default: "
       "template taken from model's metadata)", hint="JINJA_TEMPLATE",
       env="LLAMA_ARG_CHAT_TEMPLATE", tools=SCCO, **_EX),
    _O("--chat-template-file", "str", "chat_template", "set custom jinja chat template file",
       hint="JINJA_TEMPLATE_FILE", env="LLAMA_ARG_CHAT_TEMPLATE_FILE", tools=SCCO,
       conv=_read_file, **_EX),
    _O("--chat-template-kwargs", "str", "chat_template_kwargs", "sets additional params for the "
       "json template parser, must be a valid json object string", hint="STRING",
       env="LLAMA_ARG_CHAT_TEMPLATE_KWARGS", tools={S, C}, **_EX),
    _O("--reasoning-format", "enum", "reasoning_format", "controls whether thought tags are "
       "allowed and/or extracted from the response (default: auto)",
       choices=("none", "deepseek", "deepseek-legacy", "auto"), hint="FORMAT",
       env="LLAMA_ARG_THINK", tools=SCCO, **_EX),
    _O("-rea --reasoning", "enum", "reasoning", "use reasoning/thinking in the chat ('on', "
       "'off', or 'auto', default: 'auto')", choices=("on", "off", "auto"), hint="[on|off|auto]",
       env="LLAMA_ARG_REASONING", tools=SCCO, **_EX),
    _O("--reasoning-budget", "int", "reasoning_budget", "controls the amount of thinking "
       "allowed; -1 = unrestricted, 0 = disable thinking (default: -1)",
       env="LLAMA_ARG_THINK_BUDGET", tools=SCCO, **_EX),
    # ---- llama-server ------------------------------------------------------------------------
    _O("--host", "str", "hostname", "IP addresses to listen on, comma-separated, or UNIX socket "
       "paths ending in .sock; with multiple TCP addresses, :: binds IPv6 only (default: "
       "127.0.0.1)", hint="HOST", env="LLAMA_ARG_HOST", tools={S}, conv=_hosts, **_EX),
    _O("--port", "int", "port", "port to listen (default: 8080)", hint="PORT",
       env="LLAMA_ARG_PORT", tools={S}, **_EX),
    _O("--reuse-port", "flag", "reuse_port", "allow multiple sockets to bind to the same port",
       env="LLAMA_ARG_REUSE_PORT", tools={S}, **_EX),
    _O("--api-key", "str", "api_keys", "API key to use for authentication, multiple keys can be "
       "provided as a comma-separated list (default: none)", hint="KEY", env="LLAMA_API_KEY",
       tools={S}, conv=lambda s: [k for k in s.split(",") if k], **_EX),
    _O("--api-key-file", "str", "api_key_file", "path to file containing API keys (default: "
       "none)", hint="FNAME", env="LLAMA_ARG_API_KEY_FILE", tools={S}, **_EX),
    _O("-to --timeout", "int", "timeout", "server read/write timeout in seconds (default: 3600)",
       env="LLAMA_ARG_TIMEOUT", tools={S}, **_EX),
    _O("--max-body-size", "int", "max_body_size", "pyllama extension: largest request body in "
       "bytes; a larger one gets 413 (default: 33554432 = 32 MiB, 0 = no limit)",
       env="LLAMA_ARG_MAX_BODY_SIZE", tools={S}, **_EX),
    _O("--drain-timeout", "int", "drain_timeout", "pyllama extension: on SIGTERM/SIGINT, seconds "
       "requests in flight may run on while new ones get 503; those still running then end "
       "with an error (default: 10, 0 = end them at once)", hint="N",
       env="LLAMA_ARG_DRAIN_TIMEOUT", tools={S}, **_EX),
    _O("--threads-http", "int", "n_threads_http", "number of threads used to process HTTP "
       "requests (default: -1)", env="LLAMA_ARG_THREADS_HTTP", tools={S}, status=NOOP,
       note="requests are served by one asyncio loop", **_EX),
    _O("--sse-ping-interval", "int", "sse_ping_interval", "seconds between SSE pings while a "
       "stream is silent (default: 30, -1 = off)", env="LLAMA_ARG_SSE_PING_INTERVAL",
       tools={S}, **_EX),
    _O("-a --alias", "str", "alias", "set alias for model name (to be used by REST API)",
       hint="STRING", env="LLAMA_ARG_ALIAS", tools={S}, **_EX),
    _O("--tags", "str", "tags", "set informational tags for the model", hint="STRING",
       env="LLAMA_ARG_TAGS", tools={S}, **_EX),
    _O("-cb --cont-batching", "bool", "cont_batching", "enable continuous batching (default: "
       "enabled)", neg="-nocb --no-cont-batching", env="LLAMA_ARG_CONT_BATCHING", tools={S},
       **_EX, status=NOOP, note="pyllama always batches continuously"),
    _O("--cache-prompt", "bool", "cache_prompt", "whether to enable prompt caching (default: "
       "enabled)", neg="--no-cache-prompt", env="LLAMA_ARG_CACHE_PROMPT", tools={S}, **_EX),
    _O("--cache-reuse", "int", "n_cache_reuse", "min chunk size to attempt reusing from the "
       "cache via KV shifting, requires prompt caching to be enabled (default: 0)",
       env="LLAMA_ARG_CACHE_REUSE", tools={S}, **_EX),
    _O("-ctxcp --ctx-checkpoints --swa-checkpoints", "int", "n_ctx_checkpoints", "max number "
       "of context checkpoints per slot (default: 32)", env="LLAMA_ARG_CTX_CHECKPOINTS",
       tools={S, C}, **_EX),
    _O("-cms --checkpoint-min-step", "int", "checkpoint_min_step", "minimum tokens between "
       "checkpoints (default: 8192)", env="LLAMA_ARG_CHECKPOINT_MIN_SPACING_NT", tools={S},
       **_EX),
    _O("-cram --cache-ram", "int", "cache_ram_mib", "maximum cache size in MiB (default: 8192, "
       "-1 - no limit, 0 - disable)", env="LLAMA_ARG_CACHE_RAM", tools={S}, **_EX),
    _O("-cram --cache-ram", "int", "cache_ram_mib", "maximum cache size in MiB (default: 8192)",
       env="LLAMA_ARG_CACHE_RAM", tools={C}, status=NOOP,
       note="llama-cli runs without a server prompt cache: one conversation keeps its own KV",
       **_EX),
    _O("--cache-idle-slots", "bool", "cache_idle_slots", "save idle slots to the prompt cache and "
       "clear them (unified KV) when a new task starts (default: enabled; needs --cache-ram)",
       neg="--no-cache-idle-slots", env="LLAMA_ARG_CACHE_IDLE_SLOTS", tools={S}, **_EX),
    _O("-sps --slot-prompt-similarity", "float", "slot_prompt_similarity", "how much the "
       "prompt of a request must match the prompt of a slot in order to use that slot "
       "(default: 0.10)", hint="SIMILARITY", tools={S}, **_EX),
    _O("--metrics", "flag", "endpoint_metrics", "enable prometheus compatible metrics endpoint "
       "(default: disabled)", env="LLAMA_ARG_ENDPOINT_METRICS", tools={S}, **_EX),
    _O("--slots", "bool", "endpoint_slots", "expose slots monitoring endpoint (default: "
       "enabled)", neg="--no-slots", env="LLAMA_ARG_ENDPOINT_SLOTS", tools={S}, **_EX),
    _O("--props", "flag", "endpoint_props", "enable changing global properties via POST /props "
       "(default: disabled)", env="LLAMA_ARG_ENDPOINT_PROPS", tools={S}, **_EX),
    _O("--slot-save-path", "str", "slot_save_path", "path to save slot kv cache (default: "
       "disabled)", hint="PATH", tools={S}, **_EX),
    _O("--api-prefix", "str", "api_prefix", "prefix path the server serves from, without the "
       "trailing slash (default: )", hint="PREFIX", env="LLAMA_ARG_API_PREFIX", tools={S}, **_EX),
    _O("--ui --webui", "bool", "webui", "whether to enable the Web UI (default: enabled)",
       neg="--no-ui --no-webui", env="LLAMA_ARG_UI", old_env=("LLAMA_ARG_WEBUI",), tools={S},
       **_EX),
    _O("--path", "str", "public_path", "path to serve static files from (default: )",
       hint="PATH", env="LLAMA_ARG_STATIC_PATH", tools={S}, **_EX),
    _O("--ssl-key-file", "str", "ssl_file_key", "PEM-encoded SSL private key", hint="FNAME",
       env="LLAMA_ARG_SSL_KEY_FILE", tools={S}, **_EX),
    _O("--ssl-cert-file", "str", "ssl_file_cert", "PEM-encoded SSL certificate", hint="FNAME",
       env="LLAMA_ARG_SSL_CERT_FILE", tools={S}, **_EX),
    _O("--embedding --embeddings", "flag", "embedding", "restrict to only support embedding use "
       "case; use only with dedicated embedding models (default: disabled)",
       env="LLAMA_ARG_EMBEDDINGS", tools={S}, **_EX),
    _O("--rerank --reranking", "flag", "reranking", "enable reranking endpoint on server "
       "(default: disabled)", env="LLAMA_ARG_RERANKING", tools={S}, **_EX),
    _O("--pooling", "enum", "pooling", "pooling type for embeddings, use model default if "
       "unspecified", choices=("none", "mean", "cls", "last", "rank"), env="LLAMA_ARG_POOLING",
       tools={S, E}, **_EX),
    _O("--embd-normalize", "int", "embd_normalize", "normalisation for embeddings (default: 2) "
       "(-1=none, 0=max absolute int16, 1=taxicab, 2=euclidean, >2=p-norm)", tools={S, E},
       **_EX),
    _O("--embd-output-format", "str", "embd_out", "empty = default, \"array\" = [[],[]...], "
       "\"json\" = openai style, \"json+\" = same \"json\" + cosine similarity matrix, \"raw\" "
       "= plain whitespace-delimited output (one embedding per line)", hint="FORMAT",
       tools={E}, **_EX),
    _O("--embd-separator", "str", "embd_sep", "separator of embeddings (default \\n) for "
       "example \"<#sep#>\"", tools={E}, **_EX),
    _O("--cls-separator", "str", "cls_sep", "separator of classification sequences (default "
       "\\t) for example \"<#seq#>\"", tools={E}, **_EX),
    _O("--spm-infill", "flag", "spm_infill", "use Suffix/Prefix/Middle pattern for infill "
       "(instead of Prefix/Suffix/Middle) as some models prefer this. (default: disabled)",
       tools={S}, **_EX),
    _O("--sleep-idle-seconds", "int", "sleep_idle_seconds", "number of seconds of idleness "
       "after which the server will sleep (default: -1; -1 = disabled)", hint="SECONDS",
       tools={S}, **_EX),
    _O("--models-dir", "str", "models_dir", "directory of models for router mode", hint="PATH",
       env="LLAMA_ARG_MODELS_DIR", tools={S}, **_EX),
    # ---- llama-perplexity --------------------------------------------------------------------
    _O("--ppl-stride", "int", "ppl_stride", "stride for perplexity calculation (default: 0)",
       tools={P}, **_EX),
    _O("--ppl-output-type", "int", "ppl_output_type", "output type for perplexity calculation "
       "(default: 0)", hint="<0|1>", tools={P}, **_EX),
    _O("--chunks", "int", "n_chunks", "max number of chunks to process (default: -1, -1 = all)",
       tools={P}, **_EX),
    _O("--kl-divergence-base --save-all-logits", "str", "logits_file", "set logits file",
       hint="FNAME", tools={P}, **_EX),
    _O("--kl-divergence", "flag", "kl_divergence", "computes KL-divergence to logits provided "
       "via --kl-divergence-base", tools={P}, **_EX),
    _O("--hellaswag", "flag", "hellaswag", "compute HellaSwag score over random tasks from "
       "datafile supplied with -f", tools={P}, **_EX),
    _O("--hellaswag-tasks", "int", "hellaswag_tasks", "number of tasks to use when computing "
       "the HellaSwag score (default: 400)", tools={P}, **_EX),
    _O("--winogrande", "flag", "winogrande", "compute Winogrande score over random tasks from "
       "datafile supplied with -f", tools={P}, **_EX),
    _O("--winogrande-tasks", "int", "winogrande_tasks", "number of tasks to use when computing "
       "the Winogrande score (default: 0)", tools={P}, **_EX),
    _O("--multiple-choice", "flag", "multiple_choice", "compute multiple choice score over "
       "random tasks from datafile supplied with -f", tools={P}, **_EX),
    _O("--multiple-choice-tasks", "int", "multiple_choice_tasks", "number of tasks to use when "
       "computing the multiple choice score (default: 0)", tools={P}, **_EX),
    # ---- llama-tokenize ----------------------------------------------------------------------
    _O("--ids", "flag", "ids_only", "if given, only print numerical token IDs, and not token "
       "strings", tools={T}, **_EX),
    _O("--stdin", "flag", "use_stdin", "read prompt from standard input", tools={T}, **_EX),
    _O("--no-bos", "flag", "no_bos", "do not ever add a BOS token to the prompt, even if "
       "normally the model uses a BOS token", tools={T}, **_EX),
    _O("--no-parse-special", "flag", "parse_special", "do not parse control tokens", const=False,
       tools={T}, **_EX),
    _O("--show-count", "flag", "show_count", "print the total number of tokens", tools={T},
       **_EX),
]


# ---- flags of llama.cpp 0c1e570 found by tests/data/llamacpp_flags.json (the snapshot of its
# common/arg.cpp, scripts/extract_llamacpp_flags.py) -----------------------------------------------
_MTMD = "multimodal projectors (pyllama serves text models)"
_DL = "downloads: pass a local GGUF with -m"
_TOOLS_NOTE = "built-in agent tools and MCP servers"
_REASON = "reasoning is not extracted: content is returned as generated"
_MTMD_TOOLS = {S, C}
OPTIONS += [
    _O("-mm --mmproj", "str", "mmproj", "path to a multimodal projector file", hint="FILE",
       env="LLAMA_ARG_MMPROJ", tools=_MTMD_TOOLS, status=UNSUP, note=_MTMD),
    _O("-mmu --mmproj-url", "str", "mmproj_url", "URL to a multimodal projector file",
       hint="URL", env="LLAMA_ARG_MMPROJ_URL", tools=_MTMD_TOOLS, status=UNSUP, note=_MTMD),
    _O("--mmproj-auto", "bool", "mmproj_auto", "whether to use multimodal projector file (if "
       "available), useful when using -hf (default: enabled)", neg="--no-mmproj --no-mmproj-auto",
       env="LLAMA_ARG_MMPROJ_AUTO", tools=_MTMD_TOOLS, status=NOOP,
       note="no projector is looked up: pyllama never downloads (-hf)"),
    _O("--mmproj-offload", "bool", "mmproj_offload", "whether to enable GPU offloading for "
       "multimodal projector (default: enabled)", neg="--no-mmproj-offload",
       env="LLAMA_ARG_MMPROJ_OFFLOAD", tools=_MTMD_TOOLS, status=NOOP,
       note="no multimodal projector is loaded"),
    _O("-mmdev --mmproj-device", "str", "mmproj_device", "device for the multimodal "
       "projector", hint="<dev>", env="MTMD_BACKEND_DEVICE", tools=_MTMD_TOOLS, status=UNSUP,
       note=_MTMD),
    _O("--image-min-tokens", "int", "image_min_tokens", "minimum number of tokens each image "
       "can take", env="LLAMA_ARG_IMAGE_MIN_TOKENS", tools=_MTMD_TOOLS, status=UNSUP,
       note=_MTMD),
    _O("--image-max-tokens", "int", "image_max_tokens", "maximum number of tokens each image "
       "can take", env="LLAMA_ARG_IMAGE_MAX_TOKENS", tools=_MTMD_TOOLS, status=UNSUP,
       note=_MTMD),
    _O("--mtmd-batch-max-tokens", "int", "mtmd_batch_max_tokens", "maximum number of image "
       "tokens per batch when encoding images", env="LLAMA_ARG_MTMD_BATCH_MAX_TOKENS",
       tools={S}, status=UNSUP, note=_MTMD),
    _O("--video-fps", "float", "video_fps", "frames per second sampled from a video",
       env="LLAMA_ARG_VIDEO_FPS", tools=_MTMD_TOOLS, status=UNSUP, note=_MTMD),
    _O("--video-timestamp-interval", "float", "video_timestamp_interval", "seconds between "
       "video timestamps", env="LLAMA_ARG_VIDEO_TIMESTAMP_INTERVAL", tools=_MTMD_TOOLS,
       status=UNSUP, note=_MTMD),
    _O("--video-ffmpeg-dir", "str", "video_ffmpeg_dir", "directory of the ffmpeg executable",
       hint="PATH", env="LLAMA_ARG_VIDEO_FFMPEG_DIR", tools=_MTMD_TOOLS, status=UNSUP,
       note=_MTMD),
    _O("--image --audio --video", "list", "image", "path to an image, audio, or video file",
       hint="FILE", tools={C}, status=UNSUP, note=_MTMD, **_EX),
    _O("-o --output --output-file", "str", "out_file", "output file (conversation transcript)",
       hint="FNAME", tools={C}, status=UNSUP, note="conversation transcript files", **_EX),
    _O("-dr --docker-repo", "str", "docker_repo", "Docker Hub model repository",
       hint="[<repo>/]<model>[:quant]", env="LLAMA_ARG_DOCKER_REPO", status=UNSUP, note=_DL),
    _O("--cors-origins", "str", "cors_origins", "comma-separated list of allowed origins for CORS "
       "(default: *)\nif set to special value 'localhost', reflect the Origin header only "
       "if it is localhost", hint="ORIGINS", env="LLAMA_ARG_CORS_ORIGINS", tools={S}, **_EX),
    _O("--cors-methods", "str", "cors_methods", "comma-separated list of allowed methods for "
       "CORS (default: GET, POST, DELETE, OPTIONS)", hint="METHODS",
       env="LLAMA_ARG_CORS_METHODS", tools={S}, **_EX),
    _O("--cors-headers", "str", "cors_headers", "comma-separated list of allowed headers for "
       "CORS (default: *)", hint="HEADERS", env="LLAMA_ARG_CORS_HEADERS", tools={S}, **_EX),
    _O("--cors-credentials", "bool", "cors_credentials", "whether to allow credentials for CORS "
       "(default: enabled)", neg="--no-cors-credentials", env="LLAMA_ARG_CORS_CREDENTIALS",
       tools={S}, **_EX),
    _O("--ui-config --webui-config", "str", "ui_config_json", "JSON that provides default UI "
       "settings (overrides UI defaults)", hint="JSON", env="LLAMA_ARG_UI_CONFIG", tools={S},
       **_EX),
    _O("--ui-config-file --webui-config-file", "str", "ui_config_json", "JSON file that "
       "provides default UI settings (overrides UI defaults)", hint="PATH",
       env="LLAMA_ARG_UI_CONFIG_FILE", tools={S}, conv=_read_file, **_EX),
    _O("--ui-mcp-proxy --webui-mcp-proxy", "bool", "ui_mcp_proxy", "experimental: whether to "
       "enable MCP CORS proxy - do not enable in untrusted environments (default: disabled)",
       neg="--no-ui-mcp-proxy --no-webui-mcp-proxy", env="LLAMA_ARG_UI_MCP_PROXY", tools={S},
       **_EX),
    _O("--tools", "str", "server_tools", "experimental: whether to enable built-in tools for AI "
       "agents - do not enable in untrusted environments (default: no tools)\nspecify \"all\" to "
       "enable all tools\navailable tools: read_file, file_glob_search, grep_search, "
       "exec_shell_command, write_file, edit_file, get_info\nnote: for security reasons, this "
       "will limit --cors-origins to localhost by default", hint="TOOL1,TOOL2,...",
       env="LLAMA_ARG_TOOLS", tools={S}, **_EX),
    _O("--tools-runtime", "str", "server_tools_runtime", "experimental: run tools in a separate "
       "runtime environment (default: none, use host environment): 'docker:<image>', "
       "'podman:<image>', 'docker-container:<id>', 'podman-container:<id>', 'ssh:<target>'",
       hint="OPTION", env="LLAMA_ARG_TOOLS_RUNTIME", tools={S}, **_EX),
    _O("--mcp-servers-config", "str", "mcp_servers_config", "experimental: path to JSON file "
       "with MCP server definitions (Cursor-compatible format) - do not enable in untrusted "
       "environments (default: none)\nnote: for security reasons, this will limit "
       "--cors-origins to localhost by default", hint="PATH",
       env="LLAMA_ARG_MCP_SERVERS_CONFIG", tools={S}, **_EX),
    _O("--mcp-servers-json", "str", "mcp_servers_json", "experimental: inline JSON with MCP "
       "server definitions (Cursor-compatible format) - do not enable in untrusted environments "
       "(default: none)\nnote: for security reasons, this will limit --cors-origins to "
       "localhost by default", hint="JSON", env="LLAMA_ARG_MCP_SERVERS_JSON", tools={S}, **_EX),
    _O("-ag --agent", "bool", "agent", "whether to enable CORS proxy and all built-in tools - do "
       "not enable in untrusted environments (default: disabled)\nnote: for security reasons, "
       "this will limit --cors-origins to localhost by default", neg="-no-ag --no-agent",
       env="LLAMA_ARG_AGENT", tools={S}, **_EX),
    _O("--media-path", "str", "media_path", "directory for loading local media files (default: "
       "disabled)", hint="PATH", tools={S}, status=UNSUP, note=_MTMD, **_EX),
    _O("--models-preset", "str", "models_preset", "path to INI file containing model presets "
       "for the router server (default: disabled)", hint="PATH", env="LLAMA_ARG_MODELS_PRESET",
       tools={S}, **_EX),
    _O("--models-max", "int", "models_max", "for router server, maximum number of models to load "
       "simultaneously (default: 4, 0 = unlimited)", env="LLAMA_ARG_MODELS_MAX", tools={S},
       **_EX),
    _O("--models-autoload", "bool", "models_autoload", "for router server, whether to "
       "automatically load models (default: enabled)", neg="--no-models-autoload",
       env="LLAMA_ARG_MODELS_AUTOLOAD", tools={S}, **_EX),
    _O("--reasoning-effort", "str", "reasoning_effort", "reasoning effort level given to the chat "
       "template: 'default' to keep the template default, or a level such as 'minimal', 'low', "
       "'medium', 'high', 'xhigh' or 'max' (default: default)", hint="LEVEL",
       env="LLAMA_ARG_REASONING_EFFORT", tools=SCCO, **_EX),
    _O("--reasoning-budget-message", "str", "reasoning_budget_message", "message injected "
       "before the end-of-thinking tag when reasoning budget is exhausted (default: none)",
       hint="MESSAGE", env="LLAMA_ARG_THINK_BUDGET_MESSAGE", tools=SCCO, status=NOOP,
       note=_REASON, **_EX),
    _O("--reasoning-preserve", "bool", "reasoning_preserve", "preserve reasoning trace in the "
       "full history, not just the last assistant message (default: enabled)",
       neg="--no-reasoning-preserve", env="LLAMA_ARG_REASONING_PRESERVE", tools=SCCO, **_EX),
    _O("--skip-chat-parsing", "bool", "skip_chat_parsing", "force a pure content parser, even if "
       "a Jinja template is specified (default: disabled)", neg="--no-skip-chat-parsing",
       env="LLAMA_ARG_SKIP_CHAT_PARSING", tools=SCCO, status=NOOP,
       note="chat output is not parsed: content is returned as generated", **_EX),
    _O("--prefill-assistant", "bool", "prefill_assistant", "whether to prefill the assistant's "
       "response if the last message is an assistant message (default: prefill enabled)",
       neg="--no-prefill-assistant", env="LLAMA_ARG_PREFILL_ASSISTANT", tools={S}, **_EX),
    _O("-Cbd --spec-draft-cpu-mask-batch --cpu-mask-batch-draft", "str",
       "speculative.cpu_mask_batch", "draft CPU affinity mask for batches", hint="M",
       status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("-Crbd --spec-draft-cpu-range-batch --cpu-range-batch-draft", "str",
       "speculative.cpu_range_batch", "draft CPU range for batches", hint="lo-hi",
       status=NOOP, note=_DRAFT_NOTE, group="speculative", tools={SP}),
    _O("--spec-draft-cpu-strict-batch --cpu-strict-batch-draft", "int",
       "speculative.cpu_strict_batch", "draft strict CPU placement for batches", hint="<0|1>",
       status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("--spec-draft-prio-batch --prio-batch-draft", "int", "speculative.prio_batch", "draft "
       "thread priority for batches", hint="N", status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("--spec-draft-poll-batch --poll-batch-draft", "int", "speculative.poll_batch", "draft "
       "polling for batches", hint="<0|1>", status=NOOP, note=_DRAFT_NOTE, **_SPEC),
    _O("--spec-ngram-size-n", "int", "speculative.ngram_simple_size_n", "old spelling of "
       "--spec-ngram-simple-size-n", status=DEPR, note="use --spec-ngram-simple-size-n",
       group="speculative", tools={S}),
    _O("--spec-ngram-size-m", "int", "speculative.ngram_simple_size_m", "old spelling of "
       "--spec-ngram-simple-size-m", status=DEPR, note="use --spec-ngram-simple-size-m",
       group="speculative", tools={S}),
    _O("--spec-ngram-min-hits", "int", "speculative.ngram_simple_min_hits", "old spelling of "
       "--spec-ngram-simple-min-hits", status=DEPR, note="use --spec-ngram-simple-min-hits",
       group="speculative", tools={S}),
] + [
    # presets: llama.cpp downloads the named model (and sets port/batch/context to match)
    _O(name, "flag", "preset", f"use the {what} preset (downloads its weights)", tools=tools,
       status=UNSUP, note=_DL, **_EX)
    for name, what, tools in (
        ("--embd-gemma-default", "EmbeddingGemma", {S}),
        ("--fim-qwen-1.5b-default", "Qwen 2.5 Coder 1.5B", {S}),
        ("--fim-qwen-3b-default", "Qwen 2.5 Coder 3B", {S}),
        ("--fim-qwen-7b-default", "Qwen 2.5 Coder 7B", {S}),
        ("--fim-qwen-7b-spec", "Qwen 2.5 Coder 7B + 0.5B draft", {S}),
        ("--fim-qwen-14b-spec", "Qwen 2.5 Coder 14B + 0.5B draft", {S}),
        ("--fim-qwen-30b-default", "Qwen 3 Coder 30B A3B", {S}),
        ("--gpt-oss-20b-default", "gpt-oss-20b", {S, C}),
        ("--gpt-oss-120b-default", "gpt-oss-120b", {S, C}),
        ("--vision-gemma-4b-default", "Gemma 3 4B QAT", {S, C}),
        ("--vision-gemma-12b-default", "Gemma 3 12B QAT", {S, C}))
]


# ---- the parser ---------------------------------------------------------------------------------
# -- value checks of common/arg.cpp's handlers (the same conditions and messages) ------------------
def _finite(name: str) -> Callable:
    def conv(s: str) -> float:
        v = stof(s)
        if not math.isfinite(v):
            raise ConvertError(f"error: {name} must be finite")
        return v
    return conv


def _number(s: str) -> float:
    """A float flag llama.cpp reads with std::stof and no check: NaN is refused here (llama.cpp
    keeps it and samples from NaN probabilities, which is undefined)."""
    v = stof(s)
    if math.isnan(v):
        raise ConvertError("error: not a number (nan)")
    return v


def _at_least(lo: int, message: str, hi: int | None = None) -> Callable:
    def conv(s: str) -> int:
        v = stoi(s)
        if v < lo or (hi is not None and v > hi):
            raise ConvertError(message.replace("%d", str(v)))
        return v
    return conv


def _cpu_mask(s: str) -> str:
    digits = s[2:] if s.startswith("0x") else s
    if any(c not in "0123456789abcdefABCDEF" for c in digits[:128]):
        raise ConvertError("invalid cpumask")
    return s


def _cpu_range(s: str) -> str:
    lo, dash, hi = s.partition("-")
    try:
        ok = bool(dash) and all(x == "" or 0 <= stoul(x) < 512 for x in (lo, hi))
    except ConvertError:
        ok = False
    if not ok:
        raise ConvertError("invalid range")
    return s


def _tensor_split(s: str) -> str:
    import re
    for part in re.split(r"[,/]+", s):
        stof(part)
    return s


def _hosts(s: str) -> str:
    if not any(h.strip() for h in s.split(",")):
        raise ConvertError("--host requires at least one address")
    return s


def _directory(s: str) -> str:
    if not os.path.isdir(s):
        raise ConvertError(f"not a directory: {s}")
    return s


_VALUE_CHECKS = {
    "sampling.penalty_present": _finite("presence-penalty"),
    "sampling.penalty_freq": _finite("frequency-penalty"),
    "sampling.dry_penalty_last_n": _at_least(0, "error: invalid dry-penalty-last-n = %d"),
    "checkpoint_min_step": _at_least(0, "checkpoint-min-step must be non-negative"),
    "reasoning_budget": _at_least(-1, "invalid value"),
    "speculative.n_max": _at_least(0, "invalid value"),
    "speculative.ngram_simple_size_n": _at_least(
        1, "ngram size N must be between 1 and 1024 inclusive", 1024),
    "speculative.ngram_simple_size_m": _at_least(
        1, "ngram size M must be between 1 and 1024 inclusive", 1024),
    "prio": _at_least(-1, "invalid value", 3), "prio_batch": _at_least(-1, "invalid value", 3),
    "speculative.prio": _at_least(-1, "invalid value", 3),
    "speculative.prio_batch": _at_least(-1, "invalid value", 3),
    "cpu_mask": _cpu_mask, "cpu_mask_batch": _cpu_mask, "speculative.cpu_mask": _cpu_mask,
    "speculative.cpu_mask_batch": _cpu_mask, "cpu_range": _cpu_range,
    "cpu_range_batch": _cpu_range, "speculative.cpu_range": _cpu_range,
    "speculative.cpu_range_batch": _cpu_range, "tensor_split": _tensor_split,
    "hostname": _hosts, "slot_save_path": _directory,
}
for _i, _o in enumerate(OPTIONS):
    if _o.conv is None and _o.dest in _VALUE_CHECKS:
        OPTIONS[_i] = dataclasses.replace(_o, conv=_VALUE_CHECKS[_o.dest])
    elif _o.conv is None and _o.kind == "float" and _o.group == "sampling":
        OPTIONS[_i] = dataclasses.replace(_o, conv=_number)


def _value_notes(p: Params, stream) -> None:
    """Values llama.cpp maps silently to another one: the same mapping, said in one line."""
    if p.sampling.temp < 0:
        print(f"warning: --temp {p.sampling.temp:g} is taken as 0 (greedy), as llama.cpp "
              "clamps it", file=stream)
        p.sampling.temp = 0.0
    if p.sampling.dry_base < 1:
        print(f"warning: --dry-base {p.sampling.dry_base:g} is below 1 and ignored (llama.cpp "
              f"keeps the default {Params().sampling.dry_base:g})", file=stream)
        p.sampling.dry_base = Params().sampling.dry_base


def options_for(tool: str) -> list[Opt]:
    return [o for o in OPTIONS if tool in o.tools]


def _lookup(tool: str) -> dict:
    table = {}
    for o in options_for(tool):
        for a in o.args:
            table[a] = (o, True)
        for a in o.neg:
            table[a] = (o, False)
    return table


def _set(params: Params, dest: str, value) -> None:
    obj, name = params, dest
    if "." in dest:
        head, name = dest.split(".", 1)
        obj = getattr(params, head)
        if head == "sampling":
            obj.user_set.add(name)
    setattr(obj, name, value)
    params.set_fields.add(dest)


def _get(params: Params, dest: str):
    obj, name = params, dest
    if "." in dest:
        head, name = dest.split(".", 1)
        obj = getattr(params, head)
    return getattr(obj, name, None)


_NUM = {"int": stoi, "uint": stoul, "float": stof, "str": str, "list": str}


def _convert(o: Opt, raw: str):
    if o.kind == "pair":                  # a config file / env value: "START END"
        parts = raw.split()
        if len(parts) != 2:
            raise ConvertError("expected two values")
        return o.conv(*parts)
    if o.conv is not None:
        return o.conv(raw)
    if o.kind == "enum":
        if raw not in o.choices:
            raise ConvertError("invalid value")
        return raw
    return _NUM[o.kind](raw)


def _store(params: Params, o: Opt, value, fresh: set) -> None:
    """Store a converted value; list options append (a fresh list on first command-line use)."""
    if o.kind != "list":
        _set(params, o.dest, value)
        return
    cur = _get(params, o.dest)
    if o.dest not in fresh:  # replace defaults (e.g. DRY breakers) on first use
        cur = []
        fresh.add(o.dest)
    if o.dest == "sampling.dry_sequence_breakers" and value == "none":
        value = []
    cur = cur + (value if isinstance(value, list) else [value])
    _set(params, o.dest, cur)


class _Notes:
    """One warning line per option for no-op and deprecated spellings (stderr)."""

    def __init__(self, stream):
        self.stream, self.seen = stream, set()

    def __call__(self, o: Opt, spelled: str, positive: bool = True) -> None:
        if o.status == UNSUP and (positive or o.kind != "bool"):
            raise ArgError(f"error: {spelled} is not supported by pyllama yet ({o.note})")
        if o.status in (NOOP, DEPR) and o.dest not in self.seen:
            self.seen.add(o.dest)
            what = "is an old spelling" if o.status == DEPR else "has no effect in pyllama"
            print(f"warning: {spelled} {what}: {o.note}", file=self.stream)


def _apply_env(params: Params, opts: list[Opt], env, notes: _Notes, fresh: set) -> None:
    for o in opts:
        names = ([o.env] if o.env else []) + list(o.old_env)
        for name in names:
            neg_name = name.replace("LLAMA_ARG_", "LLAMA_ARG_NO_") if o.neg else None
            if neg_name and neg_name != name and neg_name in env:
                value = "0"
            elif name in env:
                value = env[name]
            else:
                continue
            try:
                _apply_env_value(params, o, name, value, notes, fresh)
            except ConvertError as e:
                raise ArgError(f'error while handling environment variable "{name}": {e}') from None


def _apply_env_value(params, o: Opt, name: str, value: str, notes: _Notes, fresh: set) -> None:
    if o.kind == "flag":
        if is_truthy(value):
            notes(o, name)
            _set(params, o.dest, o.const)
    elif o.kind == "bool":
        v = parse_bool(value)
        notes(o, name, v)
        _set(params, o.dest, v)
    else:
        v = _convert(o, value)
        notes(o, name)
        _store(params, o, v, fresh)


def _opt_usage(o: Opt) -> str:
    """One option's help block, laid out like common_arg::to_string (40-column help)."""
    head = ""
    spellings = o.all_args
    for i, a in enumerate(spellings):
        if i == 0:
            head += a if len(spellings) == 1 else (a + ", ").ljust(7)
        else:
            head += a + (", " if i < len(spellings) - 1 else "")
    hint = o.value_hint()
    if hint and o.kind not in ("flag", "bool"):
        head += " " + hint
    head = head + "\n" + " " * 40 if len(head) > 37 else head.ljust(40)
    help_text = o.help + (f"\n(env: {o.env})" if o.env else "")
    lines = []
    for para in help_text.split("\n"):
        lines.extend(_wrap(para, 70))
    return head + ("\n" + " " * 40).join(lines) + "\n"


def _wrap(line: str, width: int) -> list[str]:
    if len(line) <= width:
        return [line]
    out, cur = [], ""
    for w in line.split():
        if cur and len(cur) + 1 + len(w) > width:
            out.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    return out + ([cur] if cur else [])


def usage(tool: str) -> str:
    groups = {"common": [], "sampling": [], "speculative": [], "example": []}
    for o in options_for(tool):
        if o.status != DEPR:
            groups[o.group].append(_opt_usage(o))
    titles = [("common", "common params"), ("sampling", "sampling params"),
              ("speculative", "speculative params"), ("example", "example-specific params")]
    parts = [f"----- {title} -----\n\n" + "".join(groups[g]) for g, title in titles if groups[g]]
    return "\n\n".join(parts)


def config_files(env) -> list[str]:
    """/etc/llama.cpp/config.ini, then ${XDG_CONFIG_HOME:-~/.config}/llama.cpp/config.ini."""
    home = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return [p for p in ("/etc/llama.cpp/config.ini", os.path.join(home, "llama.cpp", "config.ini"))
            if os.path.isfile(p)]


def read_ini(path: str) -> list[tuple[str, str]]:
    """(key, value) pairs of the global part and the `[*]` section; other sections are presets
    for other models and are skipped, like llama.cpp's common_params_apply_system_config."""
    out, section = [], ""
    with open(path, encoding="utf-8") as f:
        for raw in f:
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
            elif section in ("", "*"):
                key, _, value = line.partition("=")
                out.append((key.strip(), value.strip().strip('"')))
    return out


def _apply_config(params: Params, table: dict, paths, notes: _Notes, fresh: set) -> None:
    """Config keys are long option names without dashes; unknown keys are ignored."""
    for path in paths:
        for key, value in read_ini(path):
            hit = table.get("--" + key.replace("_", "-")) or table.get("-" + key)
            if hit is None:
                continue
            o, positive = hit
            try:
                if o.kind in ("flag", "bool"):
                    v = parse_bool(value) if value else True
                    if o.kind == "flag":
                        if v:
                            notes(o, key)
                            _set(params, o.dest, o.const)
                        continue
                    v = v if positive else not v
                    notes(o, key, v)
                    _set(params, o.dest, v)
                else:
                    notes(o, key)
                    _store(params, o, _convert(o, value), fresh)
            except ConvertError as e:
                raise ArgError(f'error while handling config file "{path}" key "{key}": {e}') \
                    from None


def parse(tool: str, argv: list[str], env=None, stream=None, config=None) -> Params:
    """llama.cpp's common_params_parse for one tool: config files < environment < command line;
    raises ArgError with llama.cpp's text. `config`: INI paths (default: config_files(env))."""
    env = os.environ if env is None else env
    stream = sys.stderr if stream is None else stream
    params = _tool_defaults(tool)
    opts, table, notes = options_for(tool), _lookup(tool), _Notes(stream)
    _apply_config(params, table, config_files(env) if config is None else config, notes, set())
    _apply_env(params, opts, env, notes, set())
    fresh, count = set(), {}
    i = 0
    while i < len(argv):
        i = _parse_one(params, argv, i, table, env, notes, fresh, count, stream)
    _postprocess(params)
    _value_notes(params, stream)
    return params


def _parse_one(params, argv, i, table, env, notes, fresh, count, stream) -> int:
    arg = argv[i]
    if arg.startswith("--"):
        arg = arg.replace("_", "-")
    if arg not in table:
        raise ArgError(f"error: invalid argument: {arg}")
    o, positive = table[arg]
    if o.env and (o.env in env or any(n in env for n in o.old_env)):
        print(f"warn: {o.env} environment variable is set, but will be overwritten by command "
              f"line argument {arg}", file=stream)
    count[id(o)] = count.get(id(o), 0) + 1
    if count[id(o)] > 1 and o.kind != "list":
        print(f"DEPRECATED: argument '{arg}' specified multiple times, use comma-separated values "
              f"instead (only last value will be used)", file=stream)
    try:
        notes(o, arg, positive)
        if o.kind == "flag":
            _set(params, o.dest, o.const)
            return i + 1
        if o.kind == "bool":
            _set(params, o.dest, positive)
            return i + 1
        if o.kind == "optenum":
            return _parse_optenum(params, o, argv, i, arg, stream)
        if o.kind == "pair":              # two values (--control-vector-layer-range START END)
            if i + 2 >= len(argv):
                raise ConvertError("expected value for argument")
            _set(params, o.dest, o.conv(argv[i + 1], argv[i + 2]))
            return i + 3
        if i + 1 >= len(argv):
            raise ConvertError("expected value for argument")
        _store(params, o, _convert(o, argv[i + 1]), fresh)
        if o.dest == "prompt":
            _note_prompt_source(params, o, argv[i + 1], stream)
        return i + 2
    except ConvertError as e:
        raise ArgError(f'error while handling argument "{arg}": {e}\n\nusage:\n{_opt_usage(o)}\n'
                       f"\nto show complete usage, run with -h") from None


def _parse_optenum(params, o: Opt, argv, i, arg, stream) -> int:
    """-fa / --color: a value if the next word is one, else the old bare meaning ("on")."""
    if i + 1 < len(argv):
        try:
            _set(params, o.dest, o.conv(argv[i + 1]))
            return i + 2
        except ConvertError:
            pass
    print(f"warning: bare {arg} is an old spelling: use {arg} on", file=stream)
    _set(params, o.dest, o.const)
    return i + 1


def _note_prompt_source(params: Params, o: Opt, value: str, stream) -> None:
    params.prompt_file = value if o.args[0] in ("-f", "-bf") else ""
    params.prompt_is_binary = o.args[0] == "-bf"
    if o.args[0] == "-bf":
        try:
            with open(value, "rb") as f:
                data = f.read()
        except OSError:
            raise ConvertError(f"error: failed to open file '{value}'") from None
        params.prompt = data.decode("utf-8", errors="replace")
        print(f"Read {len(data)} bytes from binary file {value}", file=stream)


def _tool_defaults(tool: str) -> Params:
    """Per-tool default overrides made before parsing (common_params_parser_init, mains)."""
    p = Params(tool=tool)
    if tool == S:
        p.n_parallel = -1
    elif tool == CO:
        p.use_jinja = False
    elif tool == T:
        p.parse_special = True
    elif tool == P:
        p.n_ctx, p.escape = 512, False
    elif tool == SP:
        p.sampling.n_probs = 128
    elif tool == C:
        p.verbosity = 1
    return p


def _postprocess(p: Params) -> None:
    if p.escape:
        p.prompt = process_escapes(p.prompt)
        p.input_prefix = process_escapes(p.input_prefix)
        p.input_suffix = process_escapes(p.input_suffix)
        p.antiprompt = [process_escapes(a) for a in p.antiprompt]
        p.sampling.dry_sequence_breakers = [process_escapes(b)
                                            for b in p.sampling.dry_sequence_breakers]
    if p.devices == "none":
        p.n_gpu_layers = "0"
    sp = p.speculative
    if sp.spec_default:
        # common/arg.cpp --spec-default: push ngram-mod with n_match 24, n_min 48, n_max 64 (here
        # an explicit --spec-ngram-mod-* wins whatever its position on the command line)
        sp.types = list(sp.types) + ["ngram-mod"]
        for f, v in (("n_match", 24), ("n_min", 48), ("n_max", 64)):
            if f"speculative.ngram_mod_{f}" not in p.set_fields:
                setattr(sp, f"ngram_mod_{f}", v)
    if p.speculative.model and not p.speculative.types:
        p.speculative.types = ["draft-simple"]  # -md alone enables drafting (as older llama.cpp did; docs/architecture.md)
