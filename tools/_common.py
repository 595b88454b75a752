"""What every tool's main() shares: parse-or-exit, version text, logging set-up, model loading
with a TTY progress indicator, and the top-level error guard (one stderr line, exit 1, no traceback).
"""
from __future__ import annotations

import functools
import os
import platform
import sys
import threading
import time
from pathlib import Path

from ._args import ArgError, parse, usage
from ._params import Params

REPO = Path(__file__).resolve().parent.parent


@functools.lru_cache(maxsize=1)
def build_info() -> tuple[str, int, str]:
    """(version, build number, short commit); build/commit from the git checkout when there is one."""
    try:
        from pyllama import __version__ as version
    except ImportError:
        version = "0.1.0"
    commit, number = "unknown", 0
    head = REPO / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            ref = (REPO / ".git" / ref[5:]).read_text().strip()
        commit = ref[:7]
        number = _commit_count()
    except OSError:
        pass
    return version, number, commit


def _commit_count() -> int:
    import subprocess
    try:
        r = subprocess.run(["git", "-C", str(REPO), "rev-list", "--count", "HEAD"],
                           capture_output=True, text=True, timeout=5)
        return int(r.stdout.strip() or 0)
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0


def version_text() -> str:
    version, number, commit = build_info()
    return (f"version: {version} (build {number}, commit {commit})\n"
            f"built with CPython {platform.python_version()} for {platform.system()} "
            f"{platform.machine()}\n")


def _cuda_device(cuda) -> str | None:
    """The name of the usable CUDA device (pyllama.backend.cuda.available()), else None."""
    ok = cuda.available()
    ok, name = ok if isinstance(ok, tuple) else (bool(ok), "CUDA")
    return name if ok else None


def cuda_usable() -> bool:
    try:
        from pyllama.backend import cuda
        return _cuda_device(cuda) is not None
    except Exception:  # noqa: BLE001 - no pycuda / driver / GPU
        return False


def list_devices_text() -> str:
    lines = ["Available devices:"]
    try:
        from pyllama.backend import cuda
        name = _cuda_device(cuda)
    except Exception:  # noqa: BLE001 - no pycuda / driver / GPU
        name = None
    lines.append(f"  CUDA0: {name}" if name else "  (none)")
    return "\n".join(lines) + "\n"


def cache_list_text() -> str:
    from pyllama import models
    files = sorted(p.name for p in models.cache_dir().glob("*.gguf")) if models.cache_dir().is_dir() else []
    return "".join(f"{i + 1}. {n}\n" for i, n in enumerate(files)) or "No cached models.\n"


def completion_bash(tool: str) -> str:
    from ._args import options_for
    opts = " ".join(a for o in options_for(tool) for a in o.all_args)
    name = "llama-" + tool if not tool.startswith("llama-") else tool
    return (f"_llama_completions() {{\n    local cur\n    COMPREPLY=()\n"
            f"    cur=\"${{COMP_WORDS[COMP_CWORD]}}\"\n"
            f"    COMPREPLY=( $(compgen -W \"{opts}\" -- \"$cur\") )\n}}\n"
            f"complete -F _llama_completions {name}\n")


def parse_or_exit(tool: str, argv: list[str] | None, extra_usage: str = "") -> Params:
    """Parse like common_params_parse; print help/version/lists and exit 0, errors exit 1."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        params = parse(tool, argv)
    except ArgError as e:
        print(str(e), file=sys.stderr)
        raise SystemExit(1)
    if params.usage:
        sys.stdout.write(usage(tool) + "\n" + extra_usage)
        raise SystemExit(0)
    if params.version:
        sys.stderr.write(version_text())
        raise SystemExit(0)
    for flag, text in (("list_devices", list_devices_text), ("cache_list", cache_list_text)):
        if getattr(params, flag):
            sys.stdout.write(text())
            raise SystemExit(0)
    if params.completion_bash:
        sys.stdout.write(completion_bash(tool))
        raise SystemExit(0)
    setup_logging(params)
    if "poll" in params.set_fields:
        _set_poll(params.poll)
    return params


def _set_poll(level: int) -> None:
    """--poll N: the OpenMP wait policy, set before the CPU kernels load (pyllama/omp.py)."""
    from pyllama import omp
    if not 0 <= level <= 100:
        print(f"error: invalid --poll value {level}: expected 0...100", file=sys.stderr)
        raise SystemExit(1)
    omp.configure(level)


class _Formatter:
    """llama.cpp's log line prefix: `M.SS.mmm.uuu I ` (timestamps and level letter optional)."""

    def __init__(self, timestamps: bool, prefix: bool):
        self.t0, self.timestamps, self.prefix = time.monotonic(), timestamps, prefix

    def format(self, record) -> str:
        head = ""
        if self.timestamps:
            us = int((time.monotonic() - self.t0) * 1e6)
            head += f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}." \
                    f"{us % 1000:03d} "
        if self.prefix:
            head += record.levelname[0] + " "
        return head + record.getMessage()


