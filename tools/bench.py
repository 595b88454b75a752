"""llama-bench (tools/llama-bench/llama-bench.cpp): prompt-processing (pp), generation (tg) and
combined (pp+tg) throughput over every combination of the given parameters, printed as llama.cpp
does: a markdown table (default), csv, json, jsonl or sql (llama.cpp tools/llama-bench/llama-bench.cpp). Own parser, not _args.
"""
from __future__ import annotations

import datetime
import itertools
import json
import os
import platform
import re
import statistics
import sys
import time
from dataclasses import dataclass, field

from pyllama import omp

from ._common import build_info, guard

KV = ("f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl")
FA = {"on": 1, "1": 1, "true": 1, "enabled": 1, "off": 0, "0": 0, "false": 0, "disabled": 0,
      "auto": -1, "-1": -1}
OUTPUTS = ("csv", "json", "jsonl", "md", "sql")


class BenchArgError(Exception):
    """str() = the flag that was bad; `reason` an extra `error: ...` line printed before it."""

    def __init__(self, arg: str, reason: str = ""):
        super().__init__(arg)
        self.reason = reason


def int_list(value: str) -> list[int]:
    """`1,2,8-32*2,64-256+64`: comma lists with ranges a-b, a-b+step, a-b*mult."""
    out = []
    for part in value.split(","):
        m = re.fullmatch(r"(-?\d+)(?:-(\d+)(?:([+*])(\d+))?)?", part.strip())
        if not m:
            raise ValueError("invalid range format")
        a = int(m.group(1))
        if m.group(2) is None:
            out.append(a)
            continue
        b, op, step = int(m.group(2)), m.group(3) or "+", int(m.group(4) or 1)
        if step <= (1 if op == "*" else 0):
            raise ValueError("invalid range format")
        while a <= b:
            out.append(a)
            a = a * step if op == "*" else a + step
    return out


@dataclass
class BenchParams:
    models: list = field(default_factory=list)
    n_prompt: list = field(default_factory=lambda: [512])
    n_gen: list = field(default_factory=lambda: [128])
    n_pg: list = field(default_factory=list)
    n_depth: list = field(default_factory=lambda: [0])
    n_batch: list = field(default_factory=lambda: [2048])
    n_ubatch: list = field(default_factory=lambda: [512])
    type_k: list = field(default_factory=lambda: ["f16"])
    type_v: list = field(default_factory=lambda: ["f16"])
    n_threads: list = field(default_factory=lambda: [os.cpu_count() or 1])
    n_gpu_layers: list = field(default_factory=lambda: [-1])
    flash_attn: list = field(default_factory=lambda: [-1])
    reps: int = 5
    output: str = "md"
    output_err: str = "none"
    verbose: bool = False
    progress: bool = False
    warmup: bool = True
    delay: int = 0
    given: set = field(default_factory=set)


_LIST_FLAGS = {
    "-m": "models", "--model": "models", "-p": "n_prompt", "--n-prompt": "n_prompt",
    "-n": "n_gen", "--n-gen": "n_gen", "-d": "n_depth", "--n-depth": "n_depth",
    "-b": "n_batch", "--batch-size": "n_batch", "-ub": "n_ubatch", "--ubatch-size": "n_ubatch",
    "-ctk": "type_k", "--cache-type-k": "type_k", "-ctv": "type_v", "--cache-type-v": "type_v",
    "-t": "n_threads", "--threads": "n_threads", "-ngl": "n_gpu_layers",
    "--n-gpu-layers": "n_gpu_layers", "-fa": "flash_attn", "--flash-attn": "flash_attn",
}
# accepted, no effect here (device placement, CPU affinity, load modes): one value each
_NOOP_FLAGS = ("-C", "--cpu-mask", "--cpu-strict", "-ncmoe", "--n-cpu-moe", "-sm",
               "--split-mode", "-mg", "--main-gpu", "-nkvo", "--no-kv-offload", "-dev", "--device",
               "-ts", "--tensor-split", "-ot", "--override-tensors", "-lm", "--load-mode", "-lzm",
               "--lazy-mode", "-embd", "--embeddings", "-nopo", "--no-op-offload", "--no-host",
               "--repack", "-fitt", "--fit-target", "-fitc", "--fit-ctx", "--numa", "--prio",
               "-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-hft", "--hf-token")


