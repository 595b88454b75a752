"""Vocabulary (a tokenizer identical to llama.cpp's) and chat templates.

    vocab = Vocab.from_gguf(GGUFReader(path))      # SPM ('llama') or BPE ('gpt2') vocabs
    ids = vocab.tokenize(text, add_special=True, parse_special=False)
    text = vocab.detokenize(ids, remove_special=False, unparse_special=False)
    piece = vocab.token_to_piece(id, special=True)  # bytes, may be part of a UTF-8 character
    vocab.bos / eos / eot / pad (-1 when absent), add_bos, add_eos, eog_ids, is_eog(id)
    prompt = ChatTemplate.for_model(vocab, override=None).apply(messages, tools=None)

Modules: vocab (Vocab), attrs (token attributes, special ids, EOG set), build (the
`tokenizers` splitter + the merge tables), _merge (Cython: token table, BPE merge table,
llama.cpp's SPM and BPE merge loops), pretok (BPE pre-tokenizer regexes), strings (GGUF string
arrays packed for _merge), chat (ChatTemplate).
"""
from .chat import ChatTemplate
from .vocab import Vocab

__all__ = ["Vocab", "ChatTemplate"]
