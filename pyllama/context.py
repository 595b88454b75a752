"""Context: decode(batch) -> logits over a KV memory, as llama_context does.

Defaults follow llama.cpp's CLI and server, not llama.h: `swa_full=False` (llama.h's library
default is true). `swa_extra=N` keeps N positions beyond each sequence's window in the SWA cache so
that rolling back up to N tokens stays exact (docs/architecture.md).

`numerics` picks the arithmetic (docs/numerics.md): "invariant" (default) computes every row with
llama.cpp's prefill (n >= 8 rows) arithmetic, so results never depend on how work was batched
(docs/architecture.md); "llama.cpp" chooses kernels by each op's row count as llama.cpp's CPU
backend does (one-token decodes, Q4_K tail rows, Q6_K under 8 rows), reproducing llama.cpp's own
greedy continuations bit for bit, at the price of batch-shape dependent results (speculative
verification decodes with decode(batch, one_row=True) to equal plain decoding). CPU and ref
backends only.
`flash_attn=True` adds llama.cpp's flash-attention arithmetic to "llama.cpp" numerics (what `-fa on`
and llama.cpp's default `-fa auto` give on its CPU backend); "invariant" numerics keep their one
attention path. Either way it decides what llama.cpp's flag decides beyond arithmetic: a
quantized V cache (q8_0, q4_0) needs it (llama_init_from_model refuses `-fa off`), and state
written without it stores V transposed (llama.cpp's v_trans), as llama.cpp's does.

`kv_k_center` (None: auto, on for a quantized K cache of a model with K biases; not llama.cpp's
bytes) stores quantized K rows minus the layer's K bias (docs/kv_cache_types.md): the same logits
in exact arithmetic, much less q8_0 error on Qwen2. State written with it says so (v_trans bit 1).

`embeddings=True` (llama_context_params.embeddings / llama_set_embeddings) makes every token of a
batch an output and keeps the final-norm hidden states (llama.cpp's `result_norm`); `pooling`
("none" | "mean" | "cls" | "last" | "rank"; None: the model's `<arch>.pooling_type`, else
"none") pools them per sequence and ubatch as llama.cpp's build_pooling does. Read them with
get_embeddings_ith(i) (pooling none) and get_embeddings_seq(seq_id) (pooled). An embeddings
decode does not compute logits (llama.cpp's server never reads them from such a batch): switch
back with set_embeddings(False) to generate.
"""
from __future__ import annotations

import os
import struct

import numpy as np

from .batch import Batch, validate
from .errors import ContextError
from .graph import Graph
from .hparams import with_rope_cparams
from .kv import KVLayout, ctx_geometry, make_memory
from .kv.cache import DTYPES as KV_CACHE_TYPES
from .kv.cache import QUANTIZED as KV_QUANTIZED
from .log import get_logger
from .replay import DecodeReplay

log = get_logger("context")
_REPLAY_MAX_TOKENS = 16     # ubatches replayed: decode steps of up to this many sequences