def _convert_list(dest: str, value: str) -> list:
    if dest == "models":
        return value.split(",")
    if dest in ("type_k", "type_v"):
        vals = value.split(",")
        if any(v not in KV for v in vals):
            raise ValueError("")
        return vals
    if dest == "flash_attn":
        vals = value.split(",")
        if any(v not in FA for v in vals):
            raise ValueError("")
        return [FA[v] for v in vals]
    return int_list(value)


def parse(argv: list[str]) -> BenchParams:
    p, i = BenchParams(), 0
    while i < len(argv):
        arg = argv[i]
        has = i + 1 < len(argv)
        val = argv[i + 1] if has else None
        try:
            i = _parse_one(p, arg, val, i)
        except ValueError as e:
            raise BenchArgError(arg, str(e)) from None
    for dest in p.given & {"n_prompt", "n_gen"}:
        setattr(p, dest, [v for v in getattr(p, dest) if v != 0] or [])
    return p


def _parse_one(p: BenchParams, arg: str, val, i: int) -> int:
    flags = {"-v": "verbose", "--verbose": "verbose", "--progress": "progress"}
    if arg in flags:
        setattr(p, flags[arg], True)
        return i + 1
    if arg == "--no-warmup":
        p.warmup = False
        return i + 1
    if val is None:
        raise ValueError("")
    if arg in _LIST_FLAGS:
        dest = _LIST_FLAGS[arg]
        vals = _convert_list(dest, val)
        cur = getattr(p, dest) if dest in p.given else []
        setattr(p, dest, cur + vals)
        p.given.add(dest)
    elif arg == "-pg":
        a = val.split(",")
        if len(a) != 2:
            raise ValueError("")
        p.n_pg.append((int(a[0]), int(a[1])))
        p.given.add("n_pg")
    elif arg in ("-r", "--repetitions"):
        p.reps = int(val)
    elif arg in ("-o", "--output", "-oe", "--output-err"):
        if val not in OUTPUTS + (("none",) if arg in ("-oe", "--output-err") else ()):
            raise ValueError("")
        setattr(p, "output" if arg in ("-o", "--output") else "output_err", val)
    elif arg == "--delay":
        p.delay = int(val)
    elif arg == "--poll":
        _poll(val)
    elif arg not in _NOOP_FLAGS:
        raise ValueError("")
    return i + 2


def _poll(val: str) -> None:
    """--poll: one level for the whole run (the OpenMP wait policy is fixed once the kernels
    load), so a list must hold a single value."""
    levels = {int(v) for v in val.split(",")}
    if len(levels) != 1 or not 0 <= min(levels) <= 100:
        raise ValueError("")
    omp.configure(levels.pop())


def usage() -> str:
    d = BenchParams()
    return f"""usage: llama-bench [options]

options:
  -h, --help
  --numa <distribute|isolate|numactl>       numa mode (default: disabled)
  -r, --repetitions <n>                     number of times to repeat each test (default: {d.reps})
  --prio <-1|0|1|2|3>                       process/thread priority (default: 0)
  --delay <0...N> (seconds)                 delay between each test (default: 0)
  -o, --output <csv|json|jsonl|md|sql>      output format printed to stdout (default: md)
  -oe, --output-err <csv|json|jsonl|md|sql> output format printed to stderr (default: none)
  --list-devices                            list available devices and exit
  -v, --verbose                             verbose output
  --progress                                print test progress indicators
  --no-warmup                               skip warmup runs before benchmarking

test parameters:
  -m, --model <filename>                    (default: bundled gemma-3-270m)
  -p, --n-prompt <n>                        (default: 512)
  -n, --n-gen <n>                           (default: 128)
  -pg <pp,tg>                               (default: )
  -d, --n-depth <n>                         (default: 0)
  -b, --batch-size <n>                      (default: 2048)
  -ub, --ubatch-size <n>                    (default: 512)
  -ctk, --cache-type-k <t>                  (default: f16)
  -ctv, --cache-type-v <t>                  (default: f16)
  -t, --threads <n>                         (default: {d.n_threads[0]})
  -ngl, --n-gpu-layers <n>                  (default: -1)
  -fa, --flash-attn <on|off|auto>           (default: auto)
  --poll <0...100>                          (default: 50 on an idle machine, else 0; one value)
  (also accepted, no effect in pyllama: -C, --cpu-strict, -ncmoe, -sm, -mg, -nkvo,
   -dev, -ts, -ot, -lm, -lzm, -embd, -nopo, --no-host, --repack, -fitt, -fitc)

Multiple values can be given for each parameter by separating them with ','
or by specifying the parameter multiple times. Ranges can be given as
'first-last' or 'first-last+step' or 'first-last*mult'.
"""


