"""Decode replay: the backend calls of a decode step's forward, recorded and run again without the
architecture code.

A one-token decode spends a large share of its time in Python between the kernels (the Graph
facade, the architecture's blocks, llama.cpp's kernel choice: ~200 us per layer on the 2-core box).
Those decisions do not change from one decode to the next. A DecodeReplay records the calls the
forward makes on its backend (method, arguments, result) for two consecutive decodes of the same
shape, works out where every argument comes from, and compiles the sequence into one generated
Python function that makes the same backend calls with the same arguments, in the same order:

- an argument produced by an earlier call (or a reshaped view of it) is that call's new result;
- an argument that is one of the ubatch's inputs (token ids, positions, output rows, each layer's
  KV destination cells, attention plan arrays and KV view) is recomputed from the memory for the
  new ubatch (the calls the Graph makes, once per cache instead of once per layer);
- anything else must be the same object (or an equal scalar) in both recordings: weights, KV
  buffers, norm vectors, scales.

Anything else (an array the architecture computed with numpy between two calls, a scalar that
changed) means the forward is not a fixed sequence of backend calls: replay stays off for that
shape. The compiled sequence is then checked once against a normal forward (bitwise equal logits)
before it replaces it. The backend still makes every kernel and thread decision per call, so
results are the normal path's bit for bit (tests/test_replay.py).
"""
from __future__ import annotations

import numpy as np

from .log import get_logger

log = get_logger("replay")

_SCALARS = (int, float, bool, str, bytes, type(None), np.generic)
_MAX_CALLS = 20000
# backend methods without side effects: with constant arguments and the same result object in
# both recordings, the result is a constant of the plan
_PURE = frozenset({"vec"})


class _Recorder:
    """A backend stand-in that forwards every method call and logs (name, args, kwargs, result)."""

    def __init__(self, be, calls: list):
        self._be = be
        self._calls = calls

    def __getattr__(self, name):
        attr = getattr(self._be, name)
        if not callable(attr) or name.startswith("__"):
            return attr
        calls = self._calls

        def call(*args, **kw):
            r = attr(*args, **kw)
            calls.append((name, args, kw, r))
            return r
        return call


class _Unsupported(Exception):
    pass


def _ptr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class _Plan:
    """The compiled call sequence of one decode shape."""

    def __init__(self, fn, consts: list, provider_keys: list, kv_sig: tuple):
        self.fn = fn
        self.consts = consts
        self.provider_keys = provider_keys     # [(kind, il, elem)] in fn's argument order
        self.kv_sig = kv_sig                   # the KV buffers the constants refer to


