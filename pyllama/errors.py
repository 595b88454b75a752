"""Exception types shared by every layer. Each carries one readable line for the user."""


class PyllamaError(Exception):
    """Base class of every error pyllama raises on purpose."""


class GgufError(PyllamaError):
    """A GGUF file is missing, truncated, corrupt or uses something we do not support."""


class ModelError(PyllamaError):
    """A model file is valid GGUF but cannot be run (unknown architecture, missing tensor...)."""


class TokenizerError(PyllamaError):
    """The vocabulary in a GGUF cannot be turned into a tokenizer."""


class TemplateError(PyllamaError):
    """A chat template failed to parse or render."""


class ContextError(PyllamaError):
    """Invalid context parameters (sizes, types, sequence counts)."""


class BackendError(PyllamaError):
    """A backend is unavailable or an op is not supported by it."""