# ---- instances and tests ----------------------------------------------------------------------
@dataclass
class Instance:
    model: str
    n_batch: int
    n_ubatch: int
    type_k: str
    type_v: str
    n_threads: int
    n_gpu_layers: int
    flash_attn: int
    n_prompt: int = 0
    n_gen: int = 0
    n_depth: int = 0

    @property
    def name(self) -> str:
        if self.n_prompt and self.n_gen:
            t = f"pp{self.n_prompt}+tg{self.n_gen}"
        elif self.n_prompt:
            t = f"pp{self.n_prompt}"
        else:
            t = f"tg{self.n_gen}"
        return t + (f" @ d{self.n_depth}" if self.n_depth else "")


def instances(p: BenchParams) -> list[Instance]:
    """All combinations in llama-bench's order: per parameter set and depth, pp then tg then pg."""
    out = []
    models = p.models or [""]
    for m, nb, nub, tk, tv, nt, ngl, fa in itertools.product(
            models, p.n_batch, p.n_ubatch, p.type_k, p.type_v, p.n_threads, p.n_gpu_layers,
            p.flash_attn):
        base = dict(model=m, n_batch=nb, n_ubatch=nub, type_k=tk, type_v=tv, n_threads=nt,
                    n_gpu_layers=ngl, flash_attn=fa)
        for d in p.n_depth:
            out += [Instance(**base, n_prompt=n, n_depth=d) for n in p.n_prompt]
            out += [Instance(**base, n_gen=n, n_depth=d) for n in p.n_gen]
            out += [Instance(**base, n_prompt=a, n_gen=b, n_depth=d) for a, b in p.n_pg]
    return out


class Runner:
    """Times one instance on a fresh Context: random tokens (BOS first), like llama-bench."""

    def __init__(self, model, inst: Instance):
        import numpy as np
        import pyllama
        self.model, self.inst = model, inst
        self.ctx = pyllama.Context(model, n_ctx=max(8, inst.n_prompt + inst.n_gen + inst.n_depth),
                                   n_batch=inst.n_batch, n_ubatch=inst.n_ubatch,
                                   type_k=inst.type_k, type_v=inst.type_v,
                                   flash_attn=inst.flash_attn != 0,     # -1: auto, on
                                   n_threads=inst.n_threads)
        self.rng = np.random.default_rng(1)
        self.pos = 0

    def prompt(self, n: int) -> None:
        import pyllama
        bos = getattr(self.model.vocab, "bos", -1)
        toks = self.rng.integers(0, self.model.n_vocab, n).tolist()
        if self.pos == 0 and getattr(self.model.vocab, "add_bos", False) and bos >= 0:
            toks[0] = bos
        b = self.inst.n_batch
        for i in range(0, n, b):
            chunk = toks[i:i + b]
            self._decode(pyllama.Batch(chunk, pos=list(range(self.pos, self.pos + len(chunk)))))

    def gen(self, n: int) -> None:
        import pyllama
        bos = getattr(self.model.vocab, "bos", -1)
        tok = bos if self.pos == 0 and bos >= 0 else int(self.rng.integers(0, self.model.n_vocab))
        for _ in range(n):
            self._decode(pyllama.Batch([tok], pos=[self.pos]))
            tok = int(self.rng.integers(0, self.model.n_vocab))

    def _decode(self, batch) -> None:
        from pyllama.errors import ContextError
        rc = self.ctx.decode(batch)
        if rc != 0:
            raise ContextError(f"failed to decode (code {rc})")
        self.pos += batch.n_tokens

    def reset(self) -> None:
        self.ctx.memory.clear()
        self.pos = 0

    def run(self, reps: int, warmup: bool, progress) -> list[int]:
        inst = self.inst
        if warmup:
            progress("warmup prompt run") if inst.n_prompt else None
            if inst.n_prompt:
                self.prompt(min(inst.n_prompt, inst.n_batch))
            if inst.n_gen:
                self.reset()
                self.gen(1)
        samples = []
        for r in range(reps):
            self.reset()
            if inst.n_depth:
                progress(f"depth run {r + 1}/{reps}")
                self.prompt(inst.n_depth)
            t0 = time.perf_counter_ns()
            if inst.n_prompt:
                progress(f"prompt run {r + 1}/{reps}")
                self.prompt(inst.n_prompt)
            if inst.n_gen:
                progress(f"generation run {r + 1}/{reps}")
                self.gen(inst.n_gen)
            samples.append(time.perf_counter_ns() - t0)
        return samples


