"""LoRA adapters and control vectors (llama.cpp src/llama-adapter.cpp, common control-vector
loading in common/common.cpp).

A LoRA adapter is a GGUF file as llama.cpp's convert_lora_to_gguf.py writes it:
`general.type = adapter`, `adapter.type = lora`, `adapter.lora.alpha` (f32, 0: none),
`general.architecture` equal to the model's, and per adapted base tensor `<name>.lora_a`
[rank, cols] and `<name>.lora_b` [rows, rank] (numpy order; token_embd's lora_a is stored
transposed, [n_vocab, rank]). `*_norm.weight` tensors are skipped as llama.cpp skips them.
The Graph applies an adapter to a mat-mul as llama.cpp's build_lora_mm does:
y = W x, then per adapter y = y + scale * (B (A x)), scale = user_scale * alpha / rank (alpha
set) or user_scale, the bias added after; to the token embeddings as build_inp_embd does
(rows of A^T by B, scaled, added).

A control vector is a GGUF with `direction.N` (N >= 1) f32 vectors of n_embd; several files
(each times its strength) are summed; the Context adds layer il's vector to the output of layer
il for il in [layer_start, layer_end] (llama.cpp's build_cvec; there is never one for layer 0).
"""
from __future__ import annotations

import numpy as np

from .errors import GgufError, ModelError
from .gguf import GGUFReader
from .log import get_logger

log = get_logger("adapter")


class AdapterError(ModelError):
    """An adapter or control-vector file that cannot be used with this model."""


