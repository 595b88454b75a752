"""The engine thread: owns Model and Context, runs -np slots with continuous batching.

Every step puts the generation tokens of all generating slots and prompt chunks of the others into
one pyllama.Batch (each slot is its own seq_id), decodes once, then samples per slot. Must not do
HTTP. llama.cpp counterpart: tools/server/server-context.cpp (`update_slots`, `process_token`).
"""
from __future__ import annotations

import codecs
import os
import queue
import struct
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..log import get_logger
from . import sleep
from .schemas import (EmbdResult, Final, Partial, Progress, ServerError, TaskParams, Timings,
                      TokenProb, exceed_context)

log = get_logger("server")

# slot files are llama.cpp's llama_state_seq_save_file format: u32 'ggsq' magic, u32 version 3,
# u32 token count, the tokens (i32), the sequence state; files saved by pyllama before it used
# these bytes (b"PYLSLOT1" in place of magic + version) still restore
SLOT_FILE_MAGIC = struct.pack("<II", 0x67677371, 3)
_OLD_SLOT_FILE_MAGIC = b"PYLSLOT1"


class Channel:
    """Engine thread → one asyncio handler: results are posted onto the handler's event loop."""

    def __init__(self, loop):
        import asyncio
        self.loop, self.queue = loop, asyncio.Queue()

    def put(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the handler's loop is gone (shutdown)
            pass

    async def get(self, timeout: float | None = None):
        import asyncio
        return await asyncio.wait_for(self.queue.get(), timeout)


@dataclass
class Task:
    """One unit of work: a completion (one prompt, one result index), an embedding or rerank
    (one prompt, one stateless decode) or a slot action."""
    kind: str                    # completion | embedding | rerank | save | restore | erase
    channel: Channel
    prompt: list[int] = field(default_factory=list)
    params: TaskParams = field(default_factory=TaskParams)
    index: int = 0
    id_slot: int = -1
    filename: str = ""
    id: int = 0
    cancelled: bool = False
    end_reasoning: bool = False      # set by /v1/chat/completions/control (any thread)
    t_submit: float = field(default_factory=time.perf_counter)


@dataclass
class Checkpoint:
    """An SWA-only state of a slot's sequence after its first n_tokens cached tokens."""
    n_tokens: int
    pos_min: int
    pos_max: int
    data: bytes
    draft: bytes | None = None     # the draft context's SWA-only state at the same point


class Speculation:
    """Per-slot drafting for the server (llama.cpp common_speculative in server-context.cpp):
    n-gram lookup and/or a draft model whose context holds one sequence per slot (same n_ctx,
    n_seq_max, kv_unified, n_batch/n_ubatch as the target) and follows the target's tokens."""

    def __init__(self, cfg, draft_ctx=None, n_seq: int = 1, target=None):
        from pyllama.speculative import (DraftModelDrafter, NgramModPool, draft_cost_ratio,
                                         drafter_chain, with_policy)
        self.n_min = cfg.spec_n_min
        self.draft_ctx = draft_ctx
        n = draft_ctx.n_seq_max if draft_ctx is not None else n_seq
        self.models = ([DraftModelDrafter(draft_ctx, i, cfg.spec_p_min) for i in range(n)]
                       if draft_ctx is not None else [])
        types = [t for t in cfg.spec_types if t != "none"]
        if self.models and "draft-simple" not in types:
            types.append("draft-simple")        # -md alone
        # one drafter state per slot; ngram-mod's pool is shared by all slots (llama.cpp)
        st = cfg.spec_settings
        pool = NgramModPool(st.get("ngram_mod_n_match", 24)) if "ngram-mod" in types else None
        # ngram-cache: the static and dynamic lookup caches are loaded once, read by every slot
        lookup = None
        if "ngram-cache" in types:
            from pyllama.speculative.ngram_cache import load_lookup
            lookup = load_lookup(st)
        self.drafters, self.n_max = [], cfg.spec_n_max
        for i in range(n):
            d, n_max = drafter_chain(types, st, draft=self.models[i] if self.models else None,
                                     draft_n_max=cfg.spec_n_max, mod_pool=pool, lookup=lookup)
            if cfg.spec_policy == "cost":       # per slot: its own acceptance estimates
                dc = (draft_cost_ratio(target, draft_ctx.model)
                      if draft_ctx is not None and target is not None else 0.0)
                d = with_policy(d, k_min=cfg.spec_n_min, draft_cost=dc)
            self.drafters.append(d)
            self.n_max = n_max

    def begin(self, seq: int, tokens: list[int]) -> None:
        """A generation starts in slot seq (common_speculative_begin)."""
        self.drafters[seq].begin(tokens)

    def draft(self, seq: int, history: list[int], n_max: int) -> list[int]:
        """The slot's drafter chain (llama.cpp's priority order: n-gram types, then the model)."""
        out = self.drafters[seq].draft(history, n_max)
        return out[:n_max] if len(out) >= self.n_min else []

    def accept(self, seq: int, n_accepted: int, n_drafted: int) -> None:
        self.drafters[seq].accept(n_accepted, n_drafted)

    def rollback(self, seq: int, n_keep: int) -> None:
        if self.models:
            self.models[seq].rollback(n_keep)

    # -- draft-side context checkpoints (a draft with SWA layers loses its window too) ----------
    def _swa_draft(self) -> bool:
        return bool(self.models) and self.draft_ctx.hp.is_swa_any() and \
            not self.draft_ctx.swa_full

    def checkpoint(self, seq: int, tokens: list[int]) -> bytes | None:
        """Bring the draft sequence up to `tokens` and return its SWA-only state."""
        from pyllama.kv import STATE_SEQ_FLAGS_PARTIAL_ONLY
        if not self._swa_draft():
            return None
        self.models[seq].sync(tokens)
        return self.draft_ctx.state_seq_get(seq, STATE_SEQ_FLAGS_PARTIAL_ONLY)

    def restore(self, seq: int, data: bytes | None, tokens: list[int]) -> None:
        """The draft part of a checkpoint; on any failure the draft sequence restarts empty (it
        re-decodes its history before the next draft)."""
        from pyllama.generate import cached_tokens
        from pyllama.kv import STATE_SEQ_FLAGS_PARTIAL_ONLY
        if data is None or not self._swa_draft():
            return
        mem = self.draft_ctx.memory
        try:
            if cached_tokens(self.draft_ctx, seq)[:len(tokens)] != tokens:
                raise ValueError("the draft sequence does not hold the checkpoint's tokens")
            mem.seq_rm(seq, len(tokens), -1)
            self.draft_ctx.state_seq_set(data, seq, STATE_SEQ_FLAGS_PARTIAL_ONLY)
        except Exception:  # noqa: BLE001
            mem.seq_rm(seq, -1, -1)
        cached_tokens(self.draft_ctx, seq)    # its token list follows the memory


class Slot:
    """One sequence of the shared context: its cached tokens and the task it runs."""

    def __init__(self, engine: "Engine", id_: int, n_ctx: int):
        self.engine, self.id, self.n_ctx = engine, id_, n_ctx
        self.cache: list[int] = []          # tokens whose K/V the context holds for seq `id`
        self.task: Task | None = None
        self.t_last_used = 0.0
        self.stats: dict = {}
        self.checkpoints: list[Checkpoint] = []   # SWA-only states, oldest first
        self.drafts: list[int] = []
        self.lora: tuple = engine.lora_base         # the adapter scales of this slot's cache

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.task is not None

    @property
    def prompting(self) -> bool:
        return self.busy and self.n_prompt_done < len(self.prompt)

    def start(self, task: Task) -> None:
        e, p = self.engine, task.params
        self.task, self.prompt, self.params = task, task.prompt, p
        lora = e.lora_scales(p.lora)
        if lora != self.lora:               # cached K/V were computed with other adapters
            self.cache.clear()
            self.checkpoints.clear()
            self.lora = lora
        n_past = self._reusable_prefix(task.prompt) if p.cache_prompt else 0
        e.memory.seq_rm(self.id, n_past, -1)
        del self.cache[n_past:]
        self.checkpoints = [c for c in self.checkpoints if c.n_tokens <= n_past]
        self.ckpt_marks = e.checkpoint_marks(n_past, len(task.prompt))
        self.drafts = []
        self.truncated = False
        if e.spec is not None:
            e.spec.begin(self.id, list(task.prompt))
        self.n_draft, self.n_draft_accepted, self.n_verif = 0, 0, 0
        self.n_accepted_per_pos: list[int] = []     # accepted drafts by position (metrics)
        self.n_prompt_done, self.n_cached = n_past, n_past
        self.sampler = e.new_sampler(p.sampling)
        for t in task.prompt:       # llama.cpp replays the prompt: penalties and DRY see it
            self.sampler.accept(t, False)   # (not the grammar: prompt tokens are not generated)
        self.budget = p.reasoning_budget.fresh() if p.reasoning_budget is not None else None
        if self.budget is not None:     # the reasoning budget sees the prompt (an open <think>)
            for t in task.prompt:
                self.budget.accept(t)
        self.sampled: int | None = None
        self.generated: list[int] = []
        self.text, self.n_sent, self.n_decoded = "", 0, 0
        self.utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.probs: list[TokenProb] = []
        self.n_probs_sent = 0
        self.t_start = time.perf_counter()
        self.t_prompt_done = self.t_last = self.t_start
        self.stats = {"id_task": task.id, "n_prompt_tokens": len(task.prompt),
                      "n_prompt_tokens_cache": n_past,
                      "n_prompt_tokens_processed": len(task.prompt) - n_past,
                      "params": p.settings}

    def _reusable_prefix(self, prompt: list[int]) -> int:
        """Longest common prefix with the cache, then (n_cache_reuse) the cached chunks moved
        into place after it, less one so the last prompt token is re-evaluated; when the SWA
        window of the first new token is no longer in the cache, the newest context checkpoint
        inside that prefix (or 0: full re-processing)."""
        n = _lcp(self.cache, prompt)
        n_reuse = self.params.n_cache_reuse
        if n_reuse > 0:
            if self.engine.memory.can_shift():
                n = self._reuse_chunks(prompt, n, n_reuse)
            else:
                log.warning(f"slot {self.id}: cache reuse is not supported - ignoring "
                            f"n_cache_reuse = {n_reuse}")
        n = min(n, len(prompt) - 1)
        if n == 0 or self.engine.window_ok(self.id, n):
            return n
        return self.engine.restore_checkpoint(self, n)

    def _reuse_chunks(self, prompt: list[int], n_past: int, n_reuse: int) -> int:
        """llama.cpp's cache reuse (server-context.cpp, n_cache_reuse): after the common prefix,
        every run of at least n_reuse cached tokens that matches the prompt at its current
        head is shifted into place (seq_rm of the cells in between, seq_add of the run: a
        K-shift at the next decode); cached tokens that match nothing are skipped. Returns the
        new n_past (the prefix plus the reused runs)."""
        mem, cache = self.engine.memory, self.cache
        head_c = head_p = n_past
        while head_c < len(cache) and head_p < len(prompt):
            n_match = 0
            while (head_c + n_match < len(cache) and head_p + n_match < len(prompt)
                   and cache[head_c + n_match] == prompt[head_p + n_match]):
                n_match += 1
            if n_match >= n_reuse:
                log.debug(f"slot {self.id}: reusing chunk with size {n_match}, shifting KV cache "
                          f"[{head_c}, {head_c + n_match}) -> [{head_p}, {head_p + n_match})")
                # context checkpoints past the first moved token no longer describe the cache
                self.checkpoints = [c for c in self.checkpoints if c.n_tokens <= head_p]
                mem.seq_rm(self.id, head_p, head_c)
                mem.seq_add(self.id, head_c, head_c + n_match, head_p - head_c)
                cache[head_p:head_p + n_match] = cache[head_c:head_c + n_match]
                n_past += n_match
                head_c += n_match
                head_p += n_match
            else:
                head_c += 1
        log.debug(f"slot {self.id}: after context reuse, new n_past = {n_past}")
        return n_past

    def release(self) -> None:
        self.task = None
        self.t_last_used = time.perf_counter()

    # -- the per-slot step (hooks for speculative decoding) ----------------------------------
    def propose(self, room: int) -> list[int]:
        """Tokens to decode after the cache this step, each with logits: the last sampled token,
        then the drafted tokens when speculating (at most room tokens in all)."""
        self.drafts = self.engine.draft(self, room) if self.engine.spec else []
        return [self.sampled] + self.drafts

    def prompt_chunk(self, budget: int) -> list[int]:
        """The next prompt tokens, ending at the next checkpoint mark (a chunk boundary)."""
        end = self.n_prompt_done + budget
        for m in self.ckpt_marks:
            if m > self.n_prompt_done:
                end = min(end, m)
                break
        return self.prompt[self.n_prompt_done:end]

    # -- results ------------------------------------------------------------------------------
    def on_prompt_chunk(self, chunk: list[int]) -> None:
        self.cache.extend(chunk)
        self.n_prompt_done += len(chunk)
        if self.n_prompt_done in self.ckpt_marks:
            self.engine.save_checkpoint(self)

    def on_generated_decoded(self, tokens: list[int]) -> None:
        self.cache.extend(tokens)

    def rollback(self, n_keep: int) -> None:
        """Forget everything after the first n_keep cached tokens (rejected draft tokens)."""
        self.engine.memory.seq_rm(self.id, n_keep, -1)
        del self.cache[n_keep:]
        if self.engine.spec:
            self.engine.spec.rollback(self.id, n_keep)

    def accept_logits(self, rows: list[np.ndarray]) -> list[int]:
        """The tokens this step emits, given the logits of the proposed tokens (one row per
        token: [sampled, d1..dN]). Chain acceptance (common_sampler_sample_and_accept_n): sample
        the slot's sampler at each row, accept while it equals the draft and is not an EOG
        before the last draft; the rejected drafts are rolled back. Plain decoding is N = 0."""
        drafts, eog = self.drafts, self.engine.vocab.eog_ids
        out: list[int] = []
        for i, logits in enumerate(rows[:len(drafts) + 1]):
            if self.budget is not None and self.task.end_reasoning:
                self.task.end_reasoning = False     # reasoning control: end the thinking now
                self.budget.force()
            forced = self.budget.forced() if self.budget is not None else None
            # a forced end-of-thinking token: every other logit is -inf (llama.cpp's budget)
            tok = forced if forced is not None else int(self.sampler.sample(logits))
            self.sampler.accept(tok)
            if self.budget is not None:
                self.budget.accept(tok)
            if self.params.n_probs:
                self.probs.append(self.engine.token_probs(self, logits, tok))
            out.append(tok)
            if i == len(drafts) or tok != drafts[i] or (tok in eog and i + 1 < len(drafts)):
                break
        if drafts:
            n_acc = len(out) - 1
            self.n_draft += len(drafts)
            self.n_draft_accepted += n_acc
            self.n_verif += 1
            self.engine.spec.accept(self.id, n_acc, len(drafts))
            per_pos = self.n_accepted_per_pos
            if len(per_pos) < max(self.engine.cfg.spec_n_max, len(drafts)):
                per_pos.extend([0] * (max(self.engine.cfg.spec_n_max, len(drafts)) -
                                      len(per_pos)))
            for k in range(min(n_acc, len(per_pos))):
                per_pos[k] += 1
            self.rollback(len(self.cache) - len(drafts) + n_acc)
        self.drafts = []
        return out

    def timings(self) -> Timings:
        return Timings(cache_n=self.n_cached, prompt_n=len(self.prompt) - self.n_cached,
                       prompt_ms=(self.t_prompt_done - self.t_start) * 1e3,
                       predicted_n=self.n_decoded,
                       predicted_ms=max((self.t_last - self.t_prompt_done) * 1e3,
                                        1e-3 if self.n_decoded else 0.0),
                       draft_n=getattr(self, "n_draft", 0),
                       draft_n_accepted=getattr(self, "n_draft_accepted", 0))

    def to_json(self) -> dict:
        d = {"id": self.id, "n_ctx": self.n_ctx, "speculative": self.engine.spec is not None,
             "is_processing": self.busy,
             "ctx_checkpoints": {"n": len(self.checkpoints),
                                 "size": sum(len(c.data) for c in self.checkpoints),
                                 "size_draft": sum(len(c.draft or b"")
                                                   for c in self.checkpoints)}}
        if self.stats:
            d.update(self.stats)
            # an idle slot reports no budget (the finished task's does not leak)
            d["next_token"] = [{"has_next_token": self.busy, "has_new_line": "\n" in
                                getattr(self, "text", ""),
                                "n_remain": self._n_remain() if self.busy else -1,
                                "n_decoded": getattr(self, "n_decoded", 0) if self.busy else 0}]
        return d

    def _n_remain(self) -> int:
        p = getattr(self, "params", None)
        if p is None or p.n_predict < 0:
            return -1
        return max(p.n_predict - getattr(self, "n_decoded", 0), 0)


def find_stop(text: str, stops: list[str], start: int) -> tuple[int, str]:
    """Earliest full match of a stop string at or after `start`: (index, word) or (-1, "")."""
    best, word = -1, ""
    for s in stops:
        i = text.find(s, max(0, start))
        if i >= 0 and (best < 0 or i < best):
            best, word = i, s
    return best, word


def partial_stop(text: str, stops: list[str]) -> int:
    """Length of the longest text suffix that is a proper prefix of a stop string."""
    n = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), n, -1):
            if text.endswith(s[:k]):
                n = k
                break
    return n