# ---- results and printers -------------------------------------------------------------------
FIELDS = ["build_commit", "build_number", "cpu_info", "gpu_info", "backends", "model_filename",
          "model_type", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads",
          "cpu_mask", "cpu_strict", "poll", "type_k", "type_v", "n_gpu_layers", "n_cpu_moe",
          "split_mode", "main_gpu", "no_kv_offload", "flash_attn", "devices", "tensor_split",
          "tensor_buft_overrides", "load_mode", "lazy_mode", "embeddings", "no_op_offload",
          "no_host", "repack", "fit_target", "fit_min_ctx", "n_prompt", "n_gen", "n_depth",
          "test_time", "avg_ns", "stddev_ns", "avg_ts", "stddev_ts"]
INT_FIELDS = {"build_number", "model_size", "model_n_params", "n_batch", "n_ubatch", "n_threads",
              "poll", "n_gpu_layers", "n_cpu_moe", "main_gpu", "flash_attn", "no_op_offload",
              "fit_min_ctx", "n_prompt", "n_gen", "n_depth", "avg_ns", "stddev_ns"}
BOOL_FIELDS = {"cpu_strict", "no_kv_offload", "embeddings", "no_host", "repack"}
FLOAT_FIELDS = {"avg_ts", "stddev_ts"}


def cpu_info() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def result(model, path: str, inst: Instance, samples: list[int], backend: str) -> dict:
    _, number, commit = build_info()
    n_tok = inst.n_prompt + inst.n_gen
    ts = [1e9 * n_tok / s for s in samples]
    return {
        "build_commit": commit, "build_number": number, "cpu_info": cpu_info(), "gpu_info": "",
        "backends": backend, "model_filename": path, "model_type": model.desc,
        "model_size": int(model.size_bytes), "model_n_params": int(model.n_params),
        "n_batch": inst.n_batch, "n_ubatch": inst.n_ubatch, "n_threads": inst.n_threads,
        "cpu_mask": "0x0", "cpu_strict": False, "poll": omp.current(), "type_k": inst.type_k,
        "type_v": inst.type_v, "n_gpu_layers": inst.n_gpu_layers, "n_cpu_moe": 0,
        "split_mode": "layer", "main_gpu": 0, "no_kv_offload": False,
        "flash_attn": inst.flash_attn, "devices": "auto", "tensor_split": "0.00",
        "tensor_buft_overrides": "none", "load_mode": "auto", "lazy_mode": "auto",
        "embeddings": False, "no_op_offload": 0, "no_host": False, "repack": True,
        "fit_target": "0", "fit_min_ctx": 0, "n_prompt": inst.n_prompt, "n_gen": inst.n_gen,
        "n_depth": inst.n_depth,
        "test_time": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "avg_ns": int(statistics.mean(samples)),
        "stddev_ns": int(statistics.stdev(samples)) if len(samples) > 1 else 0,
        "avg_ts": statistics.mean(ts), "stddev_ts": statistics.stdev(ts) if len(ts) > 1 else 0.0,
        "samples_ns": samples, "samples_ts": ts, "_test": inst.name,
    }


