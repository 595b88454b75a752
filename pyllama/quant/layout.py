"""ggml block layouts: the byte structure of one block of each tensor type.

Field for field the same as ggml's `block_*` structs (ggml-common.h). Each layout carries a numpy
structured dtype, so `raw.reshape(-1).view(BLOCK_LAYOUT[t].dtype)` turns packed uint8 rows into
an array of blocks whose fields read as `blocks["d"]`, `blocks["qs"]` ([n_blocks, n]), ...
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..gguf import GGML_BLOCK, GGMLType

QK_K = 256          # elements per K-quant super-block
K_SCALE_SIZE = 12   # packed 6-bit scales/mins of Q4_K/Q5_K


@dataclass(frozen=True)
class BlockLayout:
    """One ggml block: `block_elems` values stored in `block_bytes` bytes.

    `fields` is ((name, numpy dtype str, count), ...) in memory order; `dtype` the matching
    packed numpy structured dtype (itemsize == block_bytes).
    """
    type: GGMLType
    block_elems: int
    block_bytes: int
    fields: tuple[tuple[str, str, int], ...]

    @property
    def dtype(self) -> np.dtype:
        return np.dtype([(n, dt, (c,)) if c > 1 else (n, dt) for n, dt, c in self.fields])

    def row_bytes(self, n_per_row: int) -> int:
        if n_per_row % self.block_elems:
            raise ValueError(f"row of {n_per_row} is not a multiple of the {self.type.name} "
                             f"block size {self.block_elems}")
        return n_per_row // self.block_elems * self.block_bytes


_FIELDS = {
    GGMLType.F32: (("v", "<f4", 1),),
    GGMLType.F16: (("v", "<f2", 1),),
    GGMLType.BF16: (("v", "<u2", 1),),
    GGMLType.Q4_0: (("d", "<f2", 1), ("qs", "u1", 16)),
    GGMLType.Q4_1: (("d", "<f2", 1), ("m", "<f2", 1), ("qs", "u1", 16)),
    GGMLType.Q5_0: (("d", "<f2", 1), ("qh", "u1", 4), ("qs", "u1", 16)),
    GGMLType.Q5_1: (("d", "<f2", 1), ("m", "<f2", 1), ("qh", "u1", 4), ("qs", "u1", 16)),
    GGMLType.Q8_0: (("d", "<f2", 1), ("qs", "i1", 32)),
    GGMLType.Q8_1: (("d", "<f2", 1), ("s", "<f2", 1), ("qs", "i1", 32)),
    GGMLType.Q2_K: (("scales", "u1", 16), ("qs", "u1", 64), ("d", "<f2", 1),
                    ("dmin", "<f2", 1)),
    GGMLType.Q3_K: (("hmask", "u1", 32), ("qs", "u1", 64), ("scales", "u1", 12),
                    ("d", "<f2", 1)),
    GGMLType.Q4_K: (("d", "<f2", 1), ("dmin", "<f2", 1), ("scales", "u1", 12),
                    ("qs", "u1", 128)),
    GGMLType.Q5_K: (("d", "<f2", 1), ("dmin", "<f2", 1), ("scales", "u1", 12),
                    ("qh", "u1", 32), ("qs", "u1", 128)),
    GGMLType.Q6_K: (("ql", "u1", 128), ("qh", "u1", 64), ("scales", "i1", 16),
                    ("d", "<f2", 1)),
    GGMLType.Q8_K: (("d", "<f4", 1), ("qs", "i1", 256), ("bsums", "<i2", 16)),
    GGMLType.IQ4_NL: (("d", "<f2", 1), ("qs", "u1", 16)),
    GGMLType.IQ2_XXS: (("d", "<f2", 1), ("qs", "<u2", 32)),
    GGMLType.IQ2_XS: (("d", "<f2", 1), ("qs", "<u2", 32), ("scales", "u1", 8)),
    GGMLType.IQ2_S: (("d", "<f2", 1), ("qs", "u1", 64), ("qh", "u1", 8), ("scales", "u1", 8)),
    GGMLType.IQ3_XXS: (("d", "<f2", 1), ("qs", "u1", 96)),
    GGMLType.IQ3_S: (("d", "<f2", 1), ("qs", "u1", 64), ("qh", "u1", 8), ("signs", "u1", 32),
                     ("scales", "u1", 4)),
    GGMLType.IQ1_S: (("d", "<f2", 1), ("qs", "u1", 32), ("qh", "<u2", 8)),
    GGMLType.IQ1_M: (("qs", "u1", 32), ("qh", "u1", 16), ("scales", "u1", 8)),
    GGMLType.IQ4_XS: (("d", "<f2", 1), ("scales_h", "<u2", 1), ("scales_l", "u1", 4),
                      ("qs", "u1", 128)),
    GGMLType.TQ1_0: (("qs", "u1", 48), ("qh", "u1", 4), ("d", "<f2", 1)),
    GGMLType.TQ2_0: (("qs", "u1", 64), ("d", "<f2", 1)),
    GGMLType.MXFP4: (("e", "u1", 1), ("qs", "u1", 16)),
}

BLOCK_LAYOUT: dict[GGMLType, BlockLayout] = {
    t: BlockLayout(t, *GGML_BLOCK[t], f) for t, f in _FIELDS.items()
}

# the activation format llama.cpp's CPU vec_dot pairs with each weight type (type_traits_cpu)
VEC_DOT_TYPE: dict[GGMLType, GGMLType] = {
    GGMLType.F32: GGMLType.F32, GGMLType.F16: GGMLType.F16, GGMLType.BF16: GGMLType.BF16,
    GGMLType.Q4_0: GGMLType.Q8_0, GGMLType.Q5_0: GGMLType.Q8_0, GGMLType.Q8_0: GGMLType.Q8_0,
    GGMLType.Q4_1: GGMLType.Q8_1, GGMLType.Q5_1: GGMLType.Q8_1,
    GGMLType.Q2_K: GGMLType.Q8_K, GGMLType.Q3_K: GGMLType.Q8_K, GGMLType.Q4_K: GGMLType.Q8_K,
    GGMLType.Q5_K: GGMLType.Q8_K, GGMLType.Q6_K: GGMLType.Q8_K, GGMLType.IQ4_NL: GGMLType.Q8_0,
    GGMLType.MXFP4: GGMLType.Q8_0, GGMLType.IQ4_XS: GGMLType.Q8_K,
    GGMLType.IQ2_XXS: GGMLType.Q8_K, GGMLType.IQ2_XS: GGMLType.Q8_K, GGMLType.IQ2_S: GGMLType.Q8_K,
    GGMLType.IQ3_XXS: GGMLType.Q8_K, GGMLType.IQ3_S: GGMLType.Q8_K, GGMLType.IQ1_S: GGMLType.Q8_K,
    GGMLType.IQ1_M: GGMLType.Q8_K, GGMLType.TQ1_0: GGMLType.Q8_K, GGMLType.TQ2_0: GGMLType.Q8_K,
}


def _check() -> None:
    for t, lay in BLOCK_LAYOUT.items():
        assert lay.dtype.itemsize == lay.block_bytes, (t, lay.dtype.itemsize)


_check()
