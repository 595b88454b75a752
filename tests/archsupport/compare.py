"""pyllama against llama.cpp's recorded logits (tests/data/arch/*.npz, made by record.py).

`rebuild(fixture, path)` writes the fixture's model again with the gguf package and pyllama's
ggml reference quantizers in the types llama.cpp's quantizer chose, and checks every tensor's
sha256 against the one recorded from llama.cpp's file; `compare(fixture, path, numerics)` decodes
the same tokens as record.py (prefill, then single-token decodes) and returns the figures.

    python tests/archsupport/compare.py [tests/data/arch/*.npz]     # the table for every fixture
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specs  # noqa: E402

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "arch")


def load_fixture(path: str) -> dict:
    with np.load(path) as z:
        f = {k: z[k] for k in z.files}
    f["table"] = json.loads(str(f["table"]))
    f["pos0"] = int(f.get("pos0", 0))         # the first position (record.py: the spec's pos0)
    base = os.path.basename(path)[:-4]
    f["name"], f["ftype"] = base.rsplit("-", 1)
    return f


def rebuild(f: dict, path: str) -> list[str]:
    """Write the model; returns the names of tensors whose data differ from llama.cpp's file."""
    types = f["table"]["types"]
    specs.write_model(path, f["name"], types=types, seed=f["table"]["seed"])
    from pyllama.gguf import GGUFReader
    r = GGUFReader(path)
    bad = []
    for name, h in f["table"]["sha256"].items():
        t = r.tensors.get(name)
        if t is None or hashlib.sha256(np.ascontiguousarray(t.data).tobytes()).hexdigest() != h:
            bad.append(name)
    return bad


def run_pyllama(model, toks: np.ndarray, n_prefill: int, numerics: str,
                n_threads: int | None = 2, pos0: int = 0, flash_attn: bool = False) -> np.ndarray:
    import pyllama
    ctx = pyllama.Context(model, n_ctx=512, n_batch=512, n_ubatch=512, numerics=numerics,
                          n_threads=n_threads, flash_attn=flash_attn)
    if pos0 == 0:
        rows = [ctx.eval(toks[:n_prefill], logits_all=True)]
        for t in toks[n_prefill:]:
            rows.append(ctx.eval([int(t)]))
        return np.concatenate(rows).astype(np.float32)
    rows = []                                 # the sequence starts at pos0 (empty memory)
    for a, b in [(0, n_prefill)] + [(i, i + 1) for i in range(n_prefill, len(toks))]:
        rc = ctx.decode(pyllama.Batch(toks[a:b], pos=np.arange(pos0 + a, pos0 + b),
                                      seq_ids=[0] * (b - a), logits=np.ones(b - a, bool)))
        if rc != 0:
            raise RuntimeError(f"decode failed with code {rc}")
        rows.append(ctx.get_logits().copy())
    return np.concatenate(rows).astype(np.float32)


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def figures(ours: np.ndarray, ref: np.ndarray, toks: np.ndarray) -> dict:
    """mean |Δ log p| of the next token (teacher-forced; the last row over the whole vocabulary),
    top-1 agreement, max |Δ logit|."""
    la, lb = log_softmax(ours), log_softmax(ref)
    nxt = toks[1:len(ours)]
    d = np.abs(la[np.arange(len(nxt)), nxt] - lb[np.arange(len(nxt)), nxt])
    return {"mean_dlogp": float(d.mean()),
            "mean_dlogp_all": float(np.abs(la - lb).mean()),
            "top1": float((ours.argmax(-1) == ref.argmax(-1)).mean()),
            "max_dlogit": float(np.abs(ours.astype(np.float64) - ref).max()),
            "bit_identical": bool(np.array_equal(ours, ref))}


def compare(f: dict, path: str, numerics: str) -> dict:
    import pyllama
    m = pyllama.load_model(path)
    ours = run_pyllama(m, f["tokens"], int(f["n_prefill"]), numerics, pos0=f["pos0"])
    return figures(ours, f["logits"], f["tokens"])


def main(argv=None):
    import tempfile
    paths = (argv if argv else sys.argv[1:]) or sorted(glob.glob(os.path.join(DATA, "*.npz")))
    print(f"{'model':<22} {'numerics':<10} {'mean|dlogp|':>11} {'all-vocab':>10} {'top1':>6} "
          f"{'max|dlogit|':>11} bits")
    with tempfile.TemporaryDirectory() as tmp:
        for p in paths:
            f = load_fixture(p)
            gg = os.path.join(tmp, os.path.basename(p)[:-4] + ".gguf")
            bad = rebuild(f, gg)
            if bad:
                print(f"{f['name']}-{f['ftype']}: rebuilt tensors differ: {bad[:4]}")
                continue
            for num in ("llama.cpp", "invariant"):
                try:
                    r = compare(f, gg, num)
                except Exception as e:
                    print(f"{f['name'] + '-' + f['ftype']:<22} {num:<10} FAILED {e}")
                    continue
                print(f"{f['name'] + '-' + f['ftype']:<22} {num:<10} {r['mean_dlogp']:11.2e} "
                      f"{r['mean_dlogp_all']:10.2e} {r['top1']:6.3f} {r['max_dlogit']:11.2e} "
                      f"{'yes' if r['bit_identical'] else 'no'}", flush=True)


if __name__ == "__main__":
    main()