def _json_value(name: str, v) -> str:
    if name in BOOL_FIELDS:
        return "true" if v else "false"
    if name in FLOAT_FIELDS:
        return f"{v:.6f}"
    if name in INT_FIELDS:
        return str(int(v))
    return json.dumps(str(v), ensure_ascii=False)


def _samples(r: dict) -> tuple[str, str]:
    return (", ".join(str(s) for s in r["samples_ns"]),
            ", ".join(f"{t:g}" for t in r["samples_ts"]))


class JsonPrinter:
    def __init__(self, f):
        self.f, self.first = f, True

    def header(self, _p):
        self.f.write("[\n")

    def row(self, r):
        if not self.first:
            self.f.write(",\n")
        self.first = False
        ns, ts = _samples(r)
        body = "".join(f'    "{k}": {_json_value(k, r[k])},\n' for k in FIELDS)
        self.f.write(f'  {{\n{body}    "samples_ns": [ {ns} ],\n    "samples_ts": [ {ts} ]\n  }}')
        self.f.flush()

    def footer(self):
        self.f.write("\n]\n")


class JsonlPrinter(JsonPrinter):
    def header(self, _p):
        pass

    def row(self, r):
        ns, ts = _samples(r)
        body = ", ".join(f'"{k}": {_json_value(k, r[k])}' for k in FIELDS)
        self.f.write(f'{{{body}, "samples_ns": [ {ns} ],"samples_ts": [ {ts} ]}}\n')
        self.f.flush()

    def footer(self):
        pass


class CsvPrinter(JsonlPrinter):
    def header(self, _p):
        self.f.write(",".join(FIELDS) + "\n")

    def row(self, r):
        vals = [_json_value(k, r[k]).strip('"') if k not in FLOAT_FIELDS else f"{r[k]:.6f}"
                for k in FIELDS]
        self.f.write(",".join('"' + v.replace('"', '""') + '"' for v in vals) + "\n")
        self.f.flush()


class SqlPrinter(JsonlPrinter):
    def header(self, _p):
        cols = ",\n".join(f"  {k} {self._type(k)}" for k in FIELDS)
        self.f.write(f"CREATE TABLE IF NOT EXISTS llama_bench (\n{cols}\n);\n\n")

    @staticmethod
    def _type(k):
        return "INTEGER" if k in INT_FIELDS | BOOL_FIELDS else "REAL" if k in FLOAT_FIELDS else "TEXT"

    def row(self, r):
        vals = ", ".join(str(int(bool(r[k]))) if k in BOOL_FIELDS else
                         (str(r[k]) if k in INT_FIELDS | FLOAT_FIELDS else
                          "'" + str(r[k]).replace("'", "''") + "'") for k in FIELDS)
        self.f.write(f"INSERT INTO llama_bench ({', '.join(FIELDS)}) VALUES ({vals});\n")
        self.f.flush()