class Metrics:
    """llama.cpp's /metrics counters (server_metrics)."""

    def __init__(self):
        self.t_start = time.time()
        self.prompt_tokens_total = self.prompt_tokens_cached_total = 0
        self.prompt_seconds_total = 0.0
        self.tokens_predicted_total = 0
        self.tokens_predicted_seconds_total = 0.0
        self.n_decode_total = self.n_busy_slots_total = 0
        self.n_tokens_max = 0
        self.spec_draft_tokens_total = self.spec_accepted_tokens_total = 0
        self.spec_drafts_total = 0
        self.n_accepted_per_pos: list[int] = []
        self.bucket = [0, 0.0, 0, 0.0]     # prompt n, prompt s, predicted n, predicted s

    def add_per_pos(self, src: list[int]) -> None:
        """Accepted draft tokens per draft position, summed over tasks (llama.cpp's
        n_accepted_per_pos)."""
        dst = self.n_accepted_per_pos
        if len(dst) < len(src):
            dst.extend([0] * (len(src) - len(dst)))
        for i, v in enumerate(src):
            dst[i] += v

    def on_task_done(self, t: Timings) -> None:
        self.prompt_tokens_total += t.prompt_n
        self.prompt_tokens_cached_total += t.cache_n
        self.prompt_seconds_total += t.prompt_ms / 1e3
        self.tokens_predicted_total += t.predicted_n
        self.tokens_predicted_seconds_total += t.predicted_ms / 1e3
        self.spec_draft_tokens_total += t.draft_n
        self.spec_accepted_tokens_total += t.draft_n_accepted
        b = self.bucket
        b[0] += t.prompt_n
        b[1] += t.prompt_ms / 1e3
        b[2] += t.predicted_n
        b[3] += t.predicted_ms / 1e3

    def scrape(self) -> tuple[float, float, float]:
        """(prompt t/s, predicted t/s, busy slots per decode) since the previous scrape."""
        b = self.bucket
        pps = b[0] / b[1] if b[1] else 0.0
        tps = b[2] / b[3] if b[3] else 0.0
        busy = self.n_busy_slots_total / self.n_decode_total if self.n_decode_total else 0.0
        self.bucket = [0, 0.0, 0, 0.0]
        return pps, tps, busy


