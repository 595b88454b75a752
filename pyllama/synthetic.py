"""Synthetic models: a GGUF with exactly another GGUF's metadata and tensor table, random weights.

The header (magic, every metadata key with its GGUF type, tokenizer arrays included, the tensor
table with types, shapes and offsets) is copied byte for byte, so architecture, vocabulary and
layout are identical; only the data section is new. Quantized tensors get random valid blocks:
random bytes for the packed quants and sub-block scales, and the f16 super-block scales
overwritten with finite values sized so that weights have a standard deviation of roughly 0.02.
1-D F32 tensors (norm weights, biases) are near 1. Writing is I/O bound (a 500 MB model in a few
seconds).

A *skeleton* is the same file with all data zero, gzip-compressed (a few MB): it carries the shape
of a model to a machine that lacks the model, and `write_synthetic` accepts it as the source.

    python -m pyllama.synthetic SRC OUT.gguf [--seed N]      # SRC: path, alias or skeleton .gz
    python -m pyllama.synthetic --skeleton SRC OUT.gguf.gz
"""
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys

import numpy as np

from .gguf import GGML_BLOCK, GGMLType, GGUFReader

_CHUNK = 1 << 24

# type -> (byte offsets of the f16 scale fields in a block, typical |q * sub-scale| of one weight)
# chosen so that d * typical ~ 0.02; dmin fields (second offset of Q4_1/Q5_1/Q*_K) get d / 4.
_SCALES = {
    GGMLType.Q4_0: ((0,), 4.6), GGMLType.Q4_1: ((0, 2), 4.6), GGMLType.Q5_0: ((0,), 9.2),
    GGMLType.Q5_1: ((0, 2), 9.2), GGMLType.Q8_0: ((0,), 74.0), GGMLType.Q8_1: ((0,), 74.0),
    GGMLType.Q2_K: ((80, 82), 9.0), GGMLType.Q3_K: ((108,), 60.0),
    GGMLType.Q4_K: ((0, 2), 150.0), GGMLType.Q5_K: ((0, 2), 300.0), GGMLType.Q6_K: ((208,), 1300.0),
}
_WEIGHT_STD = 0.02


def _rand_f32(rng, n: int, vector: bool) -> np.ndarray:
    x = rng.standard_normal(n, dtype=np.float32) * np.float32(_WEIGHT_STD)
    return x + np.float32(1.0) if vector else x


def _fill_tensor(mm: np.ndarray, t, rng, zero: bool) -> None:
    """Write tensor t's data into the writable file map mm."""
    dst = mm[t.offset:t.offset + t.nbytes]
    if zero:
        dst[:] = 0
        return
    n = t.n_elements
    vector = len(t.shape) == 1
    if t.type == GGMLType.F32:
        dst.view(np.float32)[:] = _rand_f32(rng, n, vector)
    elif t.type == GGMLType.F16:
        dst.view(np.float16)[:] = _rand_f32(rng, n, vector)
    elif t.type == GGMLType.BF16:
        dst.view(np.uint16)[:] = (_rand_f32(rng, n, vector).view(np.uint32) >> 16).astype(np.uint16)
    elif t.type in _SCALES:
        _fill_blocks(dst, t.type, rng)
    else:
        raise ValueError(f"{t.name}: synthetic weights for {t.type.name} are not supported")


def _fill_blocks(dst: np.ndarray, qtype: GGMLType, rng) -> None:
    _, bsize = GGML_BLOCK[qtype]
    offs, typical = _SCALES[qtype]
    for a in range(0, len(dst), _CHUNK - _CHUNK % bsize):
        part = dst[a:a + _CHUNK - _CHUNK % bsize]
        part[:] = np.frombuffer(rng.bytes(len(part)), dtype=np.uint8)
        blocks = part.reshape(-1, bsize)
        d = np.float32(_WEIGHT_STD / typical)
        for j, off in enumerate(offs):
            val = d if j == 0 else d / np.float32(4)
            scale = rng.uniform(0.5, 1.5, len(blocks)).astype(np.float32) * val
            blocks[:, off:off + 2] = scale.astype(np.float16).view(np.uint8).reshape(-1, 2)


def _copy_source(src: str, dst: str) -> None:
    """dst := src's header followed by a (sparse) data section of the right size; a .gz source
    (a skeleton) is decompressed as is."""
    if src.endswith(".gz"):
        with gzip.open(src, "rb") as fi, open(dst, "wb") as fo:
            shutil.copyfileobj(fi, fo, _CHUNK)
        return
    r = GGUFReader(src)
    try:
        end = max((t.offset + t.nbytes for t in r.tensors.values()), default=r.data_offset)
        with open(src, "rb") as fi:
            header = fi.read(r.data_offset)
    finally:
        r.close()
    with open(dst, "wb") as fo:
        fo.write(header)
        fo.truncate(end)


def write_synthetic(src: str, dst: str, seed: int = 0, zero: bool = False) -> str:
    """Write dst: src's header and tensor table with random (or zero) weights. Returns dst."""
    from .models import resolve
    if not src.endswith(".gz"):
        src = resolve(src, progress=False)
    _copy_source(src, dst)
    r = GGUFReader(dst)
    try:
        tensors = sorted(r.tensors.values(), key=lambda t: t.offset)
    finally:
        r.close()
    rng = np.random.default_rng(seed)
    mm = np.memmap(dst, dtype=np.uint8, mode="r+")
    try:
        for t in tensors:
            _fill_tensor(mm, t, rng, zero)
        mm.flush()
    finally:
        del mm
    return dst


def write_skeleton(src: str, dst_gz: str) -> str:
    """A gzip'd copy of src with every weight zero: the model's shape in a few MB."""
    tmp = dst_gz + ".tmp.gguf"
    try:
        write_synthetic(src, tmp, zero=True)
        with open(tmp, "rb") as fi, gzip.open(dst_gz, "wb", compresslevel=6) as fo:
            shutil.copyfileobj(fi, fo, _CHUNK)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dst_gz


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama.synthetic",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("src", help="source GGUF: path, bundled alias, or a skeleton .gguf.gz")
    ap.add_argument("out", help="output path")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skeleton", action="store_true",
                    help="write a gzip'd zero-weight skeleton instead of random weights")
    a = ap.parse_args(argv)
    if a.skeleton:
        write_skeleton(a.src, a.out)
    else:
        write_synthetic(a.src, a.out, seed=a.seed)
    print(a.out, os.path.getsize(a.out), "bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
