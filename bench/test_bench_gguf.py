"""pytest-benchmark: opening the bundled models with our GGUF reader (metadata + tensor table),
decoding the whole vocabulary, and the numpy reference dequantizer on one real tensor per type.
Reports times, asserts nothing about them.

    PYTHONPATH=. python -m pytest bench/test_bench_gguf.py --benchmark-only
"""
import pytest

from pyllama.errors import PyllamaError
from pyllama.gguf import GGMLType, GGUFReader
from pyllama.quant import dequantize

MODELS = ["gemma-3-270m", "qwen2.5-coder-0.5b"]


def model_path(alias):
    from pyllama.models import resolve
    try:
        return resolve(alias, progress=False)
    except PyllamaError as e:
        pytest.skip(f"bundled model {alias} unavailable: {e}")


@pytest.mark.parametrize("alias", MODELS)
def test_open(benchmark, alias):
    path = model_path(alias)
    r = benchmark(GGUFReader, path)
    assert r.tensors


@pytest.mark.parametrize("alias", MODELS)
def test_open_and_decode_vocab(benchmark, alias):
    path = model_path(alias)

    def run():
        return GGUFReader(path).metadata["tokenizer.ggml.tokens"].tolist()
    assert len(benchmark(run)) > 100_000


@pytest.mark.parametrize("qtype", ["Q8_0", "Q5_0", "Q4_K", "Q6_K"])
def test_dequantize_512_rows(benchmark, qtype):
    """The first 512 rows of the first 2-D Qwen tensor of the type (extra_info: element count)."""
    r = GGUFReader(model_path("qwen2.5-coder-0.5b"))
    t = next(t for t in r.tensors.values()
             if t.type == GGMLType[qtype] and len(t.shape) == 2 and t.shape[0] >= 512)
    shape = (512, t.shape[1])
    benchmark.extra_info["tensor"] = f"{t.name} {t.shape}"
    benchmark.extra_info["elements"] = shape[0] * shape[1]
    y = benchmark(dequantize, t.data[:512], t.type, shape)
    assert y.shape == shape