class Engine:
    """Owns Model and Context in one thread; handlers talk to it only through submit()/channels."""

    def __init__(self, config):
        self.cfg = config
        self.tasks: queue.Queue = queue.Queue()
        self.pending: list[Task] = []
        self.ready = threading.Event()
        self.finished = threading.Event()
        self.load_error: BaseException | None = None
        self.on_fatal = lambda: None
        self.metrics = Metrics()
        self.slots: list[Slot] = []
        self.awake = threading.Event()      # cleared while asleep (--sleep-idle-seconds)
        self.http_busy = lambda: False      # set by the HTTP side: a request is in flight
        self.t_last_task = time.monotonic()
        self._stop = False
        self._next_id = 0
        self.thread = threading.Thread(target=self._run, name="pyllama-engine", daemon=True)

    # -- public (any thread) --------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop = True
        self.tasks.put(None)
        if self.thread.is_alive():
            self.thread.join(timeout)

    def submit(self, task: Task) -> Task:
        self._next_id += 1
        task.id = self._next_id
        self.tasks.put(task)
        return task

    @property
    def n_busy(self) -> int:
        return sum(s.busy for s in self.slots)

    @property
    def n_deferred(self) -> int:
        return len(self.pending)

    def lora_info(self) -> tuple[list[str], list[str]]:
        """The inference gateway's LoRA adapter info: the names of the adapters (non-zero scale)
        that busy slots run with, and those that queued requests ask for."""
        names = getattr(self, "lora_names", ())

        def used(scales) -> set:
            return {i for i, sc in enumerate(scales or ()) if sc != 0.0 and i < len(names)}
        running = set().union(*(used(s.lora) for s in self.slots if s.busy))
        waiting = set().union(*(used(self.lora_scales(getattr(t.params, "lora", None)))
                                for t in list(self.pending)
                                if t.kind in ("completion", "embedding", "rerank")))
        return [names[i] for i in sorted(running)], [names[i] for i in sorted(waiting)]

    @property
    def kv_usage(self) -> float:
        """Fraction (0-1) of the KV cache held by requests in flight: the cells of the busy
        slots' sequences over the context's cells. An idle slot's cached prompt is not counted:
        the engine frees it when a batch needs the room (the inference gateway's
        KVCacheUtilization, like vLLM's kv_cache_usage_perc, counts only what is not free)."""
        ctx, slots = getattr(self, "ctx", None), self.slots
        if ctx is None or not ctx.n_ctx:
            return 0.0
        return min(1.0, sum(len(s.cache) for s in slots if s.busy) / ctx.n_ctx)

    # -- loading ---------------------------------------------------------------------------------
    def load(self) -> None:
        """Load the model, create the context (n_seq_max = slots) and the chat template."""
        import pyllama
        from pyllama.vocab.chat import ChatTemplate
        cfg = self.cfg
        t0 = time.perf_counter()
        self.model = pyllama.load_model(cfg.model, **_accepted(pyllama.load_model, {
            "n_threads": cfg.n_threads, **cfg.model_params}))
        self.vocab = self.model.vocab
        self.template = ChatTemplate.for_model(self.vocab, override=cfg.chat_template,
                                               jinja=cfg.jinja)
        n = cfg.n_slots
        if cfg.embeddings and cfg.n_batch > cfg.n_ubatch:   # embeddings: one ubatch per prompt
            log.warning(f"srv  llama_server: embeddings enabled with n_batch ({cfg.n_batch}) > "
                        f"n_ubatch ({cfg.n_ubatch})")
            log.warning(f"srv  llama_server: setting n_batch = n_ubatch = {cfg.n_ubatch} to "
                        "avoid assertion failure")
            cfg.n_batch = cfg.n_ubatch
        draft_model = self._load_draft_model() if cfg.spec_draft else None
        speculating = draft_model is not None or cfg.spec_ngram
        # rollbacks of up to n_max drafts stay exact in a shared SWA cache (--swa-extra, docs/architecture.md)
        extra = max(cfg.swa_extra, cfg.spec_n_max_all) if speculating else cfg.swa_extra
        self.ctx = pyllama.Context(self.model, n_ctx=cfg.n_ctx_pool, n_batch=cfg.n_batch,
                                   n_ubatch=cfg.n_ubatch, n_seq_max=n, swa_full=cfg.swa_full,
                                   swa_extra=extra, kv_unified=cfg.unified,
                                   type_k=cfg.type_k, type_v=cfg.type_v,
                                   n_threads=cfg.n_threads, numerics=cfg.numerics,
                                   kv_k_center=cfg.kv_k_center, flash_attn=cfg.flash_attn,
                                   pooling=cfg.pooling, rope=cfg.rope,
                                   **{**cfg.adapters, "lora_apply": False})
        # params_base.lora_adapters: the loaded adapters (ids = order) and the scales requests
        # without a `lora` field run with (POST /lora-adapters changes them; zero with
        # --lora-init-without-apply); each batch applies its lead slot's set (can_batch_with)
        self.loras = [a for a, _ in self.ctx.lora_adapters]
        # the names a request's `model` may give to pick one adapter (schemas.build_params)
        self.lora_names = tuple(os.path.basename(a.path).removesuffix(".gguf") for a in self.loras)
        apply_now = cfg.adapters.get("lora_apply", True)
        self.lora_base = tuple(s if apply_now else 0.0 for _, s in self.ctx.lora_adapters)
        self.memory = self.ctx.memory
        self.spec = None
        if speculating:
            dctx = None if draft_model is None else pyllama.Context(
                draft_model, n_ctx=self.ctx.n_ctx, n_batch=cfg.n_batch, n_ubatch=cfg.n_ubatch,
                n_seq_max=n, swa_full=cfg.swa_full, swa_extra=extra, kv_unified=cfg.unified,
                type_k=cfg.draft_type_k, type_v=cfg.draft_type_v, n_threads=cfg.n_threads,
                flash_attn=cfg.flash_attn)
            self.spec = Speculation(cfg, dctx, n, target=self.model)
        self.use_checkpoints = (cfg.n_ctx_checkpoints > 0 and not cfg.swa_full
                                and self.ctx.hp.is_swa_any())
        # llama.cpp's n_ctx_slot(): the context's n_ctx_seq (all of n_ctx when unified),
        # capped by --kv-unified-per-slot (llama.cpp also caps at n_ctx_train; not here yet)
        self.n_ctx_slot = self.ctx.n_ctx_seq
        if cfg.kv_unified_per_slot > 0:
            self.n_ctx_slot = min(self.n_ctx_slot, cfg.kv_unified_per_slot)
        self.slots = [Slot(self, i, self.n_ctx_slot) for i in range(n)]
        if cfg.ctx_shift and not self.memory.can_shift():
            # common_init_from_params, before the server's own check
            log.warning("cmn  common_init_: KV cache shifting is not supported for this "
                        "context, disabling KV cache shifting")
            cfg.ctx_shift = False
        if cfg.n_cache_reuse and not self.memory.can_shift():
            log.warning("srv  load_model: cache_reuse is not supported by this context, it will "
                        "be disabled")
            cfg.n_cache_reuse = 0
        self._setup_prompt_cache()
        self.sampling_defaults = self._sampling_defaults()
        if cfg.warmup:
            self._warmup()
        log.info("srv  llama_server: model loaded")
        log.info(f"srv  load_model: loaded {os.path.basename(self.model.path)} in "
                 f"{time.perf_counter() - t0:.2f} s; n_slots = {n}, n_ctx = {self.ctx.n_ctx}, "
                 f"n_ctx_slot = {self.n_ctx_slot}, kv_unified = {cfg.unified}")

    def _load_draft_model(self):
        """The draft model, or None (logged) when its vocabulary does not match the target's:
        the server then runs without speculation, as llama.cpp's does."""
        import pyllama
        from pyllama.errors import PyllamaError
        from pyllama.speculative import check_vocab_compatible
        cfg = self.cfg
        try:
            draft = pyllama.load_model(cfg.draft_model, **_accepted(
                pyllama.load_model, {"n_threads": cfg.n_threads, **cfg.model_params}))
            check_vocab_compatible(self.vocab, draft.vocab)
        except PyllamaError as e:
            log.error(f"srv  load_model: failed to initialize speculative decoding context: {e}")
            return None
        log.info(f"srv  load_model: draft model {os.path.basename(cfg.draft_model)} loaded, "
                 f"n_max = {cfg.spec_n_max}")
        return draft

    def lora_scales(self, request: dict | None) -> tuple:
        """construct_lora_list: the request's {id: scale} over the loaded adapters (unlisted:
        0), or the server's scales when the request has no `lora` field."""
        if not request:
            return self.lora_base
        return tuple(float(request.get(i, 0.0)) for i in range(len(self.loras)))

    def set_lora_base(self, scales: dict) -> None:
        """POST /lora-adapters: the scales of requests without a `lora` field from now on."""
        self.lora_base = self.lora_scales(scales) if scales else (0.0,) * len(self.loras)

    def _apply_lora(self, scales: tuple) -> None:
        if self.loras:
            self.ctx.set_adapters_lora(self.loras, scales)

    def _sampling_defaults(self):
        from pyllama.sampling import SamplerParams
        base = self.cfg.sampling if self.cfg.sampling is not None else SamplerParams()
        from_meta = getattr(SamplerParams, "from_gguf_metadata", None)
        return base if from_meta is None else from_meta(self.model.metadata, base=base)

    def _warmup(self) -> None:
        bos = self.vocab.bos if getattr(self.vocab, "bos", -1) >= 0 else 0
        self.ctx.eval([bos], seq_id=0)
        self.memory.clear()

    def new_sampler(self, params):
        from pyllama.sampling import SamplerChain
        return SamplerChain(params, self.model.n_vocab, eog_ids=tuple(self.vocab.eog_ids),
                            token_pieces=self._piece_text, n_ctx=self.n_ctx_slot,
                            n_ctx_train=getattr(self.model.hparams, "n_ctx_train", 0),
                            vocab=self.vocab)

    def _piece_text(self, tok: int) -> str:
        return self.model.token_to_piece(tok, True).decode("utf-8", "replace")

    def window_ok(self, seq: int, n_keep: int) -> bool:
        from pyllama.generate import window_ok
        return window_ok(self.ctx, seq, n_keep)

    # -- speculative decoding ----------------------------------------------------------------------
    def draft(self, slot: Slot, room: int) -> list[int]:
        """Draft tokens for a generating slot within llama.cpp's budget: only while
        n_ctx_slot - n_tokens - 2 > 0, at most n_remaining - 1, and N + 1 <= n_ubatch."""
        n_tokens = len(slot.cache)
        n = min(self.spec.n_max, slot.n_ctx - n_tokens - 2, self.ctx.n_ubatch - 1, room - 1)
        if slot.params.n_predict >= 0:
            n = min(n, slot.params.n_predict - slot.n_decoded - 1)
        if n <= 0 or n < self.spec.n_min:
            return []
        return self.spec.draft(slot.id, slot.cache + [slot.sampled], n)

    # -- SWA context checkpoints -------------------------------------------------------------------
    def checkpoint_marks(self, n_past: int, n_prompt: int) -> list[int]:
        """Prompt positions after which a checkpoint is saved (each ends a prompt chunk):
        4 + n_ubatch and 4 tokens before the prompt end (llama.cpp), and every
        --checkpoint-min-step tokens."""
        if not self.use_checkpoints:
            return []
        step = self.cfg.checkpoint_min_step
        marks = {n_prompt - 4 - self.ctx.n_ubatch, n_prompt - 4}
        if step > 0:
            marks.update(range(step, n_prompt - 4 - self.ctx.n_ubatch, step))
        return sorted(m for m in marks if m > n_past)

    def save_checkpoint(self, slot: Slot) -> None:
        from pyllama.kv import STATE_SEQ_FLAGS_PARTIAL_ONLY
        seq = slot.id
        ck = Checkpoint(len(slot.cache), self.memory.seq_pos_min(seq),
                        self.memory.seq_pos_max(seq),
                        self.ctx.state_seq_get(seq, STATE_SEQ_FLAGS_PARTIAL_ONLY),
                        self.spec.checkpoint(seq, slot.cache) if self.spec else None)
        cks = [c for c in slot.checkpoints if c.n_tokens != ck.n_tokens] + [ck]
        slot.checkpoints = cks[-self.cfg.n_ctx_checkpoints:]
        log.info(f"slot {slot.id}: created context checkpoint {len(slot.checkpoints)} of "
                 f"{self.cfg.n_ctx_checkpoints} (pos_min = {ck.pos_min}, pos_max = {ck.pos_max}, "
                 f"size = {len(ck.data) / 2**20:.3f} MiB)")

    def restore_checkpoint(self, slot: Slot, n_common: int) -> int:
        """The SWA cache lacks the window of position n_common: load the newest checkpoint taken
        within the common prefix (base cache cut after it, SWA part read back) and return its
        token count; 0 when none fits (full re-processing)."""
        from pyllama.kv import STATE_SEQ_FLAGS_PARTIAL_ONLY
        seq = slot.id
        for ck in reversed(slot.checkpoints):
            if ck.n_tokens > n_common:
                continue
            try:
                self.memory.seq_rm(seq, ck.n_tokens, -1)
                self.ctx.state_seq_set(ck.data, seq, STATE_SEQ_FLAGS_PARTIAL_ONLY)
            except Exception as e:  # noqa: BLE001 - the sequence is re-processed instead
                log.warning(f"slot {slot.id}: failed to restore context checkpoint: {e}")
                break
            if not self.window_ok(seq, ck.n_tokens):
                break
            if self.spec:
                self.spec.restore(seq, ck.draft, slot.cache[:ck.n_tokens])
            log.info(f"slot {slot.id}: restored context checkpoint (pos_min = {ck.pos_min}, "
                     f"pos_max = {ck.pos_max}, size = {len(ck.data) / 2**20:.3f} MiB)")
            return ck.n_tokens
        log.warning(f"slot {slot.id}: forcing full prompt re-processing due to lack of cache "
                    "data (likely due to SWA or hybrid/recurrent memory, see "
                    "https://github.com/ggml-org/llama.cpp/pull/13194#issuecomment-2868343055)")
        return 0

    # -- the loop ----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self.load()
        except BaseException as e:  # noqa: BLE001 - reported, then the server exits 1
            self.load_error = e
            log.error(f"srv  load_model: failed to load model: {e}")
            log.error("srv  llama_server: exiting due to model loading error")
            self.finished.set()
            self.on_fatal()
            return
        self.ready.set()
        self.awake.set()
        while not self._stop:
            self._collect(block=not (self.n_busy or self.pending))
            if self._stop:
                break
            if self.n_busy or self.pending:
                self.t_last_task = time.monotonic()
            else:
                sleep.maybe_sleep(self)      # --sleep-idle-seconds (pyllama/server/sleep.py)
                if self._stop:
                    break
            try:
                self.step()
            except Exception as e:  # noqa: BLE001 - one bad step must not kill the server
                log.error(f"srv  update_slots: {e}\n{traceback.format_exc()}")
                self._fail_busy(ServerError(500, str(e)))
        self.finished.set()

    def _collect(self, block: bool) -> None:
        try:
            item = self.tasks.get(timeout=0.5) if block else self.tasks.get_nowait()
            while True:
                if item is not None:
                    self.pending.append(item)
                item = self.tasks.get_nowait()
        except queue.Empty:
            pass

    def step(self) -> None:
        """One round: admit tasks, build one batch over all slots, decode, sample, emit."""
        self._drop_cancelled()
        self._admit()
        self._context_shift()
        import pyllama
        n_batch = self.ctx.n_batch
        while True:
            plan, tokens, pos, seqs, outs = self._build_batch(n_batch)
            if not tokens:
                return
            batch = pyllama.Batch(np.asarray(tokens, np.int32), pos=np.asarray(pos, np.int32),
                                  seq_ids=seqs, logits=np.asarray(outs, bool))
            self._apply_lora(plan[0][0].lora)   # common_set_adapter_lora(slot_batched->lora)
            rc = self.ctx.decode(batch)     # 1: no room, the memory is unchanged
            if rc == 0:
                break
            if rc == 1 and n_batch > 1:
                # llama.cpp's update_slots: free the idle slots' caches, else halve the batch,
                # and retry; a busy slot's stream fails only when not even one token fits
                if not self._clear_idle_slots():
                    n_batch //= 2
                log.warning("srv  update_slots: failed to find free space in the KV cache, "
                            f"retrying with smaller batch size, n_batch = {n_batch}")
                continue
            msg = {1: "Context size has been exceeded.", -1: "Invalid input batch."}.get(
                rc, "Compute error.")
            log.error(f"srv  update_slots: {msg} n_batch = {n_batch}, ret = {rc}")
            self._fail_slots([s for s, *_ in plan], ServerError(500, msg))
            return
        self.metrics.n_decode_total += 1
        self.metrics.n_busy_slots_total += self.n_busy
        self.metrics.n_tokens_max = max(self.metrics.n_tokens_max, len(tokens))
        self._after_decode(plan)

    def _context_shift(self) -> None:
        """llama.cpp's pre_decode: a generating slot whose cache would reach n_ctx with its next
        token drops n_discard tokens after n_keep (the request's n_keep, -1 the prompt, plus the
        BOS; at most n_ctx - 4; n_discard the request's or half of the rest) and moves the
        later ones back (K-shift). Only with --context-shift; without it generation stopped
        with "length" in _process_token."""
        if not self.cfg.ctx_shift:
            return
        add_bos = bool(getattr(self.vocab, "add_bos", False))
        for s in self.slots:
            if not (s.busy and not s.prompting and s.sampled is not None
                    and len(s.cache) + 1 >= s.n_ctx):
                continue
            p = s.params
            n_keep = len(s.prompt) if p.n_keep < 0 else p.n_keep
            n_keep = min(s.n_ctx - 4, n_keep + add_bos)
            n_left = len(s.cache) - n_keep
            n_discard = p.n_discard or n_left // 2
            n_discard = max(0, min(n_discard, max(0, n_left - 1)))
            log.warning(f"slot {s.id}: slot context shift, n_keep = {n_keep}, n_left = {n_left}, "
                        f"n_discard = {n_discard}")
            self.memory.seq_rm(s.id, n_keep, n_keep + n_discard)
            self.memory.seq_add(s.id, n_keep + n_discard, len(s.cache), -n_discard)
            del s.cache[n_keep:n_keep + n_discard]
            s.checkpoints.clear()
            if self.spec is not None:
                self.spec.rollback(s.id, n_keep)
            s.truncated = True

    def _clear_idle_slots(self) -> bool:
        """llama.cpp's try_clear_idle_slots: drop the cached tokens of idle slots to make room;
        True when something was freed."""
        freed = False
        for s in self.slots:
            if not s.busy and s.cache:
                self.memory.seq_rm(s.id, -1, -1)
                s.cache.clear()
                s.checkpoints.clear()
                freed = True
        return freed

    def _build_batch(self, n_batch: int | None = None):
        n_batch = self.ctx.n_batch if n_batch is None else n_batch
        plan, tokens, pos, seqs, outs = [], [], [], [], []
        lead = None         # llama.cpp's slot_batched: only slots with its adapters join
        for s in self.slots:
            if s.busy and not s.prompting and s.sampled is not None and len(tokens) < n_batch:
                if lead is not None and s.lora != lead:
                    continue
                lead = s.lora
                prop = s.propose(n_batch - len(tokens))
                plan.append((s, "gen", len(tokens), prop))
                self._add(tokens, pos, seqs, outs, s, prop, [True] * len(prop))
        budget = n_batch - len(tokens)
        for s in self.slots:
            if budget <= 0:
                break
            if s.prompting:
                if lead is not None and s.lora != lead:
                    continue
                lead = s.lora
                chunk = s.prompt_chunk(budget)
                last = s.n_prompt_done + len(chunk) == len(s.prompt)
                plan.append((s, "prompt", len(tokens), chunk))
                self._add(tokens, pos, seqs, outs, s, chunk,
                          [False] * (len(chunk) - 1) + [last])
                budget -= len(chunk)
        return plan, tokens, pos, seqs, outs

    @staticmethod
    def _add(tokens, pos, seqs, outs, slot: Slot, toks: list[int], flags: list[bool]) -> None:
        p0 = len(slot.cache)
        tokens.extend(toks)
        pos.extend(range(p0, p0 + len(toks)))
        seqs.extend([slot.id] * len(toks))
        outs.extend(flags)

    def _after_decode(self, plan) -> None:
        for slot, kind, i0, toks in plan:
            if kind == "gen":
                slot.on_generated_decoded(toks)
                rows = [self.ctx.get_logits_ith(i0 + k) for k in range(len(toks))]
            else:
                slot.on_prompt_chunk(toks)
                self._send_progress(slot)
                if slot.prompting:
                    continue
                slot.t_prompt_done = time.perf_counter()
                if slot.params.n_predict == 0:
                    self._finish(slot, "limit")
                    continue
                rows = [self.ctx.get_logits_ith(i0 + len(toks) - 1)]
            out = slot.accept_logits(rows)
            for j, tok in enumerate(out):    # the tokens before the last are already cached
                if self._process_token(slot, tok, len(slot.cache) - (len(out) - 1 - j)):
                    break

    # -- per token (llama.cpp process_token) --------------------------------------------------------
    def _process_token(self, slot: Slot, tok: int, n_cache: int) -> bool:
        """Append one sampled token (sampled with n_cache tokens in the cache); returns True when
        the slot's task ended."""
        p = slot.params
        slot.sampled = tok
        slot.generated.append(tok)
        slot.n_decoded += 1
        slot.t_last = time.perf_counter()
        eog = tok in self.vocab.eog_ids
        prev = len(slot.text)
        if self.cfg.special or not eog:
            slot.text += slot.utf8.decode(self.model.token_to_piece(tok, self.cfg.special))
        stop = None
        if p.stop:
            i, word = find_stop(slot.text, p.stop, prev - max(map(len, p.stop)))
            if i >= 0:
                slot.text, slot.stopping_word, stop = slot.text[:i], word, "word"
        if stop is None and eog:
            stop = "eos"
        if stop is None and 0 <= p.n_predict <= slot.n_decoded:
            stop = "limit"
        if stop is None and not self.cfg.ctx_shift and n_cache + 1 >= slot.n_ctx:
            slot.truncated, stop = True, "limit"
        if stop is None and self._timed_out(slot):
            stop = "limit"
        if stop is None:
            self._send_partial(slot, hold=partial_stop(slot.text, p.stop) if p.stop else 0)
            return False
        self._finish(slot, stop)
        return True

    def _timed_out(self, slot: Slot) -> bool:
        p = slot.params
        if p.t_max_predict_ms > 0 and "\n" in slot.text:
            return (slot.t_last - slot.t_prompt_done) * 1e3 > p.t_max_predict_ms
        return time.perf_counter() - slot.task.t_submit > self.cfg.timeout

    def _send_partial(self, slot: Slot, hold: int = 0) -> None:
        if not slot.params.stream:
            return
        end = len(slot.text) - hold
        text = slot.text[slot.n_sent:end] if end > slot.n_sent else ""
        new_probs = slot.probs[slot.n_probs_sent:]
        slot.n_sent = max(slot.n_sent, end)
        slot.n_probs_sent = len(slot.probs)
        slot.task.channel.put(Partial(
            slot.task.index, text, [slot.generated[-1]] if slot.generated else [], new_probs,
            slot.n_decoded, len(slot.prompt),
            slot.timings() if slot.params.timings_per_token else None, slot.n_cached))

    @staticmethod
    def _send_progress(slot: Slot) -> None:
        if slot.params.stream and slot.params.return_progress:
            ms = (time.perf_counter() - slot.t_start) * 1e3
            t = None
            if slot.params.timings_per_token:   # the prompt so far; nothing predicted yet
                done = slot.n_prompt_done - slot.n_cached
                t = Timings(cache_n=slot.n_cached, prompt_n=done,
                            prompt_ms=ms if done > 0 else 0.0)
            slot.task.channel.put(Progress(
                slot.task.index, len(slot.prompt), slot.n_cached, slot.n_prompt_done, ms, t))

    def _finish(self, slot: Slot, stop_type: str) -> None:
        task, p = slot.task, slot.params
        slot.text += slot.utf8.decode(b"", final=True)
        if p.stream and slot.n_sent < len(slot.text):
            self._send_partial(slot)
        t = slot.timings()
        self.metrics.on_task_done(t)
        self.metrics.add_per_pos(getattr(slot, "n_accepted_per_pos", []))
        if t.draft_n:
            self.metrics.spec_drafts_total += slot.n_verif
            log.info(f"slot print_timings: id {slot.id:2d} | task {task.id} | draft acceptance = "
                     f"{t.draft_n_accepted / t.draft_n:0.5f} ({t.draft_n_accepted:5d} accepted / "
                     f"{t.draft_n:5d} generated), mean len = "
                     f"{1 + t.draft_n_accepted / max(slot.n_verif, 1):5.2f}")
        slot.release()   # before the result goes out: a client may ask /slots right after
        task.channel.put(Final(
            index=task.index, text=slot.text, tokens=list(slot.generated), stop_type=stop_type,
            stopping_word=getattr(slot, "stopping_word", "") if stop_type == "word" else "",
            n_prompt=len(slot.prompt), n_decoded=slot.n_decoded,
            n_cached=len(slot.cache), timings=t, probs=list(slot.probs), id_slot=slot.id,
            truncated=getattr(slot, "truncated", False), settings=p.settings,
            prompt=self.model.detokenize(slot.prompt, False, True)))   # special tokens shown

    def token_probs(self, slot: Slot, logits: np.ndarray, tok: int) -> TokenProb:
        """Top-n probabilities of this position: softmax of the raw logits (llama.cpp default) or
        the sampler's final candidates with post_sampling_probs."""
        n = slot.params.n_probs
        post = slot.params.post_sampling_probs
        cand = getattr(slot.sampler, "last_candidates", None) if post else None
        if cand is not None:
            ids, probs = (np.asarray(a) for a in cand)
            vals = {int(i): float(p) for i, p in zip(ids, probs)}
            top = sorted(vals.items(), key=lambda kv: (-kv[1], kv[0]))[:n]
            chosen = vals.get(tok, 0.0)
        else:
            x = logits.astype(np.float64)
            lse = np.log(np.sum(np.exp(x - x.max()))) + x.max()
            k = min(n, len(x))
            idx = np.argpartition(-x, k - 1)[:k]
            idx = idx[np.lexsort((idx, -x[idx]))]
            top = [(int(i), float(x[i] - lse)) for i in idx]
            chosen = float(x[tok] - lse)
        piece = self.model.token_to_piece
        return TokenProb(tok, piece(tok, True), _finite(chosen),
                         [(i, piece(i, True), _finite(v)) for i, v in top])

    # -- admission -------------------------------------------------------------------------------
    def _drop_cancelled(self) -> None:
        self.pending = [t for t in self.pending if not t.cancelled]
        for s in self.slots:
            if s.busy and s.task.cancelled:
                log.info(f"slot {s.id}: task {s.task.id} cancelled")
                s.release()

    def _admit(self) -> None:
        keep = []
        for task in self.pending:
            slot = self._pick_slot(task)
            if slot is None:
                keep.append(task)
                continue
            try:
                if task.kind == "completion":
                    slot.start(task)
                    self._send_progress(slot)   # llama.cpp's initial report: processed = cache
                    log.info(f"slot {slot.id}: launching task {task.id}, n_prompt = "
                             f"{len(task.prompt)}, n_cached = {slot.n_cached}")
                elif task.kind in ("embedding", "rerank"):
                    self._embed(slot, task)
                else:
                    self._slot_action(slot, task)
                if task.kind == "completion" and self.cache_idle_slots:
                    self._cache_idle_slots()
            except Exception as e:  # noqa: BLE001
                if slot.task is task:
                    slot.release()
                task.channel.put(e if isinstance(e, ServerError) else ServerError(500, str(e)))
        self.pending = keep

    def _pick_slot(self, task: Task) -> Slot | None:
        """llama.cpp's get_available_slot: the requested slot, else the most similar idle one,
        else the least recently used; with the prompt cache, a slot taken by LRU or about to
        lose more than half of its tokens saves them and loads the best cached prompt."""
        want = task.params.id_slot if task.kind == "completion" else task.id_slot
        if want is not None and want >= 0:
            if want >= len(self.slots):   # checked by the handler; never wait forever
                task.channel.put(ServerError(400, f"Invalid slot id {want}"))
                task.cancelled = True
                return None
            s = self.slots[want]
            if s.busy:
                return None
            candidates, chosen = [s], s
        else:
            candidates = [s for s in self.slots if not s.busy]
            if not candidates:
                return None
            chosen = None
        best, best_n = None, 0
        if self.cfg.slot_prompt_similarity != 0:
            for s in candidates:
                n = _lcp(s.cache, task.prompt)
                if n > best_n and n / max(len(task.prompt), 1) > self.cfg.slot_prompt_similarity:
                    best, best_n = s, n
        update = False
        if best is not None:
            chosen = best
            update = best_n / len(best.cache) < 0.5
        elif chosen is None:
            chosen = min(candidates, key=lambda s: s.t_last_used)
            update = True
        if update and self.prompt_cache is not None and task.kind == "completion":
            self._update_prompt_cache(chosen, task.prompt)
        return chosen

    # -- host-memory prompt cache (pyllama/server/prompt_cache.py) --------------------------------
    def _setup_prompt_cache(self) -> None:
        from .prompt_cache import PromptCache
        cfg = self.cfg
        self.prompt_cache = None
        if cfg.cache_ram_mib != 0:
            limit = "no limit" if cfg.cache_ram_mib < 0 else f"{cfg.cache_ram_mib} MiB"
            log.debug(f"srv  load_model: prompt cache is enabled, size limit: {limit}")
            log.debug("srv  load_model: use `--cache-ram 0` to disable the prompt cache")
            self.prompt_cache = PromptCache(cfg.cache_ram_mib, self.ctx.n_ctx)
        else:
            log.debug("srv  load_model: prompt cache is disabled - use `--cache-ram N` to "
                      "enable it")
        self.cache_idle_slots = cfg.cache_idle_slots
        if self.cache_idle_slots:
            if self.prompt_cache is None:
                log.warning("srv  load_model: --cache-idle-slots requires --cache-ram, disabling")
                self.cache_idle_slots = False
            else:
                log.debug("srv  load_model: idle slots will be saved to prompt cache"
                          + (" and cleared" if self.cfg.unified else "")
                          + " upon starting a new task")
                log.debug("srv  load_model: __TEST_TAG_CACHE_IDLE_SLOTS_ENABLED__")

    def _seq_state(self, seq: int) -> tuple:
        dctx = self.spec.draft_ctx if self.spec is not None else None
        return (self.ctx.state_seq_get(seq),
                dctx.state_seq_get(seq) if dctx is not None else b"")

    def _set_seq_state(self, seq: int, data: tuple) -> bool:
        self.memory.seq_rm(seq, -1, -1)
        if self.ctx.state_seq_set(data[0], seq) != len(data[0]):
            return False
        dctx = self.spec.draft_ctx if self.spec is not None else None
        if data[1] and dctx is not None:
            dctx.memory.seq_rm(seq, -1, -1)
            if dctx.state_seq_set(data[1], seq) != len(data[1]):
                return False
        return True

    def _prompt_save(self, slot: Slot) -> bool:
        return self.prompt_cache.save(slot.cache, slot.checkpoints,
                                      lambda: self._seq_state(slot.id))

    def _prompt_clear(self, slot: Slot) -> None:
        log.debug(f"slot {slot.id}: clearing prompt with {len(slot.cache)} tokens")
        self.memory.seq_rm(slot.id, -1, -1)
        slot.cache.clear()
        slot.checkpoints.clear()

    def _update_prompt_cache(self, slot: Slot, prompt: list[int]) -> None:
        log.debug("srv  get_available_slot: updating prompt cache")
        t0 = time.perf_counter()
        self._prompt_save(slot)
        ok, entry = self.prompt_cache.load(slot.cache, prompt,
                                           lambda data: self._set_seq_state(slot.id, data))
        if not ok:
            log.warning(f"slot {slot.id}: failed to load prompt from cache")
            self._prompt_clear(slot)
        elif entry is not None:
            slot.cache[:] = entry.tokens
            slot.checkpoints = list(entry.checkpoints)
        self.prompt_cache.update()
        log.debug(f"srv  get_available_slot: prompt cache update took "
                  f"{(time.perf_counter() - t0) * 1000:.2f} ms")

    def _cache_idle_slots(self) -> None:
        """After a launch: every idle slot's prompt into the cache; with a unified KV cache the
        slot is cleared too, its room going to the running ones."""
        for s in self.slots:
            if not s.busy:
                log.debug(f"slot {s.id}: saving idle slot to prompt cache")
                if self._prompt_save(s):
                    log.debug(f"slot {s.id}: __TEST_TAG_CACHE_IDLE_SLOT__")
                    self.prompt_cache.update()
                if self.cfg.unified:
                    self._prompt_clear(s)

    def _fail_busy(self, err: ServerError) -> None:
        self._fail_slots([s for s in self.slots if s.busy], err)

    def _fail_slots(self, slots, err: ServerError) -> None:
        for s in set(slots):
            if s.busy:
                s.task.channel.put(err)
                s.release()
            self.memory.seq_rm(s.id, -1, -1)
            s.cache.clear()
            s.checkpoints.clear()

    # -- embeddings and rerank (stateless tasks) ---------------------------------------------------
    def _embed(self, slot: Slot, task: Task) -> None:
        """Decode the whole prompt in one ubatch with embeddings on (every token an output) in the
        slot's sequence, send the per-token (pooling none) or pooled and normalised vectors (or the
        rerank score), and forget the sequence (llama.cpp send_embedding / send_rerank)."""
        import pyllama
        from pyllama.embedding import normalize
        toks, n_ub = task.prompt, self.ctx.n_ubatch
        if len(toks) > n_ub:
            raise ServerError(500, f"input ({len(toks)} tokens) is too large to process. increase "
                                   f"the physical batch size (current batch size: {n_ub})")
        if len(toks) > slot.n_ctx:
            raise exceed_context(len(toks), slot.n_ctx, (
                f"input ({len(toks)} tokens) is larger than the max context size "
                f"({slot.n_ctx} tokens). skipping"))
        self.memory.seq_rm(slot.id, -1, -1)
        slot.cache.clear()
        slot.checkpoints.clear()
        self.ctx.set_embeddings(True)
        self._apply_lora(self.lora_scales(getattr(task.params, "lora", None)))
        slot.lora = None                    # the sequence is forgotten below
        try:
            rc = self.ctx.decode(pyllama.Batch(np.asarray(toks, np.int32),
                                               pos=np.arange(len(toks), dtype=np.int32),
                                               seq_ids=[slot.id] * len(toks)))
            if rc != 0:
                raise ServerError(500, "failed to find a memory slot" if rc == 1
                                  else f"decode failed ({rc})")
            if self.ctx.pooling == "none":
                vecs = [self.ctx.get_embeddings_ith(i).copy() for i in range(len(toks))]
            else:
                v = self.ctx.get_embeddings_seq(slot.id)
                vecs = [v if task.kind == "rerank" else normalize(v, task.params.embd_normalize)]
        finally:
            self.ctx.set_embeddings(False)
            self.memory.seq_rm(slot.id, -1, -1)
        score = float(vecs[0][0]) if task.kind == "rerank" else 0.0
        task.channel.put(EmbdResult(task.index, vecs, len(toks), score))

    # -- slot save / restore / erase ---------------------------------------------------------------
    def _slot_action(self, slot: Slot, task: Task) -> None:
        t0 = time.perf_counter()
        if task.kind == "save":
            res = self._save(slot, task.filename, t0)
        elif task.kind == "restore":
            res = self._restore(slot, task.filename, t0)
        else:
            n = len(slot.cache)
            self.memory.seq_rm(slot.id, -1, -1)
            slot.cache.clear()
            slot.checkpoints.clear()
            res = {"id_slot": slot.id, "n_erased": n}
        task.channel.put(res)

    def _save(self, slot: Slot, filename: str, t0: float) -> dict:
        """llama_state_seq_save_file's bytes. The file is created inside --slot-save-path and
        never through a symlink; any failure is llama.cpp's 500 "Unable to save slot" (the
        reason, with the path, goes to the log only)."""
        state = self.ctx.state_seq_get(slot.id)
        data = (SLOT_FILE_MAGIC + struct.pack("<I", len(slot.cache)) +
                np.asarray(slot.cache, np.int32).tobytes() + state)
        try:
            fd = _open_in_dir(self.cfg.slot_save_path or ".", filename,
                              os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except OSError as e:
            log.warning(f"slot {slot.id}: cannot save {filename!r}: {e}")
            raise ServerError(500, "Unable to save slot")
        return {"id_slot": slot.id, "filename": filename, "n_saved": len(slot.cache),
                "n_written": len(data), "timings": {"save_ms": _ms(t0)}}

    def _restore(self, slot: Slot, filename: str, t0: float) -> dict:
        """Read and check the whole file first (magic, token count, ids within the vocabulary,
        the state consumed exactly and holding positions 0..n-1 of the sequence); on any
        mismatch 400 and the slot keeps what it had."""
        def fail(why: str) -> ServerError:
            return ServerError(400, f"Unable to restore slot: {why}")
        try:
            fd = _open_in_dir(self.cfg.slot_save_path or ".", filename, os.O_RDONLY)
            with os.fdopen(fd, "rb") as f:
                data = f.read()
        except OSError:
            raise fail(f"cannot open {filename}")
        if len(data) < 12 or data[:8] not in (SLOT_FILE_MAGIC, _OLD_SLOT_FILE_MAGIC):
            raise fail("not a slot file (llama.cpp's ggsq version 3)")
        (n,) = struct.unpack_from("<I", data, 8)
        if 12 + 4 * n > len(data):
            raise fail(f"the file is too short for its {n} tokens")
        if n > slot.n_ctx:
            raise fail("Restored prompt does not fit in the slot context")
        ids = np.frombuffer(data, np.int32, n, 12)
        if n and (int(ids.min()) < 0 or int(ids.max()) >= self.model.n_vocab):
            raise fail("Invalid tokens in slot save file")
        state = data[12 + 4 * n:]
        before = self.ctx.state_seq_get(slot.id)
        try:
            self.memory.seq_rm(slot.id, -1, -1)
            used = self.ctx.state_seq_set(state, slot.id)
            why = self._restored_mismatch(slot.id, n, used, len(state))
        except Exception as e:  # noqa: BLE001 - a corrupt state: put the slot back
            why = str(e) or type(e).__name__
        if why:
            self.memory.seq_rm(slot.id, -1, -1)
            self.ctx.state_seq_set(before, slot.id)
            raise fail(why)
        slot.cache[:] = ids.tolist()
        slot.checkpoints.clear()      # they belonged to the tokens just replaced
        return {"id_slot": slot.id, "filename": filename, "n_restored": n,
                "n_read": len(data), "timings": {"restore_ms": _ms(t0)}}

    def _restored_mismatch(self, seq: int, n: int, used, size: int) -> str:
        """Why the sequence just read does not hold exactly the file's n tokens ("" if it does)."""
        if used is not None and used != size:
            return f"the state has {size - used} bytes past its end"
        full = getattr(self.memory, "base", self.memory)
        cells = full.cells[full.seq_to_stream(seq)]
        pos = np.sort(cells.pos[cells.has[seq]])
        if self.memory.seq_pos_max(seq) != n - 1:
            return (f"the file has {n} tokens but its state ends at position "
                    f"{self.memory.seq_pos_max(seq)}")
        if full.swa_type == 0 and not np.array_equal(pos, np.arange(n)):
            return f"the file has {n} tokens but its state holds {len(pos)} positions"
        return ""


def _open_in_dir(directory: str, name: str, flags: int) -> int:
    """A file descriptor for directory/name that never follows a symlink: the name must be a
    plain file name (checked by the handler), O_NOFOLLOW refuses a symlink, and a directory or
    other non-regular file is refused."""
    fd = os.open(os.path.join(directory, name), flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                 0o644)
    import stat
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise IsADirectoryError(f"{name} is not a regular file")
    return fd


def _accepted(fn, kwargs: dict) -> dict:
    """The kwargs fn declares (load_model grows options over time: -ngl, backend, ...)."""
    import inspect
    params = inspect.signature(fn).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


def _lcp(a: list[int], b: list[int]) -> int:
    n, lim = 0, min(len(a), len(b))
    while n < lim and a[n] == b[n]:
        n += 1
    return n


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def _finite(v: float) -> float:
    return v if np.isfinite(v) else float(np.finfo(np.float32).min)