class Context:
    def __init__(self, model, n_ctx: int = 4096, n_batch: int = 2048, n_ubatch: int = 512,
                 n_seq_max: int = 1, swa_full: bool = False, swa_extra: int = 0,
                 kv_unified: bool = False, type_k: str = "f16", type_v: str = "f16",
                 n_threads: int | None = None, numerics: str = "invariant",
                 kv_k_center: bool | None = None, flash_attn: bool = False,
                 rope: dict | None = None, embeddings: bool = False,
                 pooling: str | None = None, lora_adapters=(), lora_apply: bool = True,
                 control_vectors=(), control_vector_layer_range=(0, 0)):
        hp = model.hparams
        if n_ctx == 0:
            n_ctx = hp.n_ctx_train
        if n_ctx < 0 or n_batch <= 0 or n_ubatch <= 0 or n_seq_max <= 0 or swa_extra < 0:
            raise ContextError("n_ctx, n_batch, n_ubatch, n_seq_max must be positive "
                               "and swa_extra >= 0")
        if type_k not in KV_CACHE_TYPES or type_v not in KV_CACHE_TYPES:
            raise ContextError(f"unsupported KV cache type {type_k}/{type_v} "
                               f"({', '.join(KV_CACHE_TYPES)})")
        if hp.is_mla and type_k != type_v:     # llama_init_from_model: V is a view of K
            raise ContextError(f"model does not support different K ({type_k}) and V ({type_v}) "
                               "cache types")
        if type_v in KV_QUANTIZED and not flash_attn:   # llama_init_from_model (-fa auto: on)
            raise ContextError("quantized V cache requires flash_attn to be enabled")
        _check_block_heads(hp, type_k, type_v)
        _check_numerics(numerics, model.backend)
        self.numerics = numerics
        self.flash_attn = bool(flash_attn)
        self.model = model
        self.backend = model.backend
        if n_threads is not None:
            self.backend.set_threads(n_threads)
        self.n_ubatch = min(n_ubatch, n_batch)
        self.n_batch = n_batch
        self.n_seq_max = n_seq_max
        self.swa_full, self.swa_extra, self.kv_unified = swa_full, swa_extra, kv_unified
        layout = KVLayout(n_embd_k_gqa=[hp.n_embd_k_gqa] * hp.n_layer,
                          n_embd_v_gqa=[hp.n_embd_v_gqa] * hp.n_layer,
                          n_head_kv=[hp.n_head_kv] * hp.n_layer, is_swa=list(hp.is_swa),
                          swa_type=hp.swa_type, n_swa=hp.n_swa,
                          k_center=_k_centers(model, hp, type_k, kv_k_center),
                          v_in_k=hp.is_mla, v_trans=not self.flash_attn,
                          rope_offset=hp.n_embd_head_k - hp.n_rot if hp.n_lora_kv > 0 else 0)
        self.n_ctx, self.n_ctx_seq, _ = ctx_geometry(n_ctx, n_seq_max, kv_unified)
        # llama_context's RoPE cparams (rope: rope_scaling_type, rope_freq_base, rope_freq_scale,
        # yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow, yarn_orig_ctx)
        self.hp = hp = with_rope_cparams(hp, self.n_ctx_seq, **(rope or {}))
        self.memory = make_memory(layout, n_ctx=n_ctx, n_seq_max=n_seq_max,
                                  n_ubatch=self.n_ubatch, kv_unified=kv_unified,
                                  swa_full=swa_full, swa_extra=swa_extra, type_k=type_k,
                                  type_v=type_v, alloc=self.backend.alloc_kv, rope=self._rope_k)
        self._logits = np.zeros((0, hp.n_vocab), dtype=np.float32)
        self._out_row = np.full(0, -1, dtype=np.int64)   # batch index -> row in _logits
        self._n_outputs = 0
        self.embeddings = bool(embeddings)
        self.pooling = _pooling_type(model, pooling)
        self._cls_head = _cls_head(model) if self.pooling == "rank" else None
        self._embd = np.zeros((0, hp.n_embd), dtype=np.float32)
        self._embd_seq: dict[int, np.ndarray] = {}
        self._logits_ok = True
        self.loras: tuple = ()          # ((LoraAdapter, scale), ...) applied by every decode
        self.cvec = None                # ControlVector (llama_adapter_cvec) or None
        self._init_adapters(lora_adapters, lora_apply, control_vectors,
                            control_vector_layer_range)
        # decode steps replayed as a compiled sequence of backend calls (PYLLAMA_REPLAY=0:
        # always the architecture's forward; the logits are the same bits either way)
        self._replay = (DecodeReplay(self.backend, self.memory, self._forward, hp.n_layer)
                        if os.environ.get("PYLLAMA_REPLAY", "1") != "0" else None)

    def _init_adapters(self, lora_adapters, lora_apply, control_vectors, layer_range) -> None:
        """common_init_from_params: load the LoRA adapters [(path or LoraAdapter, scale)]
        (kept in `lora_adapters`, in order: the server's adapter ids), add the control vectors
        [(path, strength)] summed on layers layer_range (start <= 0: 1, end <= 0: n_layer),
        then apply the adapters with their scales unless lora_apply is False
        (--lora-init-without-apply). A bad file raises AdapterError (llama.cpp logs it and
        goes on without adapters; pyllama stops)."""
        from .adapter import LoraAdapter, load_control_vectors
        self.lora_adapters = []
        for item, scale in lora_adapters:
            a = item if isinstance(item, LoraAdapter) else LoraAdapter(self.model, item)
            self.lora_adapters.append((a, float(scale)))
        if control_vectors:
            start, end = layer_range
            start = 1 if start <= 0 else start
            end = self.hp.n_layer if end <= 0 else end
            n_embd, data = load_control_vectors(control_vectors)
            self.set_adapter_cvec(data, n_embd, start, end)
        if lora_apply and self.lora_adapters:
            self.set_adapters_lora([a for a, _ in self.lora_adapters],
                                   [s for _, s in self.lora_adapters])

    # -- adapters (llama.h: llama_set_adapters_lora, llama_set_adapter_cvec) ---------------
    def set_adapters_lora(self, adapters=(), scales=()) -> None:
        """llama_set_adapters_lora: the LoRA adapters (pyllama.LoraAdapter of this context's
        model) and their scales every following decode applies; a zero scale leaves the adapter
        out; no adapters (the default) detaches them all. The KV cache is not touched (as in
        llama.cpp): clear it when cached tokens should be recomputed with the new set."""
        from .adapter import lora_list
        for a in adapters:
            if getattr(a, "model", None) is not self.model:
                raise ContextError("set_adapters_lora: the adapter was loaded for another model")
        self.loras = lora_list(adapters, scales)

    def set_adapter_cvec(self, data, n_embd: int = 0, il_start: int = -1,
                         il_end: int = -1) -> None:
        """llama_set_adapter_cvec: data [n_layers x n_embd] f32 starting at layer 1 (None
        clears the control vector), applied to the output of layers il_start..il_end
        (inclusive). Raises AdapterError when n_embd is not the model's."""
        from .adapter import ControlVector
        if data is None:
            self.cvec = None
            return
        self.cvec = ControlVector(self.model, n_embd, data, il_start, il_end)

    def set_embeddings(self, value: bool) -> None:
        """llama_set_embeddings: the next decodes compute embeddings (True) or logits (False)."""
        self.embeddings = bool(value)

    def _rope_k(self, k: np.ndarray, delta: np.ndarray, il: int) -> np.ndarray:
        """K-shift: rotate cached K rows [m, n_head_kv, head_dim] by delta positions."""
        return self.backend.rope(k, delta, **self.hp.rope_args(il))

    # -- decode -----------------------------------------------------------------------------
    def decode(self, batch: Batch, one_row: bool = False) -> int:
        """llama_decode: 0 ok, 1 no memory slot (memory unchanged), -1 invalid batch. one_row
        (numerics "llama.cpp"; speculative verification): every token computed with the
        arithmetic its own one-token decode would use, so the logits equal consecutive
        one-token decodes' bit for bit (no effect in the invariant numerics)."""
        if batch.n_tokens == 0:
            log.error("decode: n_tokens == 0")
            return -1
        if batch.n_tokens > self.n_batch:
            log.error(f"decode: n_tokens = {batch.n_tokens} > n_batch = {self.n_batch}")
            return -1
        rc, reason = validate(batch, self.hp.n_vocab, self.n_seq_max, self.memory)
        if rc != 0:
            log.error(f"decode: invalid batch: {reason}")
            return rc
        if self.embeddings:       # llama.cpp: when computing embeddings, all tokens are output
            batch = Batch(batch.tokens, pos=batch.pos, seq_ids=batch.seq_ids,
                          logits=np.ones(batch.n_tokens, bool))
        self.memory.update()
        ubatches = (self.memory.init_batch(batch, self.n_ubatch, one_row=True) if one_row else
                    self.memory.init_batch(batch, self.n_ubatch))
        if ubatches is None:
            log.warning("decode: failed to find a memory slot for a batch of "
                        f"{batch.n_tokens} tokens")
            return 1
        self._reserve_outputs(batch)
        for ub in ubatches:
            self._decode_ubatch(ub, one_row)
        return 0

    def _reserve_outputs(self, batch: Batch) -> None:
        n_out = int(np.count_nonzero(batch.logits))
        self._logits_ok = not self.embeddings
        self._embd_seq = {}
        if self.embeddings:
            if self.pooling == "none" and self._embd.shape[0] < n_out:
                self._embd = np.empty((n_out, self.hp.n_embd), dtype=np.float32)
        elif self._logits.shape[0] < n_out:
            self._logits = np.empty((n_out, self.hp.n_vocab), dtype=np.float32)
        out_row = np.full(batch.n_tokens, -1, dtype=np.int64)
        out_row[np.flatnonzero(batch.logits)] = np.arange(n_out)
        self._out_row, self._n_outputs = out_row, n_out

    def _decode_ubatch(self, ub, one_row: bool = False) -> None:
        out_local = np.flatnonzero(ub.output).astype(np.int32)

        def graph(be):
            return Graph(be, self.hp, self.memory, ub, out_local, self.numerics,
                         self.flash_attn, want_logits=not self.embeddings, loras=self.loras,
                         cvec=self.cvec, one_row=one_row)
        if (self._replay is not None and ub.n_tokens <= _REPLAY_MAX_TOKENS
                and len(out_local) == ub.n_tokens and not one_row and not self.embeddings
                and not self.loras and self.cvec is None):
            # a decode step (one token per sequence, every row an output): its backend calls
            # replayed without the architecture code (pyllama/replay.py; recorded, compiled and
            # checked on the first decodes of each shape)
            logits = self._replay.run((ub.n_tokens, len(out_local)), graph, ub)
        else:
            g = graph(self.backend)
            logits = self.model.arch.forward(g, self.model.weights, self.hp)
        if not len(out_local):
            return
        rows = self._out_row[np.asarray(ub.idx)[out_local]]
        if not self.embeddings:
            self._logits[rows] = logits
        elif self.pooling == "none":
            self._embd[rows] = g.embd
        else:
            self._embd_seq.update(self._pool(ub, np.asarray(g.embd, dtype=np.float32)))

    def _forward(self, g):
        return self.model.arch.forward(g, self.model.weights, self.hp), g

    def _pool(self, ub, x: np.ndarray) -> dict:
        """llama.cpp build_pooling over one ubatch: x [n_tokens, n_embd] (every row an output)
        -> {seq_id: pooled vector} (rank: the classification head's scores)."""
        rows: dict[int, list[int]] = {}
        for i, ids in enumerate(ub.seq_ids):
            for s in ids:
                rows.setdefault(s, []).append(i)
        last = self.pooling == "last" or self.pooling == "rank"   # causal rankers read the last
        out = {}
        for s, idx in rows.items():
            if self.pooling == "mean":
                w = np.full(len(idx), np.float32(1.0) / np.float32(len(idx)), np.float32)
                out[s] = np.dot(w, x[idx]).astype(np.float32)
                continue
            pos = ub.pos[idx]
            # llama_graph_input_cls: the first (cls) or last (>=) position of the sequence
            k = int(np.flatnonzero(pos == pos.max())[-1]) if last else int(np.argmin(pos))
            v = x[idx[k]]
            out[s] = self._rank(v) if self.pooling == "rank" else v.copy()
        return out

    def _rank(self, v: np.ndarray) -> np.ndarray:
        """The classification head of rank pooling: cls (tanh) then cls_out where the model has
        them, softmax for qwen3."""
        head = self._cls_head
        be = self.backend
        x = v.reshape(1, -1)
        if head["cls"] is not None:
            x = np.tanh(be.add(be.matmul(head["cls"], x), be.vec(head["cls_b"]))
                        if head["cls_b"] is not None else be.matmul(head["cls"], x))
        if head["cls_out"] is not None:
            x = be.matmul(head["cls_out"], x)
            if head["cls_out_b"] is not None:
                x = be.add(x, be.vec(head["cls_out_b"]))
        x = np.asarray(x, dtype=np.float32).reshape(-1)
        if self.model.arch.name == "qwen3":
            e = np.exp(x - x.max())
            x = (e / e.sum()).astype(np.float32)
        return x

    # -- outputs ----------------------------------------------------------------------------
    def _output_row(self, i: int, what: str) -> int:
        if i < 0:
            j = self._n_outputs + i
            if j < 0:
                raise IndexError(f"{what} index {i} out of range ({self._n_outputs} outputs)")
            return j
        if i >= len(self._out_row) or self._out_row[i] < 0:
            raise IndexError(f"token {i} of the last batch has no {what} (not flagged as output)")
        return int(self._out_row[i])

    def _check_logits(self) -> None:
        if not self._logits_ok:
            raise ContextError("the last decode computed embeddings (embeddings=True), not "
                               "logits: call set_embeddings(False) before decoding for logits")

    def get_logits_ith(self, i: int) -> np.ndarray:
        """Logits of batch index i of the last decode (negative i: from the last output)."""
        self._check_logits()
        return self._logits[self._output_row(i, "logits")]

    def get_logits(self) -> np.ndarray:
        """[n_outputs, n_vocab] logits of the last decode, in batch order."""
        self._check_logits()
        return self._logits[:self._n_outputs]

    def get_embeddings_ith(self, i: int) -> np.ndarray:
        """llama_get_embeddings_ith: the [n_embd] embedding of batch index i of the last decode
        (pooling "none"; negative i: from the last output)."""
        if self._logits_ok or self.pooling != "none":
            raise ContextError("token embeddings need embeddings=True and pooling 'none' "
                               f"(pooling is {self.pooling!r}: use get_embeddings_seq)")
        return self._embd[self._output_row(i, "embeddings")]

    def get_embeddings(self) -> np.ndarray:
        """llama_get_embeddings: [n_outputs, n_embd] token embeddings of the last decode."""
        if self._logits_ok or self.pooling != "none":
            raise ContextError("token embeddings need embeddings=True and pooling 'none'")
        return self._embd[:self._n_outputs]

    def get_embeddings_seq(self, seq_id: int) -> np.ndarray | None:
        """llama_get_embeddings_seq: the pooled embedding of seq_id in the last decode ([n_embd];
        rank pooling: the [n_cls_out] scores); None with pooling "none" or an absent sequence
        (llama.h's NULL)."""
        if self.pooling == "none":
            return None
        return self._embd_seq.get(seq_id)

    # -- convenience ------------------------------------------------------------------------
    def eval(self, tokens, seq_id: int = 0, logits_all: bool = False) -> np.ndarray:
        """Decode tokens after what seq_id already holds; [n_tokens or 1, n_vocab] logits."""
        tokens = np.asarray(tokens, dtype=np.int32)
        if tokens.size == 0:
            raise ContextError("eval: no tokens")
        start = self.memory.seq_pos_max(seq_id) + 1
        outs = []
        for b0 in range(0, len(tokens), self.n_batch):
            chunk = tokens[b0:b0 + self.n_batch]
            last = b0 + len(chunk) == len(tokens)
            flags = np.ones(len(chunk), bool) if logits_all else np.zeros(len(chunk), bool)
            if last:
                flags[-1] = True
            pos = np.arange(start + b0, start + b0 + len(chunk), dtype=np.int32)
            rc = self.decode(Batch(chunk, pos=pos, seq_ids=[seq_id] * len(chunk), logits=flags))
            if rc != 0:
                raise ContextError(f"eval: decode failed with code {rc}")
            if logits_all or last:
                outs.append(self.get_logits().copy())
        return np.concatenate(outs) if logits_all else outs[-1][-1:]

    # -- memory / state ---------------------------------------------------------------------
    def memory_breakdown(self) -> dict:
        return self.memory.memory_breakdown()

    def state_seq_get(self, seq_id: int, flags: int = 0) -> bytes:
        return self.memory.state_write(seq_id, flags)

    def state_seq_set(self, data: bytes, seq_id: int, flags: int = 0) -> int:
        """Restore a state written by state_seq_get; returns the number of bytes it used."""
        return self.memory.state_read(data, seq_id, flags)


    # -- session files (llama_state_save_file / llama_state_load_file) ---------------------------
    def state_save_file(self, path: str, tokens) -> int:
        """llama.cpp's session file: u32 'ggsn' magic, u32 version 10, u32 token count, the
        tokens (i32), then llama_context::state_write_data: the architecture name (u32 length,
        bytes) and the whole memory's state. Returns the bytes written."""
        data = session_bytes(self.model.arch_name, tokens, self.memory.state_write(-1))
        with open(path, "wb") as f:
            f.write(data)
        return len(data)

    def state_load_file(self, path: str, n_token_capacity: int) -> list[int]:
        """Restore a session file written by state_save_file or llama.cpp; returns its tokens.
        Raises ContextError with llama.cpp's reason (bad magic/version, more tokens than
        n_token_capacity, another architecture, state not consumed exactly)."""
        with open(path, "rb") as f:
            data = f.read()
        if len(data) < 12:
            raise ContextError(f"session file is too short ({len(data)} bytes)")
        magic, version, n = struct.unpack_from("<III", data)
        if magic != SESSION_MAGIC or version != SESSION_VERSION:
            raise ContextError(f"unknown (magic, version) for session file: {magic:08x}, "
                               f"{version:08x}")
        if n > n_token_capacity:
            raise ContextError(f"token count in session file exceeded capacity! {n} > "
                               f"{n_token_capacity}")
        if 12 + 4 * n + 4 > len(data):
            raise ContextError("session file is truncated")
        tokens = np.frombuffer(data, np.int32, n, 12).tolist()
        off = 12 + 4 * n
        (n_arch,) = struct.unpack_from("<I", data, off)
        arch = bytes(data[off + 4:off + 4 + n_arch]).decode("utf-8", "replace")
        if arch != self.model.arch_name:
            raise ContextError(f"error loading session file: wrong model arch: '{arch}' "
                               f"instead of '{self.model.arch_name}'")
        state = data[off + 4 + n_arch:]
        try:
            used = self.memory.state_read(state, -1)
        except (ContextError, struct.error, ValueError, IndexError) as e:
            self.memory.clear()
            raise ContextError(f"error loading session file: {e}") from None
        if used != len(state):
            self.memory.clear()
            raise ContextError("did not read all of the session file data! size "
                               f"{len(state) + 4 + n_arch}, got {used + 4 + n_arch}")
        if n and (min(tokens) < 0 or max(tokens) >= self.hp.n_vocab):
            self.memory.clear()
            raise ContextError("session file holds token ids outside the vocabulary")
        return tokens


