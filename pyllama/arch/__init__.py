"""Architectures, one file each, named after GGUF `general.architecture`; looked up by name."""
from __future__ import annotations

from ..errors import ModelError
from .base import Arch, LayerWeights, ModelWeights

_REGISTRY: dict[str, type[Arch]] = {}


def register(cls: type[Arch]) -> type[Arch]:
    _REGISTRY[cls.name] = cls
    return cls


def get(name: str) -> type[Arch]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ModelError(f"unknown model architecture: '{name}' "
                         f"(supported: {', '.join(sorted(_REGISTRY))})") from None


def names() -> list[str]:
    return sorted(_REGISTRY)


from . import (deepseek2, gemma2, gemma3, glm4, glm4moe, gpt_oss, granite, llama, llama4,  # noqa: E402,F401,E501
               mistral3, olmo2, phi3, qwen2, qwen2moe, qwen3, qwen3moe, smollm3)  # (registration)

__all__ = ["Arch", "LayerWeights", "ModelWeights", "register", "get", "names"]
