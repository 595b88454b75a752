"""GGUF file access: our own mmap parser (see reader.py)."""
from .constants import GGML_BLOCK, GGMLType, ValueType, row_nbytes
from .reader import GGUFReader, StringArray, TensorInfo, open_gguf

__all__ = ["GGUFReader", "StringArray", "TensorInfo", "open_gguf", "GGMLType", "ValueType",
           "GGML_BLOCK", "row_nbytes"]
