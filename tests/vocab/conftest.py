import pytest


@pytest.fixture(scope="session")
def gemma_vocab(gemma_path):
    from pyllama.gguf import GGUFReader
    from pyllama.vocab import Vocab
    return Vocab.from_gguf(GGUFReader(gemma_path))


@pytest.fixture(scope="session")
def qwen_vocab(qwen_path):
    from pyllama.gguf import GGUFReader
    from pyllama.vocab import Vocab
    return Vocab.from_gguf(GGUFReader(qwen_path))


@pytest.fixture(params=["gemma-3-270m", "qwen2.5-coder-0.5b"])
def real_vocab(request):
    name = "gemma_vocab" if request.param.startswith("gemma") else "qwen_vocab"
    return request.param, request.getfixturevalue(name)