class LoraAdapter:
    """llama_adapter_lora: the adapter's A/B weights keyed by the base tensor's GGUF name.

    `LoraAdapter(model, path)` validates the file against the model (llama_adapter_lora_init);
    attach it to a context with `Context.set_adapters_lora([adapter], [scale])`.
    """

    def __init__(self, model, path: str):
        self.path = str(path)
        self.model = model
        try:
            reader = GGUFReader(self.path)
        except GgufError as e:
            raise AdapterError(f"failed to load LoRA adapter '{self.path}': {_strip(e)}") \
                from None
        self._reader = reader            # keeps the mapping the weights view
        md = reader.metadata
        self.meta = {k: v for k, v in md.items() if not isinstance(v, (list, tuple))}
        self.alpha, self.ab = 0.0, {}
        try:
            self._load(model, md, reader)
        except AdapterError as e:
            raise AdapterError(f"failed to load LoRA adapter '{self.path}': {e}") from None

    def _load(self, model, md, reader) -> None:
        gtype = str(md.get("general.type", ""))
        if gtype != "adapter":
            raise AdapterError(f"expect general.type to be 'adapter', but got: {gtype}")
        arch = str(md.get("general.architecture", ""))
        if arch != model.arch_name:
            raise AdapterError(f"model arch and LoRA arch mismatch (adapter: '{arch}', model: "
                               f"'{model.arch_name}')")
        atype = str(md.get("adapter.type", ""))
        if atype != "lora":
            raise AdapterError(f"expect adapter.type to be 'lora', but got: {atype}")
        alpha = md.get("adapter.lora.alpha", 0.0)
        if not isinstance(alpha, (int, float, np.floating, np.integer)) or isinstance(alpha, bool):
            raise AdapterError("adapter.lora.alpha is not a number")
        self.alpha = float(np.float32(alpha))
        if "adapter.alora.invocation_tokens" in md:
            raise AdapterError("activated LoRA (aLoRA, adapter.alora.invocation_tokens) adapters "
                               "are not supported by pyllama")
        pairs: dict[str, list] = {}
        for name in reader.tensors:
            if name.endswith(".lora_a"):
                pairs.setdefault(name[:-len(".lora_a")], [None, None])[0] = name
            elif name.endswith(".lora_b"):
                pairs.setdefault(name[:-len(".lora_b")], [None, None])[1] = name
            elif name.endswith("_norm.weight"):
                continue                  # llama.cpp: norm vectors are not applied (yet)
            else:
                raise AdapterError(f"LoRA tensor '{name}' has unexpected suffix")
        base = model.reader.tensors
        be = model.backend
        tied = "output.weight" not in base
        for name, (na, nb) in sorted(pairs.items()):
            if na is None or nb is None:
                raise AdapterError(f"LoRA tensor pair for '{name}' is missing one component")
            mt = base.get(name)
            if mt is not None and "_exps." in name:
                raise AdapterError(f"LoRA tensor '{name}': adapters on mixture-of-experts "
                                   "tensors are not supported by pyllama")
            if mt is None:
                raise AdapterError(f"LoRA tensor '{name}' does not exist in base model (hint: "
                                   "maybe wrong base model?)")
            ta, tb = reader.tensors[na], reader.tensors[nb]
            if len(ta.shape) != 2 or len(tb.shape) != 2 or len(mt.shape) != 2:
                raise AdapterError(f"tensor '{name}' has incorrect shape (hint: maybe wrong base "
                                   "model?)")
            rows, cols = mt.shape
            if name == "token_embd.weight":
                # A stored transposed [n_vocab, rank], B [n_embd, rank] (build_inp_embd)
                if tb.shape[0] != cols or ta.shape[0] != rows:
                    raise AdapterError(f"tensor '{name}' has incorrect shape (hint: maybe wrong "
                                       "base model?)")
                if ta.shape[1] != tb.shape[1]:
                    raise AdapterError(f"tensor '{name}': lora_a and lora_b ranks differ")
                if tied:
                    raise AdapterError("a LoRA on token_embd.weight needs a model with its own "
                                       "output.weight: this model ties its output to the token "
                                       "embeddings (llama.cpp 0c1e570 aborts on such an adapter)")
            else:
                if ta.shape[1] != cols or tb.shape[0] != rows:
                    raise AdapterError(f"tensor '{name}' has incorrect shape (hint: maybe wrong "
                                       "base model?)")
                if ta.shape[0] != tb.shape[1]:
                    raise AdapterError("lora_a tensor is not transposed (hint: adapter from "
                                       "\"finetune\" example is no longer supported)")
            for t in (ta, tb):
                if not be.supports_type(t.type):
                    raise AdapterError(f"LoRA tensor '{t.name}' has type {t.type.name}, which "
                                       f"the {be.name} backend does not support")
            a, b = be.weight(ta), be.weight(tb)
            self.ab[name] = LoraWeight(a, b, int(tb.shape[1]))
        if not self.ab:
            log.warning(f"LoRA adapter '{self.path}' has no lora_a/lora_b tensors")
        log.info(f"loaded LoRA adapter '{self.path}': {len(self.ab) * 2} tensors, "
                 f"alpha {self.alpha:g}")

    def get(self, name: str):
        return self.ab.get(name)

    @property
    def task_name(self) -> str:
        return str(self.meta.get("adapter.lora.task_name", ""))

    @property
    def prompt_prefix(self) -> str:
        return str(self.meta.get("adapter.lora.prompt_prefix", ""))

    def __repr__(self) -> str:
        return f"LoraAdapter({self.path!r}, {len(self.ab)} tensors, alpha={self.alpha:g})"


class LoraWeight:
    """One adapted tensor: A, B and the rank (B's column count, llama.cpp's b->ne[0])."""
    __slots__ = ("a", "b", "rank")

    def __init__(self, a, b, rank: int):
        self.a, self.b, self.rank = a, b, rank

    def scale(self, alpha: float, user_scale: float) -> float:
        """llama_adapter_lora_weight::get_scale, in f32."""
        s = np.float32(user_scale)
        if alpha:
            s = np.float32(np.float32(s * np.float32(alpha)) / np.float32(self.rank))
        return float(s)


def lora_list(adapters, scales) -> tuple:
    """((adapter, scale), ...) as llama_context::set_adapters_lora keeps them: zero scales left
    out; the order is the one in which llama.cpp's unordered_map visits them (for two adapters,
    libstdc++ visits the one inserted last first; for more the order depends on heap
    addresses in llama.cpp, pyllama keeps reverse insertion order)."""
    adapters, scales = list(adapters), list(scales)
    if len(adapters) != len(scales):
        raise ValueError("set_adapters_lora: one scale per adapter")
    out = {}
    for a, s in zip(adapters, scales):
        if not isinstance(a, LoraAdapter):
            raise TypeError(f"not a LoraAdapter: {a!r}")
        if float(s) != 0.0 and a not in out:     # unordered_map::insert keeps the first
            out[a] = float(s)
    return tuple(reversed(list(out.items())))


