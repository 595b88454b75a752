"""`Llama`: llama-cpp-python 0.3.36's high-level class (llama_cpp/llama.py) on pyllama.

Same constructor arguments, methods, defaults and return shapes (OpenAI-style dicts and stream
chunks), and the same behaviour where it shows in results: the sampler chain of
llama-cpp-python (_sampler.py, new for every generate(), seeded as it seeds it: a completion
without `seed` uses random.Random(previous seed).randint(0, 2**32)), the same decode batches
(the prompt in n_batch chunks, then one token at a time; prefix reuse of the evaluated tokens;
draft tokens verified in one batch), so with numerics="llama.cpp" (the default here) the logits,
and therefore greedy and seeded outputs, are llama-cpp-python's. pyllama's own additions:
`numerics` and `swa_extra` (pyllama.Context). docs/llama_cpp_python.md lists what is not
supported (each raises one clear error).
"""
from __future__ import annotations

import fnmatch
import os
import random
import sys
import time
import uuid
import warnings
import weakref
from collections import deque
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from .. import models as _models
from ..batch import Batch
from ..errors import PyllamaError
from . import llama_chat_format
from ._sampler import LlamaSampler
from .llama_cache import BaseLlamaCache
from .llama_grammar import LlamaGrammar

LLAMA_DEFAULT_SEED = 0xFFFFFFFF
# ggml type ids (ggml.h) of the KV cache types pyllama has, for type_k / type_v
GGML_KV_TYPES = {0: "f32", 1: "f16", 2: "q4_0", 8: "q8_0", 30: "bf16"}
LLAMA_POOLING_TYPE_UNSPECIFIED, LLAMA_POOLING_TYPE_NONE = -1, 0
LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED = -1
LLAMA_MAX_SEQ = 256                 # llama_max_parallel_sequences()
ROPE_SCALING_NAMES = {None: None, -1: None, 0: "none", 1: "linear", 2: "yarn", 3: "longrope"}
POOLING_NAMES = {-1: None, 0: "none", 1: "mean", 2: "cls", 3: "last", 4: "rank"}


class LlamaState:
    def __init__(self, input_ids, scores, n_tokens: int, llama_state: bytes,
                 llama_state_size: int, seed: int):
        self.input_ids, self.scores, self.n_tokens = input_ids, scores, n_tokens
        self.llama_state, self.llama_state_size, self.seed = llama_state, llama_state_size, seed


LogitsProcessor = Callable[[np.ndarray, np.ndarray], np.ndarray]
StoppingCriteria = Callable[[np.ndarray, np.ndarray], bool]


class LogitsProcessorList(List[LogitsProcessor]):
    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


class StoppingCriteriaList(List[StoppingCriteria]):
    def __call__(self, input_ids: np.ndarray, logits: np.ndarray) -> bool:
        return any([c(input_ids, logits) for c in self])


class MinTokensLogitsProcessor:
    def __init__(self, min_tokens: int, token_eos: int):
        self.min_tokens, self.token_eos = min_tokens, token_eos
        self.prompt_tokens = None

    def __call__(self, input_ids: np.ndarray, scores: np.ndarray) -> np.ndarray:
        if self.prompt_tokens is None:
            self.prompt_tokens = len(input_ids)
        if len(input_ids) - self.prompt_tokens < self.min_tokens:
            scores[self.token_eos] = -np.inf
        return scores


class BaseLlamaTokenizer:
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        raise NotImplementedError

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None,
                   special: bool = False) -> bytes:
        raise NotImplementedError


