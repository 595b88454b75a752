"""Vocabulary (a tokenizer identical to llama.cpp's) and chat templates.

    vocab = Vocab.from_gguf(GGUFReader(path))      # SPM ('llama') or BPE ('gpt2') vocabs
    ids = vocab.tokenize(text, add_special=True, parse_special=False)
    text = vocab.detokenize(ids, remove_special=False, unparse_special=False)
    piece = vocab.token_to_piece(id, special=True)  # bytes, may be part of a UTF-8 character
    vocab.bos / eos / eot / pad (-1 when absent), add_bos, add_eos, eog_ids, is_eog(id)
    prompt = ChatTemplate.for_model(vocab, override=None).apply(messages, tools=None)

Modules: vocab (Vocab), attrs (token attributes, special ids, EOG set), build (the
`tokenizers` model + SPM merge cache), pretok (BPE pre-tokenizer regexes), spm (llama.cpp's
SPM merge loop), strings (bulk decoding of GGUF string arrays), chat (ChatTemplate).
"""
from .chat import ChatTemplate
from .vocab import Vocab

__all__ = ["Vocab", "ChatTemplate"]