def setup_logging(params: Params) -> None:
    import logging
    from pyllama import log
    level = {0: logging.CRITICAL + 1, 1: logging.ERROR, 2: logging.WARNING,
             3: logging.INFO}.get(params.verbosity, logging.DEBUG)
    if params.log_disable:
        level = logging.CRITICAL + 1
    log.setup(3, sys.stderr)
    fmt = _Formatter(params.log_timestamps, params.log_prefix)
    for h in log.logger.handlers:
        h.setFormatter(fmt)
    if params.log_file:
        fh = logging.FileHandler(params.log_file)
        fh.setFormatter(fmt)
        log.logger.addHandler(fh)
    log.logger.setLevel(level)


def resolve_model(params: Params) -> str:
    """-m path or alias; no -m means the bundled default model (pyllama.models.DEFAULT_MODEL)."""
    from pyllama import models
    return models.resolve(params.model or None)


class Spinner:
    """`Loading model... |/-\\` on a TTY stderr while a slow call runs; silent otherwise."""

    def __init__(self, label: str = "Loading model... ", stream=None):
        self.stream = stream or sys.stderr
        self.label, self.stop = label, threading.Event()
        self.thread = None

    def __enter__(self):
        if self.stream.isatty():
            self.thread = threading.Thread(target=self._spin, daemon=True)
            self.thread.start()
        return self

    def _spin(self):
        self.stream.write(self.label)
        i = 0
        while not self.stop.wait(0.1):
            self.stream.write("|/-\\"[i % 4] + "\b")
            self.stream.flush()
            i += 1

    def __exit__(self, *exc):
        self.stop.set()
        if self.thread is not None:
            self.thread.join()
            self.stream.write(" \b\r" + " " * len(self.label) + "\r")
            self.stream.flush()
        return False


def pick_backend(params: Params, path: str | None = None) -> str:
    """-ngl / -dev → backend: 'cuda' when layers are to be offloaded and a CUDA backend is usable,
    else 'cpu' (an explicit -ngl N > 0 then warns, like llama.cpp on a CPU-only build). The CUDA
    backend runs whole models: -ngl N below the model's layer count is refused (one line)."""
    ngl = params.model_kwargs()["n_gpu_layers"]
    if ngl != 0:
        if cuda_usable():
            check_full_offload(ngl, path)
            return "cuda"
        if "n_gpu_layers" in params.set_fields and ngl > 0:
            print("warning: no usable GPU found, --gpu-layers option will be ignored",
                  file=sys.stderr)
    return "cpu"


def check_full_offload(ngl: int, path: str | None) -> None:
    """-ngl N with 0 < N < the model's block count would offload only some layers, which the
    CUDA backend cannot do: say so instead of offloading everything."""
    if ngl <= 0 or path is None:
        return                                  # auto (-1) / all (-2): every layer
    from pyllama.errors import BackendError
    from pyllama.gguf import GGUFReader
    meta = GGUFReader(path).metadata
    n_layer = int(meta.get(f"{meta.get('general.architecture', '')}.block_count", 0) or 0)
    if 0 < ngl < n_layer:
        raise BackendError(f"-ngl {ngl}: offloading only some of the model's {n_layer} layers is "
                           "not supported; use -ngl 0 (CPU) or -ngl all (every layer on the GPU)")