SESSION_MAGIC, SESSION_VERSION = 0x6767736E, 10      # LLAMA_SESSION_MAGIC ('ggsn'), _VERSION


def session_bytes(arch: str, tokens, state: bytes) -> bytes:
    a = arch.encode()
    return (struct.pack("<III", SESSION_MAGIC, SESSION_VERSION, len(tokens)) +
            np.asarray(tokens, np.int32).tobytes() + struct.pack("<I", len(a)) + a + state)


NUMERICS = ("invariant", "llama.cpp")
# llama_pooling_type values (llama.h): UNSPECIFIED = -1, NONE, MEAN, CLS, LAST, RANK
POOLING_TYPES = ("none", "mean", "cls", "last", "rank")


def _pooling_type(model, pooling: str | None) -> str:
    """The pooling of a context: the one asked for, else the model's `<arch>.pooling_type`."""
    if pooling is None or pooling == "unspecified":
        value = model.metadata.get(f"{model.arch.name}.pooling_type", -1)
        try:
            value = int(value)
        except (ValueError, TypeError):
            value = -1
        return POOLING_TYPES[value] if 0 <= value < len(POOLING_TYPES) else "none"
    if pooling not in POOLING_TYPES:
        raise ContextError(f"unknown pooling type {pooling!r} ({', '.join(POOLING_TYPES)})")
    return pooling


