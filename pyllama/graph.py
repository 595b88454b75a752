"""The op vocabulary architecture code sees for one ubatch.

Architecture files call only this facade: they never see a backend implementation, the KV cache
layout or the batch. One Graph is built per ubatch by the Context; it carries the token positions, the
cells where this ubatch's K/V rows go and, per cache, the attention plan (which cells each token reads,
in position order).
"""
from __future__ import annotations

import math

import numpy as np

from .backend import compat as llama_cpp_numerics
from .backend.base import Backend, Weight, as_matrix, expert_weight
from .backend.ref import ggml_sigmoid, moe_expert_weights, moe_group_mask, moe_top_k
from .hparams import HParams


class Graph:
    def __init__(self, backend: Backend, hp: HParams, memory, ubatch, out_idx: np.ndarray,
                 numerics: str = "invariant", flash_attn: bool = False,
                 want_logits: bool = True, loras: tuple = (), cvec=None, one_row: bool = False):
        self.be = backend
        self.llama_cpp = numerics == "llama.cpp"    # llama.cpp's row-count dependent kernels
        # llama.cpp numerics, one_row: every row computed with the arithmetic of a one-token
        # decode (kernels chosen as for one row, attention per query over its own KV view):
        # speculative verification rows then equal consecutive one-token decodes bit for bit
        self.one_row = one_row and self.llama_cpp
        self.flash_attn = flash_attn                # with llama_cpp: its flash-attention kernels
        self._views: dict = {}                      # id(cache) -> its KV view for this ubatch
        self.hp = hp
        self.memory = memory
        self.n_tokens = ubatch.n_tokens
        self.tokens = ubatch.tokens
        self.pos = np.ascontiguousarray(ubatch.pos, dtype=np.int32)
        self.out_idx = out_idx            # int32[n_out]: ubatch rows whose logits are wanted
        self.want_logits = want_logits    # False: the forward pass stops after result_norm
        self.embd = None                  # [n_out, n_embd] result_norm rows (llama.cpp t_embd)
        self.loras = loras                # ((LoraAdapter, user scale), ...), pyllama/adapter.py
        self.cvec = cvec                  # ControlVector or None
        memory.apply_ubatch(ubatch)
        self._ubatch = ubatch

    # -- inputs -------------------------------------------------------------------------
    def embed(self, w: Weight) -> np.ndarray:
        """[n_tokens, n_embd] rows of the embedding matrix for this ubatch's tokens, plus the
        LoRA deltas of the adapters on it (build_inp_embd: B times rows of the transposed A,
        scaled, added)."""
        x = self.be.get_rows(w, self.tokens)
        for ad, s in self.loras:
            lw = ad.ab.get(w.name)
            if lw is not None:
                d = self._lora_mm(lw.b, self.be.get_rows(lw.a, self.tokens))
                x = self.be.add(x, self.be.scale(d, lw.scale(ad.alpha, s)))
        return x

    # -- elementwise / norms ------------------------------------------------------------
    def rms_norm(self, x: np.ndarray, w: Weight | None, eps: float | None = None) -> np.ndarray:
        e = self.hp.f_norm_rms_eps if eps is None else eps
        return self.be.rms_norm(x, None if w is None else self.be.vec(w), e)

    def matmul(self, w: Weight, x: np.ndarray, bias: Weight | None = None,
               lora: bool = True) -> np.ndarray:
        """build_lora_mm (+ bias); lora=False: a plain ggml_mul_mat, which LoRA adapters do not
        touch (deepseek2's q / kv projections and output)."""
        if len(w.shape) == 1:                 # a vector weight: the [1, cols] matrix (qwen2moe)
            w = as_matrix(w)
        y = (llama_cpp_numerics.matmul(self.be, w, x, self.one_row) if self.llama_cpp
             else self.be.matmul(w, x))
        if lora and self.loras:
            y = self._lora_add(y, w, x)   # build_lora_mm: the adapters before the bias
        if bias is not None:
            y = self.be.add(y, self.be.vec(bias))
        return y

    def matmuls(self, ws, x: np.ndarray, biases=None) -> list:
        """[matmul(w, x, b) for w, b in zip(ws, biases)]: weights that read the same
        activations (q/k/v, gate/up) in one backend call when the numerics allow it (same bits
        as separate matmuls)."""
        if biases is None:
            biases = (None,) * len(ws)
        if self.llama_cpp and not llama_cpp_numerics.plain_matmuls(ws, x, self.one_row):
            return [self.matmul(w, x, b) for w, b in zip(ws, biases)]
        if any(len(w.shape) == 1 for w in ws):
            return [self.matmul(w, x, b) for w, b in zip(ws, biases)]
        ys = self.be.matmul_many(ws, x)
        if not self.loras and not any(b is not None for b in biases):
            return ys
        return [self._bias(self._lora_add(y, w, x), b) for y, w, b in zip(ys, ws, biases)]

    def _lora_add(self, y: np.ndarray, w: Weight, x: np.ndarray) -> np.ndarray:
        """build_lora_mm after W x: y + scale * (B (A x)) for each adapter on w."""
        for ad, s in self.loras:
            lw = ad.ab.get(w.name)
            if lw is not None:
                ab = self._lora_mm(lw.b, self._lora_mm(lw.a, x))
                y = self.be.add(y, self.be.scale(ab, lw.scale(ad.alpha, s)))
        return y

    def _bias(self, y: np.ndarray, bias: Weight | None) -> np.ndarray:
        return y if bias is None else self.be.add(y, self.be.vec(bias))

    def _lora_mm(self, w: Weight, x: np.ndarray) -> np.ndarray:
        """A LoRA factor times x (in the llama.cpp numerics F32/F16 factors that tinyBLAS
        refuses, k = rank % 8 or rows = rank % 4, take ggml_vec_dot_*: backend/compat.py)."""
        return (llama_cpp_numerics.matmul(self.be, w, x, self.one_row) if self.llama_cpp
                else self.be.matmul(w, x))

    def cvec_add(self, x: np.ndarray, il: int) -> np.ndarray:
        """build_cvec: layer il's control vector added to the layer output (when in range)."""
        if self.cvec is None:
            return x
        t = self.cvec.tensor_for(il)
        return x if t is None else self.be.add(x, t)

    def add(self, a, b):
        return self.be.add(a, b)

    def mul(self, a, b):
        return self.be.mul(a, b)

    def scale(self, x, s: float):
        return self.be.scale(x, s)

    def geglu(self, gate, up):
        return self.be.geglu(gate, up)

    def swiglu(self, gate, up):
        return self.be.swiglu(gate, up)

    def softcap(self, x, cap: float):
        return self.be.softcap(x, cap)

    def softmax(self, x):
        return self.be.softmax(x)

    def silu(self, x):
        return self.be.silu(x)

    def div(self, a, b):
        """a / b elementwise in f32 (ggml_div)."""
        return self.be.div(a, b)

    def attn_temperature(self, temp_scale: float, floor_scale: int,
                         offset: float = 0.0) -> np.ndarray:
        """llm_graph_input_attn_temp (Llama 4 / Mistral 3): per token log(floor((pos + offset) /
        floor_scale) + 1) * temp_scale + 1 (the quotient in f32, the rest in double, stored as
        f32), shaped [n_tokens, 1, 1] to scale Q; offset f_attn_temp_offset (Llama 4: 1)."""
        p = self.pos.astype(np.float32) + np.float32(offset)
        f = np.floor((p / np.float32(floor_scale)).astype(np.float32)).astype(np.float64)
        s = np.log(f + 1.0) * np.float64(np.float32(temp_scale)) + 1.0
        return s.astype(np.float32).reshape(-1, 1, 1)

    # -- mixture of experts ---------------------------------------------------------------
    def matmul_heads(self, w: Weight, x: np.ndarray, src1_contiguous: bool = True) -> np.ndarray:
        """ggml_mul_mat with a 3-D weight w [n_head, rows, cols]: x [n, n_head, cols] ->
        [n, n_head, rows], head h by w[h] (MLA's attn_k_b / attn_v_b). src1_contiguous: whether
        llama.cpp's src1 is contiguous (its F32 kernel choice depends on it)."""
        if self.llama_cpp:
            return llama_cpp_numerics.matmul_heads(self.be, w, x, src1_contiguous, self.one_row)
        out = np.empty((x.shape[0], x.shape[1], w.shape[1]), np.float32)
        for h in range(x.shape[1]):
            out[:, h] = self.be.matmul(expert_weight(w, h), np.ascontiguousarray(x[:, h]))
        return out

    @staticmethod
    def sigmoid(x: np.ndarray) -> np.ndarray:
        """ggml_sigmoid (backend.ref.ggml_sigmoid)."""
        return ggml_sigmoid(x)

    @staticmethod
    def moe_group_mask(sel: np.ndarray, n_groups: int, n_group_used: int) -> np.ndarray:
        """build_moe_ffn's expert-group limit (backend.ref.moe_group_mask)."""
        return moe_group_mask(sel, n_groups, n_group_used)

    def mul_mat_id(self, w: Weight, x: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """x [n, m, cols] by the experts ids [n, k] of w [n_expert, rows, cols] -> [n, k, rows]."""
        if self.one_row and x.shape[0] > 1:       # each token's experts as in its own decode
            return np.concatenate([self.be.mul_mat_id(w, x[i:i + 1], ids[i:i + 1], one_token=True)
                                   for i in range(x.shape[0])])
        return self.be.mul_mat_id(w, x, ids, one_token=self.llama_cpp)

    def moe_softmax_swiglu(self, router: Weight, gate: Weight, up: Weight, down: Weight,
                           x: np.ndarray, k: int, norm: bool, scale: float) -> np.ndarray:
        """moe_swiglu(gate, up, down, x, *moe_route(matmul(router, x), k, norm, scale)): a
        one-token ubatch in the invariant numerics (no adapter on the router) runs it in one
        backend call where the backend fuses it (the same bits)."""
        if x.shape[0] == 1 and not self.llama_cpp and not any(
                ad.ab.get(router.name) is not None for ad, _ in self.loras):
            y = self.be.moe_routed_swiglu(router, gate, up, down, x, k, norm, scale)
            if y is not None:
                return y
        ids, wts = self.moe_route(self.matmul(router, x), k, norm, scale)
        return self.moe_swiglu(gate, up, down, x, ids, wts)

    def moe_swiglu(self, gate: Weight, up: Weight, down: Weight, x: np.ndarray, ids: np.ndarray,
                   wts: np.ndarray) -> np.ndarray:
        """build_moe_ffn's SiLU experts after the routing: x [n, n_embd], ids / wts [n, k] ->
        [n, n_embd] = sum over slots j (in order) of wts[:, j] * down[ids[:, j]] . swiglu(
        gate[ids[:, j]] . x, up[ids[:, j]] . x). One backend call where the backend fuses it (the
        same bits as the ops below; the one_row split of a batch keeps the ops)."""
        if x.shape[0] == 1 or not self.one_row:
            y = self.be.moe_swiglu(gate, up, down, x, ids, wts, one_token=self.llama_cpp)
            if y is not None:
                return y
        x3 = x.reshape(x.shape[0], 1, x.shape[-1])
        u = self.mul_mat_id(up, x3, ids)                            # [n, k, n_ff_exp]
        g = self.mul_mat_id(gate, x3, ids)
        d = self.mul_mat_id(down, self.swiglu(g, u), ids)           # [n, k, n_embd]
        return self.sum_experts(self.mul(d, wts[..., None]))

    @staticmethod
    def top_k(p: np.ndarray, k: int) -> np.ndarray:
        """ggml_argsort_top_k (backend.ref.moe_top_k)."""
        return moe_top_k(p, k)

    @staticmethod
    def expert_weights(probs: np.ndarray, ids: np.ndarray, norm: bool, scale: float) -> np.ndarray:
        """build_moe_ffn's expert weights (backend.ref.moe_expert_weights)."""
        return moe_expert_weights(probs, ids, norm, scale)

    def moe_route(self, logits: np.ndarray, k: int, norm: bool, scale: float):
        """build_moe_ffn's softmax gating of router logits [n, n_expert]: (ids [n, k], weights
        [n, k]) = top_k / expert_weights of softmax(logits), in one backend call."""
        return self.be.moe_route(logits, k, norm, scale)

    def add_id(self, y: np.ndarray, b: Weight, ids: np.ndarray) -> np.ndarray:
        """ggml_add_id: y [n, k, d] + b[ids] (b [n_expert, d], the selected experts' biases)."""
        return self.be.add(y, np.asarray(b.raw, np.float32)[ids])

    def swiglu_oai(self, gate, up, alpha: float, limit: float):
        return self.be.swiglu_oai(gate, up, alpha, limit)

    @staticmethod
    def sum_experts(y: np.ndarray) -> np.ndarray:
        """y [n, k, d] -> [n, d]: ((y0 + y1) + y2) + ..., the expert views added in slot order."""
        out = y[:, 0].copy()
        for j in range(1, y.shape[1]):
            out += y[:, j]
        return out

    # -- attention ----------------------------------------------------------------------
    def rope(self, x: np.ndarray, il: int) -> np.ndarray:
        """x [n_tokens, n_head, head_dim] rotated at this ubatch's positions with layer il's base."""
        return self.be.rope(x, self.pos, **self.hp.rope_args(il))

    def attention(self, il: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
                  scale: float | None = None, softcap: float = 0.0,
                  sinks: Weight | None = None) -> np.ndarray:
        """Store k/v [n_tokens, n_head_kv, d] in layer il's cache, attend q [n_tokens, n_head, d]
        over each token's visible cells; returns [n_tokens, n_head * d_v]. sinks: the layer's
        attention sinks [n_head] (gpt-oss; llama.cpp's non-flash arithmetic, flash attention
        or not). A cache whose V is a view of K (MLA: v the first d_v values of each k row, as
        deepseek2 passes them) stores k only and attends with the K buffer as V, keeping the
        first d_v values of each output head (each output value is its own sum over the cells,
        so they are the bits a d_v-wide V would give)."""
        hp = self.hp
        if scale is None:
            scale = 1.0 / math.sqrt(hp.n_embd_head_k)
        mem = self.memory
        c = mem.k_offset(il)                  # kv_k_center: store k - c (the softmax cancels q.c)
        if c is not None:
            k = np.subtract(k, c.reshape(k.shape[1:]), dtype=np.float32)
        rot_k, rot_v = mem.attn_rot(il)       # quantized caches: Hadamard-rotated q, K, V (llama.cpp)
        if rot_k:
            q, k = self.be.hadamard(q, rot_k), self.be.hadamard(k, rot_k)
        if rot_v:
            v = self.be.hadamard(v, rot_v)
        cells = mem.cells_for(il)
        kbuf = mem.k[il]
        self.be.set_rows(kbuf, cells, k.reshape(self.n_tokens, -1))
        v_in_k = mem.cache_for(il).v_in_k
        if v_in_k:
            vbuf = kbuf
        else:
            vbuf = mem.v[il]
            self.be.set_rows(vbuf, cells, v.reshape(self.n_tokens, -1))
        kv_cells, q_start, q_end = mem.attn_plan(self._ubatch, il)
        if sinks is not None:
            if rot_k or rot_v or c is not None:
                raise ValueError("attention sinks need f16 / f32 K/V caches")
            if self.one_row and self.n_tokens > 1:     # each query as a one-token decode's
                out = np.concatenate([self.be.attention_sinks(
                    q[i:i + 1], kbuf, vbuf, kv_cells[q_start[i]:q_end[i]], np.zeros(1, np.int32),
                    np.array([q_end[i] - q_start[i]], np.int32), scale, self.be.vec(sinks),
                    one_token=True) for i in range(self.n_tokens)])
            else:
                out = self.be.attention_sinks(q, kbuf, vbuf, kv_cells, q_start, q_end, scale,
                                              self.be.vec(sinks), one_token=self.llama_cpp)
            return self._v_heads(out, v, v_in_k)
        if self.llama_cpp:
            out = self._llama_cpp_attention(il, q, kbuf, vbuf, kv_cells, q_start, q_end, scale,
                                            softcap)
        else:
            out = self.be.attention(q, kbuf, vbuf, kv_cells, q_start, q_end, scale, softcap)
        out = self._v_heads(out, v, v_in_k)
        return self.be.hadamard(out, rot_v) if rot_v else out

    def _v_heads(self, out, v, v_in_k: bool) -> np.ndarray:
        """out [n_tokens, n_head, d] -> [n_tokens, n_head * d_v]: with V read from the K
        buffer, the first d_v values of each head."""
        if v_in_k:
            out = np.ascontiguousarray(np.asarray(out).reshape(self.n_tokens, -1, out.shape[-1])
                                       [:, :, :v.shape[-1]])
        return out.reshape(self.n_tokens, -1)

    def _llama_cpp_attention(self, il: int, *args):
        view = views = None
        if self.flash_attn and (self.n_tokens == 1 or self.one_row):
            cache = self.memory.cache_for(il)     # the split-KV path needs llama.cpp's n_kv
            views = self._views.get(id(cache))
            if views is None:
                views = self._views[id(cache)] = (cache.kv_view(il) if self.n_tokens == 1
                                                  else cache.kv_view_rows(il))
            if self.n_tokens == 1:
                view, views = views, None
        elif self.one_row:
            views = ()                            # per-query kernels, no view needed
        return llama_cpp_numerics.attention(self.be, *args, flash_attn=self.flash_attn, view=view,
                                            views=views)

    # -- outputs ------------------------------------------------------------------------
    def result_norm(self, x: np.ndarray) -> None:
        """The final-norm hidden states of the output rows (the Context pools them)."""
        self.embd = x

    def select_outputs(self, x: np.ndarray) -> np.ndarray:
        """Keep only the rows whose logits are wanted (llama.cpp does this at the last layer)."""
        if len(self.out_idx) == x.shape[0]:
            return x
        return np.ascontiguousarray(x[self.out_idx])
