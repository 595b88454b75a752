"""Small GGUF files for the reader tests.

`write_sample` uses the `gguf` package's GGUFWriter (an independent writer). `RawGGUF` assembles
files byte by byte so tests can place exact corruptions (lengths, types, counts, offsets) and know
where they are.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

import gguf
import numpy as np

from pyllama.quant import quantize

VT = gguf.GGUFValueType
Q = gguf.GGMLQuantizationType

SCALARS = {
    "t.u8": (VT.UINT8, 250), "t.i8": (VT.INT8, -120), "t.u16": (VT.UINT16, 65000),
    "t.i16": (VT.INT16, -32000), "t.u32": (VT.UINT32, 4_000_000_000),
    "t.i32": (VT.INT32, -2_000_000_000), "t.f32": (VT.FLOAT32, 0.1),
    "t.bool_t": (VT.BOOL, True), "t.bool_f": (VT.BOOL, False),
    "t.str": (VT.STRING, "héllo wörld ✓ 𝄞"), "t.empty_str": (VT.STRING, ""),
    "t.u64": (VT.UINT64, 2 ** 64 - 1), "t.i64": (VT.INT64, -(2 ** 63)),
    "t.f64": (VT.FLOAT64, 1e300),
}
SCALAR_ARRAYS = {
    "a.u8": (VT.UINT8, [0, 1, 255]), "a.i8": (VT.INT8, [-128, 0, 127]),
    "a.u16": (VT.UINT16, [0, 65535]), "a.i16": (VT.INT16, [-32768, 32767]),
    "a.u32": (VT.UINT32, [1, 2, 3, 2 ** 32 - 1]), "a.i32": (VT.INT32, [-1, 0, 1]),
    "a.f32": (VT.FLOAT32, [0.5, -1.25, 3.4e38]), "a.bool": (VT.BOOL, [True, False, True]),
    "a.u64": (VT.UINT64, [2 ** 63]), "a.i64": (VT.INT64, [-5, 5]),
    "a.f64": (VT.FLOAT64, [1e-300, 2.5]),
}
STRINGS = ["a", "", "ünïcödé", "<|im_start|>", " spaced ", "x" * 300, "\n\t"]
NESTED = {
    "n.ints": [[1, 2, 3], [4], [5, 6]],
    "n.strs": [["a", "bc"], ["", "d"]],
}


def sample_tensors(rng) -> dict[str, tuple[np.ndarray, Q | None, tuple[int, ...]]]:
    """name -> (data to write, raw type or None, numpy shape)."""
    x = rng.standard_normal((4, 256)).astype(np.float32)
    return {
        "f32.vec": (rng.standard_normal(7).astype(np.float32), None, (7,)),
        "f32.3d": (rng.standard_normal((2, 3, 5)).astype(np.float32), None, (2, 3, 5)),
        "f16.mat": (rng.standard_normal((3, 8)).astype(np.float16), None, (3, 8)),
        "bf16.mat": (quantize(x[:2, :16], Q.BF16), Q.BF16, (2, 16)),
        "q8_0.mat": (quantize(x, Q.Q8_0), Q.Q8_0, (4, 256)),
        "q4_k.mat": (quantize(x, Q.Q4_K), Q.Q4_K, (4, 256)),
        "q6_k.mat": (quantize(x[:1], Q.Q6_K), Q.Q6_K, (1, 256)),
        "i32.vec": (np.arange(-3, 6, dtype=np.int32), None, (9,)),
        "f32.4d": (rng.standard_normal((2, 1, 3, 4)).astype(np.float32), None, (2, 1, 3, 4)),
    }


def write_sample(path, alignment: int | None = 64, seed: int = 0) -> dict:
    """Write a GGUF with every value type and several tensor types; return what was written."""
    w = gguf.GGUFWriter(str(path), "llama")
    if alignment is not None:
        w.add_custom_alignment(alignment)
    for k, (vt, v) in SCALARS.items():
        w.add_key_value(k, v, vt)
    for k, (vt, v) in SCALAR_ARRAYS.items():
        w.add_key_value(k, v, VT.ARRAY, sub_type=vt)
    w.add_array("s.strs", STRINGS)
    w.add_key_value("n.ints", NESTED["n.ints"], VT.ARRAY, sub_type=VT.ARRAY)
    w.add_key_value("n.strs", NESTED["n.strs"], VT.ARRAY, sub_type=VT.ARRAY)
    tensors = sample_tensors(np.random.default_rng(seed))
    for name, (data, raw, _) in tensors.items():
        w.add_tensor(name, data, raw_dtype=raw)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


# -- raw byte-level builder ---------------------------------------------------------------------

def gstr(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + payload


def kv_u32(key: str, v: int) -> bytes:
    return kv(key, VT.UINT32, struct.pack("<I", v))


def kv_str(key: str, s: str) -> bytes:
    return kv(key, VT.STRING, gstr(s))


def arr(etype: int, count: int, body: bytes) -> bytes:
    return struct.pack("<IQ", etype, count) + body


@dataclass
class RawGGUF:
    """A GGUF assembled from parts; `build()` returns bytes and records part offsets."""
    kvs: list[bytes] = field(default_factory=list)
    tinfos: list[tuple] = field(default_factory=list)   # (name, ne, type, rel offset)
    data: bytes = b""
    version: int = 3
    n_kv: int | None = None
    n_tensors: int | None = None
    alignment: int = 32
    magic: bytes = b"GGUF"
    offsets: dict = field(default_factory=dict)

    def tensor(self, name, ne, ttype, rel, nbytes_data: bytes = b""):
        self.tinfos.append((name, tuple(ne), int(ttype), rel))
        self.data += nbytes_data
        return self

    def build(self) -> bytes:
        out = bytearray(self.magic + struct.pack("<I", self.version))
        n_t = len(self.tinfos) if self.n_tensors is None else self.n_tensors
        n_k = len(self.kvs) if self.n_kv is None else self.n_kv
        out += struct.pack("<QQ", n_t, n_k)
        for i, b in enumerate(self.kvs):
            self.offsets[f"kv{i}"] = len(out)
            out += b
        for i, (name, ne, tt, rel) in enumerate(self.tinfos):
            self.offsets[f"t{i}"] = len(out)
            out += gstr(name) + struct.pack("<I", len(ne))
            out += b"".join(struct.pack("<Q", d) for d in ne) + struct.pack("<IQ", tt, rel)
        self.offsets["data"] = -(-len(out) // self.alignment) * self.alignment
        out += b"\0" * (self.offsets["data"] - len(out))
        return bytes(out + self.data)


def minimal_valid() -> RawGGUF:
    """Two KVs and two F32 tensors ([4] and [2, 8]) with data; default alignment 32."""
    g = RawGGUF(kvs=[kv_str("general.architecture", "llama"), kv_u32("x.n", 7)])
    a = np.arange(4, dtype=np.float32).tobytes()
    b = np.arange(16, dtype=np.float32).tobytes()
    g.tensor("a", (4,), Q.F32, 0, a + b"\0" * 16)
    g.tensor("b", (8, 2), Q.F32, 32, b)
    return g