class MarkdownPrinter:
    WIDTH = {"model": -30, "size": 10, "params": 10, "backend": -10, "threads": 7,
             "n_batch": 7, "n_ubatch": 8, "type_k": 6, "type_v": 6, "ngl": 3, "fa": 3,
             "test": 15, "t/s": 20}

    def __init__(self, f):
        self.f = f
        self.cols = []

    def header(self, p: BenchParams):
        d = BenchParams()
        cond = [("n_batch", "n_batch"), ("n_ubatch", "n_ubatch"), ("type_k", "type_k"),
                ("type_v", "type_v"), ("fa", "flash_attn")]
        self.cols = ["model", "size", "params", "backend", "threads"]
        self.cols += [c for c, attr in cond if getattr(p, attr) != getattr(d, attr)]
        self.cols += ["test", "t/s"]
        w = [self.WIDTH.get(c, max(len(c), 10)) for c in self.cols]
        self.f.write("|" + "".join(f" {self._pad(c, x)} |" for c, x in zip(self.cols, w)) + "\n")
        self.f.write("|" + "".join(f" {'-' * (abs(x) - 1)}{':' if x > 0 else '-'} |" for x in w)
                     + "\n")
        self.f.flush()

    @staticmethod
    def _pad(s: str, width: int) -> str:
        return s.ljust(-width) if width < 0 else s.rjust(width)

    def row(self, r):
        size, n = r["model_size"], r["model_n_params"]
        cells = {"model": r["model_type"],
                 "size": f"{size / 2**20:.2f} MiB" if size < 2**30 else f"{size / 2**30:.2f} GiB",
                 "params": f"{n / 1e6:.2f} M" if n < 1e9 else f"{n / 1e9:.2f} B",
                 "backend": r["backends"], "threads": str(r["n_threads"]),
                 "n_batch": str(r["n_batch"]), "n_ubatch": str(r["n_ubatch"]),
                 "type_k": r["type_k"], "type_v": r["type_v"], "fa": str(r["flash_attn"]),
                 "test": r["_test"], "t/s": f"{r['avg_ts']:.2f} ± {r['stddev_ts']:.2f}"}
        w = [self.WIDTH.get(c, max(len(c), 10)) for c in self.cols]
        self.f.write("|" + "".join(f" {self._pad(cells[c], x)} |" for c, x in zip(self.cols, w))
                     + "\n")
        self.f.flush()

    def footer(self):
        _, number, commit = build_info()
        self.f.write(f"\nbuild: {commit} ({number})\n")


PRINTERS = {"md": MarkdownPrinter, "json": JsonPrinter, "jsonl": JsonlPrinter,
            "csv": CsvPrinter, "sql": SqlPrinter}


# ---- main -------------------------------------------------------------------------------------
def run(argv) -> int:
    if any(a in ("-h", "--help") for a in argv):
        sys.stdout.write(usage())
        return 0
    if "--version" in argv:
        from ._common import version_text
        sys.stderr.write(version_text())
        return 0
    if "--list-devices" in argv:
        from ._common import list_devices_text
        sys.stdout.write(list_devices_text())
        return 0
    try:
        p = parse(argv)
    except BenchArgError as e:
        if e.reason:
            print(f"error: {e.reason}", file=sys.stderr)
        print(f"error: invalid parameter for argument: {e}", file=sys.stderr)
        sys.stdout.write(usage())
        return 1
    _quiet_logs(p.verbose)
    printers = [PRINTERS[p.output](sys.stdout)]
    if p.output_err != "none":
        printers.append(PRINTERS[p.output_err](sys.stderr))
    for pr in printers:
        pr.header(p)
    rc = run_all(p, printers)
    if rc == 0:
        for pr in printers:
            pr.footer()
    return rc


def _quiet_logs(verbose: bool) -> None:
    import logging
    from pyllama import log
    log.setup(3 if verbose else 1, sys.stderr)
    log.logger.setLevel(logging.DEBUG if verbose else logging.ERROR)


def run_all(p: BenchParams, printers) -> int:
    import pyllama
    from pyllama import models
    from pyllama.errors import PyllamaError
    insts = instances(p)
    loaded = {}
    for k, inst in enumerate(insts):
        def progress(what, k=k):
            if p.progress:
                print(f"llama-bench: benchmark {k + 1}/{len(insts)}: {what}", file=sys.stderr)
        progress("starting")
        if inst.model not in loaded:
            path = models.resolve(inst.model or None)
            try:
                loaded = {inst.model: (pyllama.load_model(path), path)}
            except PyllamaError as e:
                print(f"llama_bench: error: failed to load model '{path}' ({e})", file=sys.stderr)
                return 1
        model, path = loaded[inst.model]
        samples = Runner(model, inst).run(p.reps, p.warmup, progress)
        r = result(model, path, inst, samples, "CPU")
        for pr in printers:
            pr.row(r)
        if p.delay:
            time.sleep(p.delay)
    return 0


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv, prefix="llama_bench: error")