def load_control_vectors(items) -> tuple[int, np.ndarray]:
    """common_control_vector_load: items [(path, strength)] -> (n_embd, data [n_layers_in_files,
    n_embd] for layers 1..N, row il - 1 = layer il), each file's directions times its strength,
    summed. Raises AdapterError with llama.cpp's messages."""
    n_embd, data = -1, None
    for path, strength in items:
        ne, d = _load_cvec_one(str(path), float(strength))
        if n_embd != -1 and ne != n_embd:
            raise AdapterError(f"control vectors in {path} does not match previous dimensions")
        if n_embd == -1:
            n_embd, data = ne, d
        else:
            if d.shape[0] > data.shape[0]:
                data = np.concatenate([data, np.zeros((d.shape[0] - data.shape[0], n_embd),
                                                      np.float32)])
            data[:d.shape[0]] = (data[:d.shape[0]] + d).astype(np.float32)
    if n_embd == -1:
        raise AdapterError("no valid control vector files passed")
    return n_embd, data


def _load_cvec_one(path: str, strength: float) -> tuple[int, np.ndarray]:
    try:
        reader = GGUFReader(path)
    except GgufError as e:
        raise AdapterError(f"failed to load control vector file from {path}: {_strip(e)}") \
            from None
    n_embd, rows = -1, []
    for name, t in reader.tensors.items():
        layer = -1
        head, dot, tail = name.partition(".")
        if dot and head == "direction":
            try:
                layer = int(tail)           # std::stoi: leading digits
            except ValueError:
                digits = ""
                for ch in tail.lstrip():
                    if not ch.isdigit() and not (ch in "+-" and not digits):
                        break
                    digits += ch
                try:
                    layer = int(digits)
                except ValueError:
                    layer = -1
        if layer < 0:
            raise AdapterError(f"invalid/unparsable direction tensor layer index in {path}")
        if layer == 0:
            raise AdapterError(f"invalid (zero) direction tensor layer index in {path}")
        if t.type.name != "F32":
            raise AdapterError(f"invalid (non-F32) direction tensor type in {path}")
        if any(d != 1 for d in t.shape[:-1]):           # ggml_n_dims != 1
            raise AdapterError(f"invalid (non-1D) direction tensor shape in {path}")
        if n_embd == -1:
            n_embd = t.n_elements
        elif t.n_elements != n_embd:
            raise AdapterError(f"direction tensor in {path} does not match previous dimensions")
        rows.append((layer, np.asarray(t.data, dtype=np.float32).reshape(-1)))
    if not rows:
        log.warning(f"no direction tensors found in {path}")
        raise AdapterError(f"no valid control vector files passed ({path} has no direction "
                           "tensors)")
    n_layers = max(layer for layer, _ in rows)
    data = np.zeros((n_layers, n_embd), np.float32)
    s = np.float32(strength)
    for layer, v in rows:      # dst[j] += src[j] * strength, in f32, in file order
        data[layer - 1] = (data[layer - 1] + (v * s).astype(np.float32)).astype(np.float32)
    return n_embd, data


class ControlVector:
    """llama_adapter_cvec: per layer il (1..n_layer-1) an [n_embd] f32 vector, applied for il in
    [layer_start, layer_end]."""

    def __init__(self, model, n_embd: int, data: np.ndarray, layer_start: int, layer_end: int):
        hp = model.hparams
        if n_embd != hp.n_embd:
            raise AdapterError(f"control vector n_embd does not match model ({n_embd} vs "
                               f"{hp.n_embd})")
        self.layer_start, self.layer_end = int(layer_start), int(layer_end)
        self.tensors: list = [None] * hp.n_layer
        data = np.asarray(data, np.float32).reshape(-1, n_embd)
        for il in range(1, hp.n_layer):
            v = data[il - 1] if il - 1 < data.shape[0] else np.zeros(n_embd, np.float32)
            self.tensors[il] = np.ascontiguousarray(v)

    def tensor_for(self, il: int):
        if il < 0 or il < self.layer_start or il > self.layer_end or il >= len(self.tensors):
            return None
        return self.tensors[il]


def _strip(e: Exception) -> str:
    return str(e)