def _cls_head(model) -> dict:
    """The classification head of rank pooling (cls, cls_out and their biases, each optional:
    a model without any ranks by its pooled hidden state, as llama.cpp's build_pooling does)."""
    w = model.weights
    names = {"cls": "cls", "cls_b": "cls_b", "cls_out": "cls.output", "cls_out_b": "cls.output_b"}
    return {k: w.__dict__.get(name) for k, name in names.items()}


def _check_numerics(numerics: str, backend) -> None:
    if numerics not in NUMERICS:
        raise ContextError(f"numerics must be one of {', '.join(NUMERICS)} (got {numerics!r})")
    if numerics == "llama.cpp" and backend.name not in ("cpu", "ref"):
        raise ContextError(f"numerics='llama.cpp' needs the cpu or ref backend "
                           f"(not {backend.name})")


def _k_centers(model, hp, type_k: str, want: bool | None) -> dict:
    """kv_k_center: {il: attn_k.bias}, taken off every K row a quantized K cache stores
    (docs/kv_cache_types.md). Exact only without an attention softcap. None (auto): on for a
    quantized K cache of a model with K biases and no softcap (Qwen2: q8_0 perplexity +3.2% ->
    -0.35% vs f16; llama.cpp itself +3.6%), else off."""
    softcap = hp.f_attn_logit_softcapping > 0
    if want and softcap:
        raise ContextError("kv_k_center needs attention without a logit softcap")
    if hp.is_mla:         # V is a view of K: nothing may be taken off K (and attn_k_b is MLA's)
        if want:
            raise ContextError("kv_k_center is not available for MLA models (V is read from K)")
        return {}
    if want is False or (want is None and (softcap or type_k not in ("q8_0", "q4_0"))):
        return {}
    return {il: np.asarray(L.attn_k_b.raw, dtype=np.float32)
            for il, L in enumerate(model.weights.layers) if L.attn_k_b is not None}


def _check_block_heads(hp, type_k: str, type_v: str) -> None:
    """Block KV types (q8_0, q4_0) need head sizes that are multiples of 32, as in llama.cpp."""
    for name, t, d in (("K", type_k, hp.n_embd_head_k), ("V", type_v, hp.n_embd_head_v)):
        if t in ("q8_0", "q4_0") and d % 32:
            raise ContextError(f"{name} cache type {t} needs a head size that is a multiple "
                               f"of 32 (got {d})")
