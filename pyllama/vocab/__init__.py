"""Vocabulary (tokenizer identical to llama.cpp's) and chat templates."""
from .chat import ChatTemplate
from .vocab import Vocab

__all__ = ["Vocab", "ChatTemplate"]