def load_model(params: Params, **extra):
    """pyllama.load_model on the resolved path and backend, with the TTY spinner."""
    import inspect
    import pyllama
    path = resolve_model(params)
    kwargs = params.model_kwargs()
    kwargs["backend"] = pick_backend(params, path)
    kwargs.update(extra)
    try:
        sig = inspect.signature(pyllama.load_model)
        if not any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
            kwargs = {k: v for k, v in kwargs.items() if k in sig.parameters}
    except (TypeError, ValueError):
        pass
    with Spinner():
        return pyllama.load_model(path, **kwargs)


def guard(main_fn, argv, prefix: str = "error") -> int:
    """Run a tool body: PyllamaError/OSError → one line on stderr and exit 1; Ctrl+C → 130."""
    from pyllama.errors import PyllamaError
    try:
        return main_fn(argv)
    except BrokenPipeError:
        return 0
    except (PyllamaError, OSError) as e:
        print(f"{prefix}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nInterrupted by user", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug still gets one line, never a traceback
        if os.environ.get("PYLLAMA_DEBUG"):
            raise
        print(f"{prefix}: internal error: {type(e).__name__}: {e} (set PYLLAMA_DEBUG=1 for a "
              f"traceback)", file=sys.stderr)
        return 1


class Output:
    """llama.cpp's LOG(): tool output on stdout (suppressed by --log-disable); INFO/WARN/ERR lines
    go through the pyllama logger to stderr."""

    def __init__(self, params: Params):
        self.enabled = not params.log_disable

    def __call__(self, text) -> None:
        """str, or bytes written as they are (token pieces need not be valid UTF-8)."""
        if isinstance(text, bytes):
            self.raw(text)
        elif self.enabled:
            sys.stdout.write(text)
            sys.stdout.flush()

    def raw(self, data: bytes) -> None:
        if self.enabled:
            sys.stdout.flush()
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()


def log():
    from pyllama.log import get_logger
    return get_logger("tools")


def vocab_bos(vocab) -> int | None:
    """The BOS id when the vocab adds BOS (llama_vocab_get_add_bos), else None."""
    add = getattr(vocab, "add_bos", None)
    if callable(add):
        add = add()
    bos = getattr(vocab, "bos_id", getattr(vocab, "bos", None))
    return int(bos) if add and bos is not None and bos >= 0 else None


def print_perf(logger, t_load: float, n_prompt: int, t_prompt: float, n_eval: int,
               t_eval: float, t_sample: float = 0.0, n_sample: int = 0,
               t_total: float | None = None) -> None:
    """common_perf_print lines (stderr); times in seconds. t_total: since the context was
    created (llama.cpp's t_start_ms); by default the sum of the parts."""
    total = t_load + t_prompt + t_eval + t_sample if t_total is None else t_total
    def per(n, t):  # noqa: E306 - (ms per token, tokens per second)
        return (1e3 * t / n if n else 0.0, n / t if t > 0 else 0.0)
    pp, ev = per(n_prompt, t_prompt), per(n_eval, t_eval)
    logger.info(f"common_perf_print:    sampling time = {1e3 * t_sample:10.2f} ms")
    logger.info(f"common_perf_print:    samplers time = {1e3 * t_sample:10.2f} ms / {n_sample:5d} tokens")
    logger.info(f"common_perf_print:        load time = {1e3 * t_load:10.2f} ms")
    logger.info(f"common_perf_print: prompt eval time = {1e3 * t_prompt:10.2f} ms / {n_prompt:5d} "
                f"tokens ({pp[0]:8.2f} ms per token, {pp[1]:8.2f} tokens per second)")
    logger.info(f"common_perf_print:        eval time = {1e3 * t_eval:10.2f} ms / {n_eval:5d} runs"
                f"   ({ev[0]:8.2f} ms per token, {ev[1]:8.2f} tokens per second)")
    logger.info(f"common_perf_print:       total time = {1e3 * total:10.2f} ms / "
                f"{n_prompt + n_eval:5d} tokens")
    if t_total is not None:
        unacc = t_total - (t_sample + t_prompt + t_eval)
        pc = 100.0 * unacc / t_total if t_total > 0 else 0.0
        logger.info(f"common_perf_print: unaccounted time = {1e3 * unacc:10.2f} ms / {pc:5.1f} %"
                    "      (total - sampling - prompt eval - eval) / (total)")
