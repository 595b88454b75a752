"""ggml block formats and numpy reference (de)quantizers (layer L1).

- `BLOCK_LAYOUT[type]`: block elements, bytes, fields and a numpy structured dtype per type;
  `VEC_DOT_TYPE[type]`: the activation format llama.cpp's CPU matmul pairs with a weight type.
- `dequantize(raw, type, shape=None) -> float32` for F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
  Q8_0, Q8_1, Q2_K..Q6_K, Q8_K, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL,
  IQ4_XS, TQ1_0, TQ2_0, MXFP4 (bit-exact with ggml's dequantize_row_*; grids.py holds the IQ
  lattices, generated from ggml-common.h by scripts/gen_iq_grids.py).
- `quantize(x, type) -> uint8 [..., row_bytes]`: ggml's reference quantizers, bit-exact, for the
  float, legacy and K types and IQ4_NL (IQ4_NL: the KV-cache path; `quantize_iq4_nl(x, ntry=7)` is llama-quantize's).
- `quantize_q8_0_rows / quantize_q8_1_rows / quantize_q8_K_rows`: activation quantization with
  the block fields separated, for reference integer dot products (`simd=True`: the x86 AVX2
  variant llama.cpp's CPU backend actually runs for q8_0/q8_1).
"""
from .activation import quantize_q8_0_rows, quantize_q8_1_rows, quantize_q8_K_rows
from .codec import DEQUANTIZE_TYPES, QUANTIZE_TYPES, dequantize, quantize
from .iq4nl import quantize_iq4_nl
from .layout import BLOCK_LAYOUT, K_SCALE_SIZE, QK_K, VEC_DOT_TYPE, BlockLayout
from .legacy import f32_to_bf16, nearest_int, roundf
from .reference import bf16_to_f32, infer_shape, k4_scale_min, q3_k_scales

__all__ = [
    "BLOCK_LAYOUT", "BlockLayout", "VEC_DOT_TYPE", "QK_K", "K_SCALE_SIZE",
    "dequantize", "quantize", "QUANTIZE_TYPES", "DEQUANTIZE_TYPES",
    "quantize_q8_0_rows", "quantize_q8_1_rows", "quantize_q8_K_rows", "quantize_iq4_nl",
    "bf16_to_f32", "f32_to_bf16", "infer_shape", "k4_scale_min", "q3_k_scales", "nearest_int",
    "roundf",
]
