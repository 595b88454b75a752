"""Model: a GGUF file opened (mmap), its architecture, hyper-parameters, vocabulary and weights."""
from __future__ import annotations

import os
import re

import numpy as np

from . import arch as arch_registry
from .arch.base import LayerWeights, ModelWeights, check_hparams
from .backend import get_backend
from .errors import ModelError
from .gguf import GGUFReader
from .log import get_logger
from .models import resolve
from .quant import dequantize

log = get_logger("model")

_FTYPE_NAMES = {0: "all F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1",
                10: "Q2_K - Medium", 11: "Q3_K - Small", 12: "Q3_K - Medium", 13: "Q3_K - Large",
                14: "Q4_K - Small", 15: "Q4_K - Medium", 16: "Q5_K - Small", 17: "Q5_K - Medium",
                18: "Q6_K", 32: "BF16"}
_LAYER_RE = re.compile(r"^blk\.(\d+)\.(.+)\.(weight|bias)$")


class Model:
    def __init__(self, path: str, backend: str = "cpu", n_threads: int | None = None,
                 vocab_only: bool = False, kv_overrides: dict | None = None):
        self.path = path
        self.reader = GGUFReader(path)
        self.metadata = self.reader.metadata
        if kv_overrides:
            self.metadata = apply_kv_overrides(self.metadata, kv_overrides)
        self.arch_name = self.metadata.get("general.architecture") or self.reader.architecture
        if not self.arch_name:
            raise ModelError(f"{path}: no general.architecture key")
        self.arch = arch_registry.get(self.arch_name)
        self.hparams = self.arch.load_hparams(self.metadata)
        check_hparams(self.hparams)
        from .vocab import Vocab  # L1; imported here to keep model import light
        self.vocab = Vocab.from_gguf(self.metadata)
        if self.hparams.n_vocab == 0:
            self.hparams.n_vocab = self.vocab.n_vocab
        self.backend = get_backend(backend, n_threads)
        self.weights = None if vocab_only else self._load_weights()

    # -- weights ----------------------------------------------------------------------------
    def _load_weights(self) -> ModelWeights:
        tensors = self.reader.tensors
        for spec in self.arch.tensor_specs(self.hparams):
            t = tensors.get(spec.name)
            if t is None:
                if spec.required:
                    raise ModelError(f"{self.path}: missing tensor '{spec.name}'")
                continue
            if t.shape != spec.shape:
                raise ModelError(f"{self.path}: tensor '{spec.name}' has wrong shape; expected "
                                 f"{list(spec.shape)}, got {list(t.shape)}")
        for name, info in tensors.items():
            if not self.backend.supports_type(info.type):
                raise ModelError(f"{self.path}: tensor '{name}' has type {info.type.name}, which "
                                 f"the {self.backend.name} backend does not support")
        top, per_layer = {}, [dict() for _ in range(self.hparams.n_layer)]
        for name, info in tensors.items():
            w = self.backend.weight(info)
            m = _LAYER_RE.match(name)
            if m:
                il = int(m.group(1))
                if il < self.hparams.n_layer:
                    key = m.group(2) + ("_b" if m.group(3) == "bias" else "")
                    per_layer[il][key] = w
            else:
                top[name.rsplit(".", 1)[0] if name.endswith(".weight") else
                    name.replace(".bias", "_b")] = w
        mw = ModelWeights(top)
        mw.layers = [LayerWeights(d) for d in per_layer]
        for name in ("rope_freqs", "rope_factors_long", "rope_factors_short"):
            if name in top:                  # RoPE frequency factors: context-level (hparams)
                w = top[name]
                self.hparams.rope_factors[name] = dequantize(
                    np.ascontiguousarray(w.raw).view(np.uint8), w.type).reshape(-1)
        return mw

    # -- info ---------------------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    @property
    def n_params(self) -> int:
        return sum(t.n_elements for t in self.reader.tensors.values())

    @property
    def size_bytes(self) -> int:
        return sum(t.nbytes for t in self.reader.tensors.values())

    @property
    def desc(self) -> str:
        """llama.cpp's llama_model_desc: '<arch> <size label> <file type>'."""
        label = self.metadata.get("general.size_label") or _size_label(self.n_params)
        ft = self.metadata.get("general.file_type")
        ftn = _FTYPE_NAMES.get(ft, f"ftype {ft}") if ft is not None else "?"
        return f"{self.arch_name} {label} {ftn}"

    # -- text ---------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False):
        return self.vocab.tokenize(text, add_special, parse_special)

    def detokenize(self, ids, remove_special: bool = False, unparse_special: bool = False) -> str:
        return self.vocab.detokenize(ids, remove_special, unparse_special)

    def token_to_piece(self, token: int, special: bool = True) -> bytes:
        return self.vocab.token_to_piece(token, special)

    def __repr__(self) -> str:
        return f"Model({os.path.basename(self.path)!r}, {self.desc})"


def _size_label(n: int) -> str:
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def load_model(path_or_alias=None, *, backend: str = "cpu", n_threads: int | None = None,
               vocab_only: bool = False, kv_overrides: dict | None = None) -> Model:
    """Open a GGUF (or a bundled alias, see pyllama.models). Raises GgufError/ModelError.
    kv_overrides: {key: int | float | bool | str} replacing metadata values (--override-kv)."""
    return Model(resolve(path_or_alias), backend=backend, n_threads=n_threads,
                 vocab_only=vocab_only, kv_overrides=kv_overrides)


def _override_kind(v) -> str | None:
    if isinstance(v, (bool, np.bool_)):
        return "bool"
    if isinstance(v, (int, np.integer)):
        return "int"
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, str):
        return "str"
    return None


def apply_kv_overrides(metadata, overrides: dict):
    """The metadata with llama_model_kv_override values on top (llama_model_loader: an override
    replaces the key's value, or supplies an absent key; its type must be the key's: int for
    integer keys, float, bool, str), as a lazy mapping over the file's metadata."""
    from collections import ChainMap
    for key, value in overrides.items():
        want, got = _override_kind(metadata.get(key)), _override_kind(value)
        if got is None:
            raise ModelError(f"override for key '{key}' has an unsupported type")
        if key in metadata and want is not None and want != got:
            raise ModelError(f"Bad metadata override type for key '{key}', expected {want} but "
                             f"got {got}")
    return ChainMap(dict(overrides), metadata)