class LlamaTokenizer(BaseLlamaTokenizer):
    """The model's own tokenizer, as llama-cpp-python's LlamaTokenizer uses llama.cpp's."""

    def __init__(self, llama: "Llama"):
        self._vocab = llama._model.vocab

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        return self._vocab.tokenize(text, add_special=add_bos, parse_special=special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None,
                   special: bool = False) -> bytes:
        v = self._vocab
        out = b"".join(v.token_to_piece(int(t), special) for t in tokens)
        # llama-cpp-python drops the space a first BOS-led piece starts with
        if len(tokens) > 0 and tokens[0] == v.bos and out[:1] == b" ":
            return out[1:]
        return out

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> List[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos,
                             special=special)

    def decode(self, tokens: List[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")


class Llama:
    """High-level Python wrapper for a GGUF model (llama-cpp-python's API)."""

    def __init__(
        self,
        model_path: str,
        *,
        n_gpu_layers: int = 0,
        split_mode: int = 1,
        main_gpu: int = 0,
        tensor_split: Optional[List[float]] = None,
        vocab_only: bool = False,
        use_mmap: bool = True,
        use_mlock: bool = False,
        kv_overrides: Optional[Dict[str, Union[bool, int, float, str]]] = None,
        seed: int = LLAMA_DEFAULT_SEED,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_ubatch: int = 512,
        n_threads: Optional[int] = None,
        n_threads_batch: Optional[int] = None,
        rope_scaling_type: Optional[int] = LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
        pooling_type: int = LLAMA_POOLING_TYPE_UNSPECIFIED,
        attention_type: int = -1,
        rope_freq_base: float = 0.0,
        rope_freq_scale: float = 0.0,
        yarn_ext_factor: float = -1.0,
        yarn_attn_factor: float = 1.0,
        yarn_beta_fast: float = 32.0,
        yarn_beta_slow: float = 1.0,
        yarn_orig_ctx: int = 0,
        logits_all: bool = False,
        embedding: bool = False,
        offload_kqv: bool = True,
        flash_attn: bool = False,
        op_offload: Optional[bool] = None,
        swa_full: Optional[bool] = None,
        no_perf: bool = False,
        last_n_tokens_size: int = 64,
        lora_base: Optional[str] = None,
        lora_scale: float = 1.0,
        lora_path: Optional[str] = None,
        numa: Union[bool, int] = False,
        chat_format: Optional[str] = None,
        chat_handler=None,
        draft_model=None,
        tokenizer: Optional[BaseLlamaTokenizer] = None,
        type_k: Optional[int] = None,
        type_v: Optional[int] = None,
        spm_infill: bool = False,
        verbose: bool = True,
        # pyllama's own
        numerics: str = "llama.cpp",
        swa_extra: int = 0,
        **kwargs,
    ):
        self.verbose = verbose
        self.model_path = model_path
        self.numa = numa
        self.tensor_split = tensor_split
        self.kv_overrides = kv_overrides
        self.lora_base, self.lora_scale, self.lora_path = lora_base, lora_scale, lora_path
        self.spm_infill = spm_infill
        self.last_n_tokens_size = last_n_tokens_size
        self.cache: Optional[BaseLlamaCache] = None
        _refuse(kv_overrides=kv_overrides is not None,
                attention_type=attention_type not in (-1, 1))
        if rope_scaling_type not in ROPE_SCALING_NAMES:
            raise PyllamaError(f"Llama: unknown rope_scaling_type {rope_scaling_type}")

        path = os.fspath(model_path)
        if not os.path.exists(path) and path in _models.BUNDLED:
            path = _models.resolve(path)        # pyllama's bundled model names work too
        if not os.path.exists(path):
            raise ValueError(f"Model path does not exist: {model_path}")
        self._model = _shared_model(path, vocab_only)
        self.tokenizer_ = tokenizer or LlamaTokenizer(self)

        self.n_batch = min(n_ctx, n_batch)
        self.n_threads = n_threads or max(os.cpu_count() // 2, 1)
        self.n_threads_batch = n_threads_batch or os.cpu_count()
        self._seed = seed or LLAMA_DEFAULT_SEED
        self._logits_all = logits_all if draft_model is None else True
        hp = self._model.hparams
        if n_ctx == 0:
            n_ctx = hp.n_ctx_train
            self.n_batch = min(n_ctx, n_batch)
        self.n_ubatch = min(self.n_batch, n_ubatch)
        self._swa_full = True if swa_full is None else bool(swa_full)   # llama.h's default
        self._flash_attn = bool(flash_attn)
        self._type_k, self._type_v = _kv_type(type_k), _kv_type(type_v)
        self._numerics, self._swa_extra = numerics, swa_extra
        self._init_args = dict(locals_copy(locals()), kwargs=kwargs)
        self._embedding = bool(embedding)
        self._n_seq_max = min(self.n_batch, LLAMA_MAX_SEQ) if embedding else 1
        self._ctx = None
        if not vocab_only:
            from ..context import Context
            # llama_context's RoPE/YaRN parameters, as llama-cpp-python passes them
            rope = dict(rope_scaling_type=ROPE_SCALING_NAMES[rope_scaling_type],
                        rope_freq_base=rope_freq_base, rope_freq_scale=rope_freq_scale,
                        yarn_ext_factor=yarn_ext_factor, yarn_attn_factor=yarn_attn_factor,
                        yarn_beta_fast=yarn_beta_fast, yarn_beta_slow=yarn_beta_slow,
                        yarn_orig_ctx=yarn_orig_ctx)
            threads = n_threads_batch or n_threads
            self._ctx = Context(self._model, n_ctx=n_ctx, n_batch=self.n_batch,
                                n_ubatch=self.n_ubatch, n_seq_max=self._n_seq_max,
                                kv_unified=bool(embedding), swa_full=self._swa_full,
                                swa_extra=swa_extra, type_k=self._type_k, type_v=self._type_v,
                                n_threads=threads, numerics=numerics,
                                flash_attn=self._flash_attn, rope=rope, embeddings=embedding,
                                pooling=POOLING_NAMES.get(pooling_type))
            if lora_path:       # llama_adapter_lora_init + llama_set_adapters_lora(scale)
                from ..adapter import AdapterError, LoraAdapter
                try:
                    adapter = LoraAdapter(self._model, os.fspath(lora_path))
                except AdapterError as e:
                    raise RuntimeError(f"Failed to initialize LoRA adapter from lora path: "
                                       f"{lora_path} ({e})") from None
                self._ctx.set_adapters_lora([adapter], [lora_scale])
        self._n_ctx_value = self._ctx.n_ctx if self._ctx is not None else n_ctx

        self.metadata = _metadata_strings(self._model.metadata)
        self.chat_format = chat_format
        self.chat_handler = chat_handler
        self._chat_handlers: Dict[str, Any] = {}
        self.draft_model = draft_model
        self._n_vocab = self.n_vocab()
        self._n_ctx = self.n_ctx()
        self._token_nl = self.token_nl()
        self._token_eos = self.token_eos()
        self.n_tokens = 0
        self._requires_eval = True
        # (sized for the context's padded n_ctx, and for logits of every token whenever they
        # are kept: llama-cpp-python sizes them by the n_ctx and logits_all arguments)
        n_rows = max(n_ctx, self._n_ctx)
        self.input_ids = np.zeros((n_rows,), dtype=np.intc)
        self.scores = np.zeros((n_rows if self._logits_all else self.n_batch, self._n_vocab),
                               dtype=np.single)
        self._sampler: Optional[LlamaSampler] = None
        self._setup_chat_formats()

    # -- chat formats -----------------------------------------------------------------------------
    def _setup_chat_formats(self) -> None:
        eos_id, bos_id = self.token_eos(), self.token_bos()
        v = self._model.vocab
        eos = v.token_text(eos_id) if eos_id != -1 else ""
        bos = v.token_text(bos_id) if bos_id != -1 else ""
        choices = {name[10:]: t for name, t in self.metadata.items()
                   if name.startswith("tokenizer.chat_template.")}
        if "tokenizer.chat_template" in self.metadata:
            choices["chat_template.default"] = self.metadata["tokenizer.chat_template"]
        for name, template in choices.items():
            self._chat_handlers[name] = llama_chat_format.Jinja2ChatFormatter(
                template=template, eos_token=eos, bos_token=bos,
                stop_token_ids=[eos_id]).to_chat_handler()
        if self.chat_format is None and self.chat_handler is None and \
                "chat_template.default" in choices:
            guess = llama_chat_format.guess_chat_format_from_gguf_metadata(self.metadata)
            self.chat_format = guess if guess is not None else "chat_template.default"
            if self.verbose:
                print(f"Using chat format: {self.chat_format}", file=sys.stderr)
        if self.chat_format is None and self.chat_handler is None:
            self.chat_format = "llama-2"

    # -- properties -------------------------------------------------------------------------------
    @property
    def ctx(self):
        return self._ctx

    @property
    def model(self):
        return self._model

    @property
    def _input_ids(self) -> np.ndarray:
        return self.input_ids[:self.n_tokens]

    @property
    def _scores(self) -> np.ndarray:
        return self.scores[:self.n_tokens, :]

    @property
    def eval_tokens(self) -> deque:
        return deque(self.input_ids[:self.n_tokens].tolist(), maxlen=self._n_ctx)

    @property
    def eval_logits(self) -> deque:
        return deque(self.scores[:self.n_tokens, :].tolist(),
                     maxlen=self._n_ctx if self._logits_all else 1)

    # -- text ---------------------------------------------------------------------------------------
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        return self.tokenizer_.tokenize(text, add_bos, special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None,
                   special: bool = False) -> bytes:
        return self.tokenizer_.detokenize(tokens, prev_tokens=prev_tokens, special=special)

    def set_cache(self, cache: Optional[BaseLlamaCache]):
        self.cache = cache

    def set_seed(self, seed: int):
        self._seed = seed

    def reset(self):
        self.n_tokens = 0
        self._requires_eval = True

    # -- evaluation ---------------------------------------------------------------------------------
    def _need_ctx(self):
        if self._ctx is None:
            raise RuntimeError("this Llama was loaded with vocab_only=True: no context")
        return self._ctx

    def eval(self, tokens: Sequence[int]):
        """Decode tokens after the first n_tokens (what the cache holds past them is dropped),
        in n_batch chunks; with logits_all the logits of every token go to `scores`."""
        ctx = self._need_ctx()
        if self._embedding:
            ctx.set_embeddings(False)
        ctx.memory.seq_rm(-1, self.n_tokens, -1)
        tokens = list(tokens)
        for i in range(0, len(tokens), self.n_batch):
            chunk = tokens[i:i + self.n_batch]
            n_past, n = self.n_tokens, len(chunk)
            flags = np.full(n, self._logits_all, dtype=bool)
            flags[-1] = True
            rc = ctx.decode(Batch(chunk, pos=np.arange(n_past, n_past + n, dtype=np.int32),
                                  seq_ids=[0] * n, logits=flags))
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            self.input_ids[n_past:n_past + n] = chunk
            if self._logits_all:
                self.scores[n_past:n_past + n, :] = ctx.get_logits()
            self.n_tokens += n
            self._requires_eval = False

    def _init_sampler(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                      typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0,
                      frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                      tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_eta: float = 0.1,
                      mirostat_tau: float = 5.0, penalize_nl: bool = True,
                      logits_processor=None, grammar: Optional[LlamaGrammar] = None):
        matcher = grammar.matcher(self._model.vocab) if grammar is not None else None
        return LlamaSampler(
            self._n_vocab, self._seed, top_k=top_k, top_p=top_p, min_p=min_p,
            typical_p=typical_p, temp=temp, repeat_penalty=repeat_penalty,
            frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            mirostat_mode=mirostat_mode, mirostat_eta=mirostat_eta, mirostat_tau=mirostat_tau,
            penalty_last_n=self.last_n_tokens_size, logits_processor=logits_processor,
            input_ids=lambda: self._input_ids, grammar=matcher)

    def sample(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
               typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0,
               frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
               tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_eta: float = 0.1,
               mirostat_tau: float = 5.0, penalize_nl: bool = True, logits_processor=None,
               grammar: Optional[LlamaGrammar] = None, idx: Optional[int] = None):
        """Sample a token from the logits of evaluated position idx (default: the last)."""
        assert self.n_tokens > 0
        tmp = self._sampler is None
        if tmp:
            self._sampler = self._init_sampler(
                top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
                repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, penalize_nl=penalize_nl,
                logits_processor=logits_processor, grammar=grammar)
        ridx = idx - self.n_tokens if idx is not None else -1
        token = self._sampler.sample(self._need_ctx().get_logits_ith(ridx))
        if tmp:
            self._sampler = None
        return token

    def generate(self, tokens: Sequence[int], top_k: int = 40, top_p: float = 0.95,
                 min_p: float = 0.05, typical_p: float = 1.0, temp: float = 0.80,
                 repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_tau: float = 5.0,
                 mirostat_eta: float = 0.1, penalize_nl: bool = True, logits_processor=None,
                 stopping_criteria=None, grammar: Optional[LlamaGrammar] = None):
        """Yield tokens continuing `tokens` (a generator; send() more tokens to queue them)."""
        self._sampler = self._init_sampler(
            top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, penalize_nl=penalize_nl,
            logits_processor=logits_processor, grammar=grammar)
        tokens = list(tokens)
        if reset and self.n_tokens > 0:
            reset, tokens = self._reuse_prefix(tokens)
        if reset:
            self.reset()
        sample_idx = self.n_tokens + len(tokens) - 1
        kw = dict(top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p, temp=temp,
                  repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                  presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                  mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
                  logits_processor=logits_processor, grammar=grammar, penalize_nl=penalize_nl)
        while True:
            self.eval(tokens)
            while sample_idx < self.n_tokens:
                token = self.sample(idx=sample_idx, **kw)
                sample_idx += 1
                if stopping_criteria is not None and stopping_criteria(
                        self._input_ids[:sample_idx], self._scores[sample_idx - self.n_tokens, :]):
                    return
                more = yield token
                tokens.clear()
                tokens.append(token)
                if more is not None:
                    tokens.extend(more)
                if sample_idx < self.n_tokens and token != self._input_ids[sample_idx]:
                    # a draft token the sampler did not reproduce: drop it and what follows
                    self.n_tokens = sample_idx
                    self._ctx.memory.seq_rm(-1, self.n_tokens, -1)
                    self._requires_eval = True
                    break
            if self.draft_model is not None:
                self.input_ids[self.n_tokens:self.n_tokens + len(tokens)] = tokens
                drafts = self.draft_model(self.input_ids[:self.n_tokens + len(tokens)])
                tokens.extend(np.asarray(drafts).astype(int)
                              [:self._n_ctx - self.n_tokens - len(tokens)].tolist())

    def _reuse_prefix(self, tokens: list) -> tuple[bool, list]:
        """(reset still needed, tokens left to evaluate): keep the evaluated tokens shared with
        the new prompt (at least one prompt token is always re-evaluated for fresh logits, unless
        the whole prompt was just evaluated by a live decode)."""
        longest = Llama.longest_token_prefix(self._input_ids, tokens)
        consumed = longest == len(tokens)
        if self.n_tokens == len(tokens) and consumed and not self._requires_eval:
            return False, []
        keep = longest - 1 if consumed else longest
        if keep > 0 and self._prefix_window_ok(keep) and \
                self._ctx.memory.seq_rm(-1, keep, -1):
            self.n_tokens = keep
            self._requires_eval = True
            return False, tokens[keep:]
        return True, tokens

    def _prefix_window_ok(self, keep: int) -> bool:
        """With swa_full=False the SWA cache may no longer hold the window of position keep
        (llama.cpp would decode on with positions missing); then the prompt is re-evaluated."""
        if self._swa_full or not self._model.hparams.is_swa_any():
            return True
        from ..generate import window_ok
        return window_ok(self._ctx, 0, keep)

    # -- embeddings -------------------------------------------------------------------------------
    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None):
        embeds, total = self.embed(input if isinstance(input, list) else [input],
                                   return_count=True)
        data = [{"object": "embedding", "embedding": e, "index": i}
                for i, e in enumerate(embeds)]
        return {"object": "list", "data": data,
                "model": model if model is not None else self.model_path,
                "usage": {"prompt_tokens": total, "total_tokens": total}}

    def embed(self, input: Union[str, List[str]], normalize: bool = False,
              truncate: bool = True, return_count: bool = False):
        """Embeddings of one text or a list: pooled vectors, or with pooling none a list of
        token vectors per text. Texts share a batch (one sequence each) up to n_batch tokens
        and n_seq_max sequences, as llama-cpp-python packs them."""
        if not self._embedding:
            raise RuntimeError("Llama model must be created with embedding=True to call this "
                               "method")
        ctx = self._need_ctx()
        ctx.set_embeddings(True)
        pooled = ctx.pooling != "none"
        n_embd = self.n_embd()
        inputs = [input] if isinstance(input, str) else input
        data: list = []
        batch: list[list[int]] = []

        def flush():
            if not batch:
                return
            ctx.memory.clear()
            toks = [t for seq in batch for t in seq]
            seqs = [i for i, seq in enumerate(batch) for _ in seq]
            pos = [j for seq in batch for j in range(len(seq))]
            rc = ctx.decode(Batch(toks, pos=pos, seq_ids=seqs, logits=np.ones(len(toks), bool)))
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            flat = None if pooled else ctx.get_embeddings().reshape(-1)
            pos = 0
            for i, seq in enumerate(batch):
                if pooled:
                    e = [float(x) for x in ctx.get_embeddings_seq(i)[:n_embd]]
                    data.append(_unit(e) if normalize else e)
                    continue
                # llama-cpp-python 0.3.36 reads sequence i's rows from float offset
                # pos + j * n_embd with pos counted in tokens (not tokens * n_embd): only the
                # first sequence of a batch gets its own rows; kept for equal results
                rows = [flat[pos + j * n_embd:pos + (j + 1) * n_embd].tolist()
                        for j in range(len(seq))]
                data.append([_unit(r) for r in rows] if normalize else rows)
                pos += len(seq)
            batch.clear()

        total = n_in_batch = 0
        for text in inputs:
            tokens = self.tokenize(text.encode("utf-8"))
            if truncate:
                tokens = tokens[:self.n_batch]
            total += len(tokens)
            if len(tokens) > self.n_batch:
                raise ValueError(f"Requested tokens ({len(tokens)}) exceed batch size of "
                                 f"{self.n_batch}")
            if n_in_batch + len(tokens) > self.n_batch or len(batch) >= self._n_seq_max:
                flush()
                n_in_batch = 0
            batch.append(tokens)
            n_in_batch += len(tokens)
        flush()
        ctx.memory.clear()
        self.reset()
        out = data[0] if isinstance(input, str) else data
        return (out, total) if return_count else out

    # -- completion -------------------------------------------------------------------------------
    def _create_completion(self, prompt: Union[str, List[int]], suffix: Optional[str] = None,
                           max_tokens: Optional[int] = 16, temperature: float = 0.8,
                           top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                           logprobs: Optional[int] = None, echo: bool = False, stop=[],
                           frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                           repeat_penalty: float = 1.0, top_k: int = 40, stream: bool = False,
                           seed: Optional[int] = None, tfs_z: float = 1.0,
                           mirostat_mode: int = 0, mirostat_tau: float = 5.0,
                           mirostat_eta: float = 0.1, model: Optional[str] = None,
                           stopping_criteria=None, logits_processor=None,
                           grammar: Optional[LlamaGrammar] = None,
                           logit_bias: Optional[Dict[int, float]] = None) -> Iterator[dict]:
        assert suffix is None or suffix.__class__ is str
        completion_id = f"cmpl-{uuid.uuid4()}"
        created = int(time.time())
        prompt_tokens = self._prompt_tokens(prompt, suffix)
        bos_token_id = self.token_bos()
        completion_tokens: List[int] = [] if len(prompt) > 0 else [bos_token_id]
        text = b""
        returned_tokens = 0
        stop = stop if isinstance(stop, list) else [stop] if isinstance(stop, str) else []
        model_name = model if model is not None else self.model_path
        if prompt_tokens[:2] == [bos_token_id] * 2:
            warnings.warn(f'Detected duplicate leading "{self._model.vocab.token_text(bos_token_id)}"'
                          ' in prompt, this will likely reduce response quality, consider '
                          'removing it...', RuntimeWarning)
        if logit_bias is not None:
            logits_processor = _with_logit_bias(logits_processor, logit_bias)
        if len(prompt_tokens) >= self._n_ctx:
            raise ValueError(f"Requested tokens ({len(prompt_tokens)}) exceed context window of "
                             f"{self._n_ctx}")
        if max_tokens is None or max_tokens <= 0:
            max_tokens = self._n_ctx - len(prompt_tokens)
        if max_tokens + len(prompt_tokens) >= self._n_ctx:
            max_tokens = self._n_ctx - len(prompt_tokens)
        stop_sequences = [s.encode("utf-8") for s in stop]
        if logprobs is not None and self._logits_all is False:
            raise ValueError("logprobs is not supported for models created with logits_all=False")
        if self.cache:
            self._load_from_cache(prompt_tokens)
        if seed is not None:
            self.set_seed(seed)
        else:
            self.set_seed(random.Random(self._seed).randint(0, 2**32))

        finish_reason = "length"
        multibyte_fix = 0
        detok = self.detokenize
        for token in self.generate(
                prompt_tokens, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                temp=temperature, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
                frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
                repeat_penalty=repeat_penalty, stopping_criteria=stopping_criteria,
                logits_processor=logits_processor, grammar=grammar):
            if self._model.vocab.is_eog(token):
                text = detok(completion_tokens, prev_tokens=prompt_tokens)
                finish_reason = "stop"
                break
            completion_tokens.append(token)
            all_text = detok(completion_tokens, prev_tokens=prompt_tokens)
            # hold back a trailing incomplete UTF-8 sequence
            for k, char in enumerate(all_text[-3:]):
                k = 3 - k
                for num, pattern in ((2, 192), (3, 224), (4, 240)):
                    if num > k and pattern & char == pattern:
                        multibyte_fix = num - k
            if multibyte_fix > 0:
                multibyte_fix -= 1
                continue
            any_stop = [s for s in stop_sequences if s in all_text]
            if any_stop:
                text = all_text[:all_text.index(any_stop[0])]
                finish_reason = "stop"
                break
            if stream:
                remaining = completion_tokens[returned_tokens:]
                prev = prompt_tokens + completion_tokens[:returned_tokens]
                remaining_text = detok(remaining, prev_tokens=prev)
                remaining_length = len(remaining_text)
                first_stop_position = 0
                for s in stop_sequences:
                    for i in range(min(len(s), remaining_length), 0, -1):
                        if remaining_text.endswith(s[:i]):
                            first_stop_position = max(first_stop_position, i)
                            break
                if logprobs is not None:
                    for chunk in self._stream_logprob_chunks(
                            remaining, prompt, prompt_tokens, completion_tokens, returned_tokens,
                            remaining_length - first_stop_position, logprobs, completion_id,
                            created, model_name):
                        returned_tokens += 1
                        yield chunk
                else:
                    token_end_position = 0
                    while remaining:
                        for i in range(1, len(remaining) + 1):
                            bs = detok(remaining[:i], prev_tokens=prompt_tokens +
                                       completion_tokens[:returned_tokens])
                            try:
                                ts = bs.decode("utf-8")
                                break
                            except UnicodeError:
                                pass
                        else:
                            break
                        token_end_position += len(bs)
                        if token_end_position > remaining_length - first_stop_position:
                            break
                        remaining = remaining[i:]
                        returned_tokens += i
                        yield _chunk(completion_id, created, model_name, ts, None, None)
            if len(completion_tokens) >= max_tokens:
                text = detok(completion_tokens, prev_tokens=prompt_tokens)
                finish_reason = "length"
                break

        if stopping_criteria is not None and stopping_criteria(self._input_ids,
                                                               self._scores[-1, :]):
            text = detok(completion_tokens, prev_tokens=prompt_tokens)
            finish_reason = "stop"

        if stream:
            yield from self._stream_tail(prompt, prompt_tokens, completion_tokens,
                                         returned_tokens, stop_sequences, logprobs,
                                         completion_id, created, model_name, finish_reason)
            if self.cache:
                self.cache[prompt_tokens + completion_tokens] = self.save_state()
            return

        if self.cache:
            self.cache[prompt_tokens + completion_tokens] = self.save_state()
        text_str = text.decode("utf-8", errors="ignore")
        if echo:
            text_str = prompt + text_str
        lp = None
        if logprobs is not None:
            lp = self._completion_logprobs(prompt, prompt_tokens, completion_tokens, echo,
                                           logprobs)
        yield {
            "id": completion_id, "object": "text_completion", "created": created,
            "model": model_name,
            "choices": [{"text": text_str, "index": 0, "logprobs": lp,
                         "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": len(prompt_tokens),
                      "completion_tokens": len(completion_tokens),
                      "total_tokens": len(prompt_tokens) + len(completion_tokens)},
        }

    def _prompt_tokens(self, prompt, suffix) -> List[int]:
        """BOS/CLS + prompt (+ suffix and its markers) + EOS/SEP as llama-cpp-python assembles
        them. llama-cpp-python 0.3.36 uses token id 0 for the FIM prefix/suffix/middle markers
        (its `# TODO: Fix`), so a suffix gives its token layout, kept here for equal results."""
        v = self._model.vocab
        bos_id, cls_id, sep_id = v.bos, v.special.get("cls", -1), v.sep
        prefix_id = middle_id = suffix_id = 0
        add_space_prefix = self.metadata.get("tokenizer.ggml.add_space_prefix", "true") == "true"
        bos_tokens = [cls_id if cls_id != -1 else bos_id]
        eos_tokens = [sep_id if sep_id != -1 else self.token_eos()]
        listed = isinstance(prompt, list) and suffix is None
        if listed or not v.add_bos or bos_tokens[:1] == [-1]:
            bos_tokens = []
        if listed or (not v.add_eos and sep_id == -1):
            eos_tokens = []
        suffix_space_prefix = 0
        if add_space_prefix and suffix_id >= 0 and suffix:
            suffix = "☺" + suffix
            suffix_space_prefix = 2
        if isinstance(prompt, str):
            body = self.tokenize(prompt.encode("utf-8"), add_bos=False,
                                 special=(prefix_id < 0 or suffix is None)) if prompt != "" else []
        else:
            body = list(prompt)
        prefix = ([prefix_id] if prefix_id >= 0 and suffix is not None else []) + body
        suffix_tokens = ([suffix_id] + (self.tokenize(suffix.encode("utf-8"), add_bos=False,
                                                      special=False)[suffix_space_prefix:]
                                        if suffix else [])
                         if suffix_id >= 0 and suffix is not None else [])
        middle = [middle_id] if middle_id >= 0 and suffix is not None else []
        parts = suffix_tokens + prefix + middle if self.spm_infill else prefix + suffix_tokens + middle
        return bos_tokens + parts + eos_tokens

    def _load_from_cache(self, prompt_tokens: List[int]) -> None:
        try:
            item = self.cache[prompt_tokens]
        except KeyError:
            if self.verbose:
                print("Llama._create_completion: cache miss", file=sys.stderr)
            return
        if Llama.longest_token_prefix(item.input_ids.tolist(), prompt_tokens) > \
                Llama.longest_token_prefix(self._input_ids.tolist(), prompt_tokens):
            self.load_state(item)
            if self.verbose:
                print("Llama._create_completion: cache hit", file=sys.stderr)

    def _token_logprobs(self, row: np.ndarray, token: int, token_str: str, n: int,
                        prev_tokens=None) -> tuple[float, dict]:
        """(logprob of token, {text: logprob} of the n best then the token itself) for one row
        of logprobs, ordered as sorted(zip(logprobs, ids), reverse=True) orders them."""
        top = {self.detokenize([i], prev_tokens=prev_tokens).decode("utf-8", errors="ignore"): p
               for p, i in _top_n(row, n)}
        value = float(row[int(token)])
        top.update({token_str: value})
        return value, top

    def _stream_logprob_chunks(self, remaining, prompt, prompt_tokens, completion_tokens,
                               returned_tokens, limit, n, completion_id, created, model_name):
        """The streaming chunks of a logprobs request, one per token (inside the loop)."""
        prev = prompt_tokens + completion_tokens[:returned_tokens]
        bos = self.token_bos()
        end = 0
        for token in remaining:
            if token == bos:
                continue
            piece = self.detokenize([token], prev_tokens=prev)
            end += len(piece)
            if end > limit:
                break
            token_str = piece.decode("utf-8", errors="ignore")
            text_offset = len(prompt) + len(self.detokenize(
                completion_tokens[:returned_tokens], prev_tokens=prev).decode("utf-8",
                                                                              errors="ignore"))
            row = Llama.logits_to_logprobs(
                self._scores[len(prompt_tokens) + returned_tokens - 1, :])
            value, top = self._token_logprobs(row, token, token_str, n)
            returned_tokens += 1
            prev = prompt_tokens + completion_tokens[:returned_tokens]
            lp = {"tokens": [token_str], "text_offset": [text_offset],
                  "token_logprobs": [value], "top_logprobs": [top]}
            yield _chunk(completion_id, created, model_name,
                         self.detokenize([token], prev_tokens=prev).decode("utf-8",
                                                                           errors="ignore"),
                         lp, None)

    def _stream_tail(self, prompt, prompt_tokens, completion_tokens, returned_tokens,
                     stop_sequences, logprobs, completion_id, created, model_name,
                     finish_reason) -> Iterator[dict]:
        """The chunks after generation: what is left up to the first stop string, then the
        finish chunk."""
        remaining = completion_tokens[returned_tokens:]
        prev = prompt_tokens + completion_tokens[:returned_tokens]
        remaining_text = self.detokenize(remaining, prev_tokens=prev)
        hits = [s for s in stop_sequences if s in remaining_text]
        end = min(remaining_text.index(s) for s in hits) if hits else len(remaining_text)
        token_end_position = 0
        for token in remaining:
            token_end_position += len(self.detokenize([token], prev_tokens=prompt_tokens +
                                                      completion_tokens[:returned_tokens]))
            lp = None
            if logprobs is not None:
                if token == self.token_bos():
                    continue
                token_str = self.detokenize([token]).decode("utf-8", errors="ignore")
                text_offset = len(prompt) + len(self.detokenize(
                    completion_tokens[:returned_tokens],
                    prev_tokens=prompt_tokens + completion_tokens[:returned_tokens]))
                row = Llama.logits_to_logprobs(
                    self._scores[len(prompt_tokens) + returned_tokens - 1, :])
                value, top = self._token_logprobs(row, token, token_str, logprobs)
                lp = {"tokens": [token_str], "text_offset": [text_offset],
                      "token_logprobs": [value], "top_logprobs": [top]}
            if token_end_position >= end:
                last_text = self.detokenize([token])
                if token_end_position == end - 1:
                    break
                returned_tokens += 1
                yield _chunk(completion_id, created, model_name,
                             last_text[:len(last_text) - (token_end_position - end)].decode(
                                 "utf-8", errors="ignore"), lp, None)
                break
            returned_tokens += 1
            yield _chunk(completion_id, created, model_name,
                         self.detokenize([token]).decode("utf-8", errors="ignore"), lp, None)
        yield _chunk(completion_id, created, model_name, "", None, finish_reason)

    def _completion_logprobs(self, prompt, prompt_tokens, completion_tokens, echo: bool,
                             n: int) -> dict:
        text_offset = 0 if echo else len(prompt)
        token_offset = 0 if echo else len(prompt_tokens[1:])
        if echo:
            skip = 1 if prompt_tokens[0] == self.token_bos() else 0
            all_tokens = prompt_tokens[skip:] + completion_tokens
        else:
            all_tokens = completion_tokens
        strs = [self.detokenize([t], prev_tokens=all_tokens[:i]).decode("utf-8", errors="ignore")
                for i, t in enumerate(all_tokens)]
        rows = Llama.logits_to_logprobs(self._scores)[token_offset:]
        bos = self.token_bos()
        offsets, values, tokens, tops = [], [], [], []
        for idx, (token, token_str, row) in enumerate(zip(all_tokens, strs, rows)):
            if token == bos:
                continue
            offsets.append(text_offset + len(self.detokenize(all_tokens[:idx]).decode(
                "utf-8", errors="ignore")))
            tokens.append(token_str)
            value, top = self._token_logprobs(row, token, token_str, n,
                                              prev_tokens=all_tokens[:idx])
            values.append(value)
            tops.append(top)
        if echo and len(all_tokens) > 0:
            values[0] = None
            tops[0] = None
        return {"tokens": tokens, "text_offset": offsets, "token_logprobs": values,
                "top_logprobs": tops}

    def create_completion(self, prompt: Union[str, List[int]], suffix: Optional[str] = None,
                          max_tokens: Optional[int] = 16, temperature: float = 0.8,
                          top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
                          logprobs: Optional[int] = None, echo: bool = False, stop=[],
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                          repeat_penalty: float = 1.0, top_k: int = 40, stream: bool = False,
                          seed: Optional[int] = None, tfs_z: float = 1.0,
                          mirostat_mode: int = 0, mirostat_tau: float = 5.0,
                          mirostat_eta: float = 0.1, model: Optional[str] = None,
                          stopping_criteria=None, logits_processor=None,
                          grammar: Optional[LlamaGrammar] = None,
                          logit_bias: Optional[Dict[int, float]] = None):
        """Generate text from a prompt: a completion dict, or an iterator of chunks (stream)."""
        out = self._create_completion(
            prompt=prompt, suffix=suffix, max_tokens=-1 if max_tokens is None else max_tokens,
            temperature=temperature, top_p=top_p, min_p=min_p, typical_p=typical_p,
            logprobs=logprobs, echo=echo, stop=stop, frequency_penalty=frequency_penalty,
            presence_penalty=presence_penalty, repeat_penalty=repeat_penalty, top_k=top_k,
            stream=stream, seed=seed, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
            stopping_criteria=stopping_criteria, logits_processor=logits_processor,
            grammar=grammar, logit_bias=logit_bias)
        if stream:
            return out
        return next(out)

    def __call__(self, prompt: str, suffix: Optional[str] = None, max_tokens: Optional[int] = 16,
                 temperature: float = 0.8, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, logprobs: Optional[int] = None, echo: bool = False,
                 stop=[], frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                 repeat_penalty: float = 1.0, top_k: int = 40, stream: bool = False,
                 seed: Optional[int] = None, tfs_z: float = 1.0, mirostat_mode: int = 0,
                 mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 model: Optional[str] = None, stopping_criteria=None, logits_processor=None,
                 grammar: Optional[LlamaGrammar] = None,
                 logit_bias: Optional[Dict[int, float]] = None):
        return self.create_completion(
            prompt=prompt, suffix=suffix, max_tokens=max_tokens, temperature=temperature,
            top_p=top_p, min_p=min_p, typical_p=typical_p, logprobs=logprobs, echo=echo,
            stop=stop, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            repeat_penalty=repeat_penalty, top_k=top_k, stream=stream, seed=seed, tfs_z=tfs_z,
            mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
            model=model, stopping_criteria=stopping_criteria, logits_processor=logits_processor,
            grammar=grammar, logit_bias=logit_bias)

    def create_chat_completion(self, messages: List[dict], functions=None, function_call=None,
                               tools=None, tool_choice=None, temperature: float = 0.2,
                               top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05,
                               typical_p: float = 1.0, stream: bool = False, stop=[],
                               seed: Optional[int] = None, response_format=None,
                               max_tokens: Optional[int] = None, presence_penalty: float = 0.0,
                               frequency_penalty: float = 0.0, repeat_penalty: float = 1.0,
                               tfs_z: float = 1.0, mirostat_mode: int = 0,
                               mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                               model: Optional[str] = None, logits_processor=None,
                               grammar: Optional[LlamaGrammar] = None, logit_bias=None,
                               logprobs: Optional[bool] = None,
                               top_logprobs: Optional[int] = None):
        """A chat completion (or its chunks) for OpenAI-style messages, through the chat
        handler (the GGUF's template by default)."""
        handler = (self.chat_handler or self._chat_handlers.get(self.chat_format)
                   or llama_chat_format.get_chat_completion_handler(self.chat_format))
        return handler(
            llama=self, messages=messages, functions=functions, function_call=function_call,
            tools=tools, tool_choice=tool_choice, temperature=temperature, top_p=top_p,
            top_k=top_k, min_p=min_p, typical_p=typical_p, logprobs=logprobs,
            top_logprobs=top_logprobs, stream=stream, stop=stop, seed=seed,
            response_format=response_format, max_tokens=max_tokens,
            presence_penalty=presence_penalty, frequency_penalty=frequency_penalty,
            repeat_penalty=repeat_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
            mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, model=model,
            logits_processor=logits_processor, grammar=grammar, logit_bias=logit_bias)

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any):
        try:
            from openai.types.chat import ChatCompletion, ChatCompletionChunk
        except ImportError:
            raise ImportError("To use create_chat_completion_openai_v1, you must install the "
                              "openai package. You can install it with `pip install openai`.")
        if kwargs.get("stream", False):
            return (ChatCompletionChunk(**c) for c in self.create_chat_completion(*args, **kwargs))
        return ChatCompletion(**self.create_chat_completion(*args, **kwargs))

    # -- state ------------------------------------------------------------------------------------
    def __getstate__(self):
        a = dict(self._init_args)
        a.pop("kwargs", None)
        a.update(seed=self._seed, chat_format=self.chat_format, chat_handler=self.chat_handler,
                 draft_model=self.draft_model)
        return a

    def __setstate__(self, state):
        self.__init__(**state)

    def save_state(self) -> LlamaState:
        """The evaluated tokens, their logits (logits_all) and the KV memory."""
        data = self._need_ctx().memory.state_write(-1)
        return LlamaState(scores=self._scores.copy(), input_ids=self.input_ids.copy(),
                          n_tokens=self.n_tokens, llama_state=data,
                          llama_state_size=len(data), seed=self._seed)

    def load_state(self, state: LlamaState) -> None:
        self.scores[:state.n_tokens, :] = state.scores.copy()
        rest = self.scores[state.n_tokens:, :]
        rest[rest > 0] = 0.0
        self.input_ids = state.input_ids.copy()
        self.n_tokens = state.n_tokens
        self._requires_eval = True
        self._seed = state.seed
        mem = self._need_ctx().memory
        mem.clear()
        if mem.state_read(state.llama_state, -1) != state.llama_state_size:
            raise RuntimeError("Failed to set llama state data")

    # -- info -------------------------------------------------------------------------------------
    def n_ctx(self) -> int:
        return self._n_ctx_value

    def n_embd(self) -> int:
        return self._model.hparams.n_embd

    def n_vocab(self) -> int:
        return self._model.vocab.n_vocab

    def tokenizer(self) -> LlamaTokenizer:
        return LlamaTokenizer(self)

    def token_eos(self) -> int:
        return self._model.vocab.eos

    def token_bos(self) -> int:
        return self._model.vocab.bos

    def token_nl(self) -> int:
        """llama_vocab_nl: SPM: the <0x0A> byte token (else a "\n" token, else PAD); other
        vocabularies: the first token of "\n" (else PAD)."""
        v = self._model.vocab
        if v.kind == "spm":
            for text in ("<0x0A>", "\n"):
                i = v.token_id(text)
                if i is not None:
                    return i
            return v.pad
        ids = v.tokenize("\n", add_special=False)
        return ids[0] if ids else v.pad

    def pooling_type(self) -> int:
        """llama_pooling_type of the context (an int of llama.h's enum)."""
        names = {v: k for k, v in POOLING_NAMES.items() if v is not None}
        return names[self._ctx.pooling] if self._ctx is not None else LLAMA_POOLING_TYPE_NONE

    def close(self) -> None:
        self._ctx = None

    @staticmethod
    def logits_to_logprobs(logits, axis: int = -1) -> np.ndarray:
        """log_softmax in float32, as llama-cpp-python computes it."""
        maxs = np.amax(logits, axis=axis, keepdims=True)
        if maxs.ndim > 0:
            maxs[~np.isfinite(maxs)] = 0
        elif not np.isfinite(maxs):
            maxs = 0
        shifted = np.subtract(logits, maxs, dtype=np.single)
        with np.errstate(divide="ignore"):
            out = np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
        return shifted - out

    @staticmethod
    def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        return n

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: Optional[str],
                        additional_files: Optional[List] = None, local_dir=None,
                        local_dir_use_symlinks="auto", cache_dir=None, **kwargs) -> "Llama":
        """A model from a folder already on disk: `local_dir`, `repo_id` itself when it is a
        folder, or the Hugging Face cache's snapshot of repo_id (cache_dir, else
        $HF_HUB_CACHE / ~/.cache/huggingface/hub). pyllama never downloads."""
        root = _local_repo(repo_id, local_dir, cache_dir)
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        model_file = _match_one(files, filename, repo_id)
        for extra in additional_files or []:
            _match_one(files, extra, repo_id)
        return cls(model_path=str(root / model_file), **kwargs)


# -- helpers ----------------------------------------------------------------------------------------
_MODELS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()


def _shared_model(path: str, vocab_only: bool):
    """One loaded Model per file while any Llama uses it (the weights are read-only; every
    Llama has its own Context)."""
    from ..model import load_model
    st = os.stat(path)
    key = (os.path.realpath(path), st.st_size, st.st_mtime_ns, vocab_only)
    m = _MODELS.get(key)
    if m is None:
        m = _MODELS[key] = load_model(path, vocab_only=vocab_only)
    return m


def locals_copy(loc: dict) -> dict:
    """The constructor's arguments, for __getstate__."""
    skip = {"self", "kwargs", "load_model", "__class__", "path", "hp"}
    return {k: v for k, v in loc.items() if k not in skip and not k.startswith("_")}


def _refuse(**flags) -> None:
    what = {
        "kv_overrides": "kv_overrides (GGUF metadata overrides)",
        "attention_type": "attention_type other than causal",
    }
    for k, on in flags.items():
        if on:
            raise PyllamaError(f"Llama: {what[k]} not supported by pyllama yet")


def _kv_type(t) -> str:
    if t is None:
        return "f16"
    if isinstance(t, str):
        return t
    if int(t) not in GGML_KV_TYPES:
        raise PyllamaError(f"Llama: KV cache type {t} not supported by pyllama "
                           f"(ggml types {sorted(GGML_KV_TYPES)})")
    return GGML_KV_TYPES[int(t)]


def _metadata_strings(md: dict) -> Dict[str, str]:
    """GGUF metadata as llama_model_meta_val_str gives it: scalars as text (floats %f, bools
    true/false), arrays left out."""
    out = {}
    for k, v in md.items():
        if isinstance(v, (bool, np.bool_)):
            out[k] = "true" if v else "false"
        elif isinstance(v, (float, np.floating)):
            out[k] = f"{float(v):f}"
        elif isinstance(v, (bytes, bytearray)):
            out[k] = bytes(v).decode("utf-8", "replace")
        elif isinstance(v, (str, int, np.integer)):
            out[k] = str(v)
    return out


def _with_logit_bias(logits_processor, logit_bias: dict):
    bias = {int(k): float(v) for k, v in logit_bias.items()}

    def logit_bias_processor(input_ids, scores):
        new = np.copy(scores)
        for t, b in bias.items():
            new[t] = b + scores[t]
        return new

    extra = LogitsProcessorList([logit_bias_processor])
    if logits_processor is None:
        return extra
    return logits_processor.extend(extra)     # (None, as in llama-cpp-python: list.extend)


def _unit(v: list) -> list:
    """llama-cpp-python's normalize_embedding: v / |v| in double (a zero vector stays)."""
    norm = float(np.linalg.norm(v))
    return v if norm == 0.0 else [x / norm for x in v]


def _top_n(row: np.ndarray, n: int) -> list:
    """The first n of sorted(zip(row, range(len(row))), reverse=True): by value descending,
    equal values by id descending."""
    n = max(0, min(int(n), len(row)))
    if n == 0:
        return []
    kth = np.partition(row, len(row) - n)[len(row) - n]
    at = np.flatnonzero(row >= kth)
    order = np.lexsort((-at, -row[at]))[:n]
    return [(float(row[at[i]]), int(at[i])) for i in order]


def _chunk(cid, created, model_name, text, logprobs, finish_reason) -> dict:
    return {"id": cid, "object": "text_completion", "created": created, "model": model_name,
            "choices": [{"text": text, "index": 0, "logprobs": logprobs,
                         "finish_reason": finish_reason}]}


def _local_repo(repo_id: str, local_dir, cache_dir) -> Path:
    if local_dir is not None and Path(local_dir).is_dir():
        return Path(local_dir)
    if Path(repo_id).is_dir():
        return Path(repo_id)
    hub = Path(cache_dir or os.environ.get("HF_HUB_CACHE") or
               Path(os.environ.get("HF_HOME", Path.home() / ".cache" / "huggingface")) / "hub")
    snaps = hub / ("models--" + repo_id.replace("/", "--")) / "snapshots"
    if snaps.is_dir():
        revs = sorted(snaps.iterdir(), key=lambda p: p.stat().st_mtime)
        if revs:
            return revs[-1]
    raise PyllamaError(f"Llama.from_pretrained: {repo_id!r} is not a local folder or a "
                       "Hugging Face cache entry; pyllama does not download models (give "
                       "local_dir=, a folder as repo_id, or Llama(model_path=...))")


def _match_one(files: List[str], pattern: Optional[str], repo_id: str) -> str:
    hits = [f for f in files if fnmatch.fnmatch(f, pattern)]
    if not hits:
        raise ValueError(f"No file found in {repo_id} that match {pattern}\n\n"
                         f"Available Files:\n{files}")
    if len(hits) > 1:
        raise ValueError(f"Multiple files found in {repo_id} matching {pattern}\n\n"
                         f"Available Files:\n{files}")
    return hits[0]
