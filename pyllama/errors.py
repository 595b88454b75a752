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


class GrammarError(PyllamaError, ValueError):
    """A GBNF grammar or JSON schema that does not parse or cannot be used. The message is
    llama.cpp's (for a parse error it quotes the text from the failing position on);
    `position` is the character offset of the failure (None when it has none), `line` and
    `column` (1-based) the same place."""

    def __init__(self, message: str, position: int | None = None, text: str | None = None):
        super().__init__(message)
        self.message = message
        self.position = position
        self.line = self.column = None
        if position is not None and text is not None:
            before = text[:position]
            self.line = before.count("\n") + 1
            self.column = position - (before.rfind("\n") + 1) + 1

    def describe(self) -> str:
        """One line: the message (cut at its first line end), then the line and column."""
        msg = self.message.split("\n", 1)[0]
        if self.line is not None:
            msg += f" (line {self.line}, column {self.column})"
        return msg