class DecodeReplay:
    """Per-Context recorder / compiler / runner of decode-step forwards.

    The Context calls `run(key, make_graph, ub)` for a decode step of shape `key`; it returns
    the logits. States per key: record A, record B and compile, validate once against the
    forward, then replay; anything unexpected turns the key off (the forward runs from then on).
    """

    def __init__(self, backend, memory, forward, n_layer: int):
        self.be = backend
        self.memory = memory
        self._forward = forward            # forward(graph) -> logits (the architecture's)
        self.n_layer = n_layer
        self._state: dict = {}             # key -> ("A", record) | ("plan", _Plan, validated) | ("off",)

    # -- public ------------------------------------------------------------------------------
    def ready(self, key) -> bool:
        """Whether the key's plan is compiled and validated (run() replays it)."""
        st = self._state.get(key)
        return st is not None and st[0] == "plan" and st[2]

    def run(self, key, make_graph, ub):
        """The logits of decode step ub: replayed by the key's validated plan, else by the normal
        forward (recording it while the plan is built, checking the plan against it once).
        make_graph(be) builds the ubatch's Graph over backend be (which applies the ubatch to
        the memory)."""
        st = self._state.get(key)
        if st is not None and st[0] == "plan" and st[2]:
            if st[1].kv_sig == self._kv_sig():
                return self._execute(st[1], ub, apply=True)
            self._state[key] = st = ("off",)      # the KV buffers were replaced: the forward
        if st is None or st[0] == "A":
            return self._record(key, st, make_graph)
        logits, g = self._forward(make_graph(self.be))
        if st[0] == "off" or st[2]:
            return logits
        try:                               # validate once: the plan over the same ubatch
            again = self._execute(st[1], g._ubatch, apply=False)
        except Exception as e:             # noqa: BLE001 - any failure: replay off
            log.debug("replay off for %s: %s", key, e)
            self._state[key] = ("off",)
            return logits
        same = (isinstance(again, np.ndarray) and again.shape == logits.shape
                and again.dtype == logits.dtype
                and np.array_equal(again.view(np.uint32), logits.view(np.uint32)))
        self._state[key] = ("plan", st[1], True) if same else ("off",)
        if not same:
            log.debug("replay off for %s: the replayed logits differ", key)
        return logits

    # -- recording ---------------------------------------------------------------------------
    def _record(self, key, st, make_graph):
        calls: list = []
        g = make_graph(_Recorder(self.be, calls))
        logits, g = self._forward(g)
        rec = (calls, self._registry(g), logits)
        if st is None:
            self._state[key] = ("A", rec)
            return logits
        try:
            plan = self._compile(st[1], rec)
            self._state[key] = ("plan", plan, False)
        except Exception as e:             # noqa: BLE001 - _Unsupported, or a memory without
            log.debug("replay off for %s: %s", key, e)     # the methods the plan needs
            self._state[key] = ("off",)
        return logits

    def _registry(self, g) -> dict:
        """id -> provider key for the ubatch's inputs the Graph hands to the backend."""
        reg = {id(g.pos): ("pos", 0, 0), id(g.tokens): ("tokens", 0, 0),
               id(g.out_idx): ("out", 0, 0)}
        mem, ub = self.memory, g._ubatch
        for il in range(self.n_layer):
            try:
                cells = mem.cells_for(il)
                plan = mem.attn_plan(ub, il)
            except (AttributeError, KeyError, IndexError):
                continue
            reg.setdefault(id(cells), ("cells", il, 0))
            for e, a in enumerate(plan):
                reg.setdefault(id(a), ("plan", il, e))
            view = g._views.get(id(mem.cache_for(il))) if hasattr(mem, "cache_for") else None
            if view is not None:
                reg.setdefault(id(view), ("view", il, 0))
        return reg

    def _compile(self, rec_a, rec_b) -> _Plan:
        (ca, rega, la), (cb, regb, lb) = rec_a, rec_b
        if len(ca) != len(cb) or not cb or len(cb) > _MAX_CALLS:
            raise _Unsupported("call sequences differ")
        consts: list = []
        const_ix: dict = {}
        providers: list = []
        prov_ix: dict = {}
        res_id: dict = {}          # id(result or element) -> expression
        res_ptr: dict = {}         # data pointer -> (expression, size, array) of array results

        def const(obj) -> str:
            k = id(obj)
            if k not in const_ix:
                const_ix[k] = len(consts)
                consts.append(obj)
            return f"C[{const_ix[k]}]"

        def prov(pk) -> str:
            if pk not in prov_ix:
                prov_ix[pk] = len(providers)
                providers.append(pk)
            return f"P{prov_ix[pk]}"

        def arg(a, b) -> str:
            if isinstance(b, (tuple, list)) and not isinstance(b, np.ndarray):
                if id(b) in regb and id(a) in rega and rega[id(a)] == regb[id(b)]:
                    return prov(regb[id(b)])
                if type(a) is not type(b) or len(a) != len(b):
                    raise _Unsupported("argument containers differ")
                parts = [arg(x, y) for x, y in zip(a, b)]
                if all(p.startswith("C[") for p in parts) and isinstance(b, tuple):
                    return const(b)            # the same objects: one constant tuple
                inner = ", ".join(parts) + ("," if len(parts) == 1 else "")
                return f"({inner})" if isinstance(b, tuple) else f"[{inner}]"
            if id(b) in regb:
                if id(a) not in rega or rega[id(a)] != regb[id(b)]:
                    raise _Unsupported("an input moved")
                return prov(regb[id(b)])
            if id(b) in res_id:
                return res_id[id(b)]
            if isinstance(b, np.ndarray) and b.flags.c_contiguous:
                hit = res_ptr.get(_ptr(b))
                if hit is not None and hit[1] == b.size and b.dtype == hit[2].dtype:
                    return f"{hit[0]}.reshape({tuple(b.shape)!r})"
            if isinstance(b, _SCALARS):
                if type(a) is not type(b) or not (a == b):
                    raise _Unsupported(f"a scalar argument changed ({a!r} -> {b!r})")
                return const(b)
            if a is not b:
                raise _Unsupported(f"an argument of type {type(b).__name__} is not the same "
                                   "object in both decodes")
            return const(b)

        lines = []
        for j, ((na, aa, ka, ra), (nb, ab, kb, rb)) in enumerate(zip(ca, cb)):
            if na != nb or len(aa) != len(ab) or ka.keys() != kb.keys():
                raise _Unsupported(f"call {j} differs ({na} / {nb})")
            try:
                args = [arg(x, y) for x, y in zip(aa, ab)]
                args += [f"{k}={arg(ka[k], kb[k])}" for k in kb]
            except _Unsupported as e:
                raise _Unsupported(f"call {j} ({nb}): {e}") from None
            if nb in _PURE and ra is rb and all(a.split("=")[-1].startswith("C[") for a in args):
                res_id[id(rb)] = const(rb)     # e.g. vec(w): the same object every decode
                continue
            lines.append(f"    r{j} = {const(getattr(self.be, nb))}({', '.join(args)})")
            self._map_result(rb, f"r{j}", res_id, res_ptr)
        ret = res_id.get(id(lb))
        if ret is None:
            raise _Unsupported("the logits are not a backend result")
        src = ("def _replay(C, " + ", ".join(f"P{i}" for i in range(len(providers))) +
               "):\n" + "\n".join(lines) + f"\n    return {ret}\n")
        ns: dict = {}
        exec(compile(src, "<pyllama decode replay>", "exec"), ns)  # noqa: S102 - our own code
        return _Plan(ns["_replay"], consts, providers, self._kv_sig())

    @staticmethod
    def _map_result(r, expr: str, res_id: dict, res_ptr: dict) -> None:
        if isinstance(r, np.ndarray):
            res_id[id(r)] = expr
            if r.flags.c_contiguous and r.size:
                res_ptr[_ptr(r)] = (expr, r.size, r)
        elif isinstance(r, (tuple, list)):
            for e, x in enumerate(r):
                if isinstance(x, np.ndarray):
                    DecodeReplay._map_result(x, f"{expr}[{e}]", res_id, res_ptr)

    def _kv_sig(self) -> tuple:
        """The identities of the memory's K and V buffers (constants of a plan)."""
        def ids(d):
            if isinstance(d, dict):
                return tuple(map(id, d.values()))
            return tuple(map(id, d)) if isinstance(d, (list, tuple)) else (id(d),)
        return ids(getattr(self.memory, "k", None)) + ids(getattr(self.memory, "v", None))

    # -- replay ------------------------------------------------------------------------------
    def _execute(self, plan: _Plan, ub, apply: bool):
        mem = self.memory
        if apply:
            mem.apply_ubatch(ub)
        vals, by_cache = [], {}
        for kind, il, e in plan.provider_keys:
            if kind == "pos":
                vals.append(np.ascontiguousarray(ub.pos, dtype=np.int32))
            elif kind == "tokens":
                vals.append(ub.tokens)
            elif kind == "out":
                vals.append(np.flatnonzero(ub.output).astype(np.int32))
            elif kind == "cells":
                vals.append(mem.cells_for(il))
            elif kind == "plan":
                vals.append(mem.attn_plan(ub, il)[e])
            else:                                  # view: once per cache
                cache = mem.cache_for(il)
                v = by_cache.get(id(cache))
                if v is None:
                    v = by_cache[id(cache)] = cache.kv_view(il)
                vals.append(v)
        return plan.fn(plan.consts, *vals)
