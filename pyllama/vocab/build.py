"""Build the tokenizer of a GGUF vocab: a `tokenizers` splitter in front of our C merge step.

pyllama keeps the `tokenizers` library (docs/architecture.md) for what it does well and fast: splitting
out the added tokens (control/unknown ones as special tokens, split only when parsing special
text; user-defined ones always; matched on the raw text like llama.cpp's tokenizer_st_partition)
and, for BPE, the pre-tokenizer regexes. Its model is a one-entry WordLevel, so every other piece
comes back as one "text" token whose offsets locate it. Building a `tokenizers` BPE model for
a 262k-token vocab takes ~0.7 s (the Rust hash maps and the Python -> Rust copies; a serialized
tokenizer loads slower still), so the merges run in _merge.pyx, whose tables are built from the
GGUF arrays in milliseconds:
- SPM (`tokenizer.ggml.model` = llama): llama.cpp's SPM session on each text piece.
- BPE (gpt2): byte-level BPE with the GGUF merges, on each pre-tokenized word.
BOS/EOS are added by the caller.
"""
from __future__ import annotations

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, models, pre_tokenizers

from ..errors import TokenizerError
from . import _merge, strings
from .pretok import REGEXES, PreTok, engine_regex

SPACE = "\u2581"


class TextIds:
    """Token text -> id over a TokenTable, the mapping attrs.py looks tokens up in."""

    def __init__(self, table):
        self._t = table

    def get(self, text: str, default=None):
        i = self._t.find(text.encode("utf-8", "surrogatepass"))
        return default if i < 0 else i

    def __contains__(self, text: str) -> bool:
        return self.get(text) is not None

    def __getitem__(self, text: str) -> int:
        i = self.get(text)
        if i is None:
            raise KeyError(text)
        return i


def token_table(tokens):
    """The vocab's TokenTable (texts, exact bytes, text -> id)."""
    return _merge.TokenTable(*strings.packed(tokens, fill_empty=True))


def bytes_to_unicode() -> list[str]:
    """GPT-2's byte-level alphabet: the printable character standing for each byte."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    out, extra = [], 0
    for b in range(256):
        if b in keep:
            out.append(chr(b))
        else:
            out.append(chr(256 + extra))
            extra += 1
    return out


def spm_merger(table, scores, add_space_prefix: bool):
    if scores is None:
        scores = np.zeros(len(table), dtype=np.float32)
    scores = np.asarray(scores, dtype=np.float32)
    if scores.shape[0] < len(table):
        raise TokenizerError(f"tokenizer.ggml.scores has {scores.shape[0]} entries for "
                             f"{len(table)} tokens")
    byte_ids = [_byte_token(table, b) for b in range(256)]
    return _merge.Merger(table, None, scores, byte_ids, None, False, add_space_prefix)


def _byte_token(table, b: int) -> int:
    """llama.cpp's byte_to_token for SPM: <0xXX>, else the byte itself as a token."""
    i = table.find(f"<0x{b:02X}>".encode())
    return i if i >= 0 else table.find(bytes([b]))


def bpe_merger(table, merges, pre: PreTok):
    try:
        mt = _merge.MergeTable(table, *strings.packed(merges))
    except ValueError as e:
        raise TokenizerError(f"cannot build the BPE tokenizer: {e}") from None
    chars = [c.encode() for c in bytes_to_unicode()]
    byte_ids = [table.find(c) for c in chars]
    return _merge.Merger(table, mt, None, byte_ids, chars, pre.ignore_merges, False)


def splitter(table, partition: np.ndarray, special: np.ndarray, pre: PreTok | None):
    """(tokenizers.Tokenizer, remap): the Tokenizer splits out the added tokens (and applies the
    BPE pre-tokenizer); remap[its id] is the vocab id of an added token, its id 0 marks text."""
    text = "\0text\0"
    while table.find(text.encode()) >= 0:
        text += "\0"
    tok = Tokenizer(models.WordLevel({text: 0}, unk_token=text))
    if pre is not None:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(engine_regex(r)), "isolated")
             for r in REGEXES[pre.regexes]])
    ids = [i for i in partition.tolist() if table.raw(i)]
    texts = [table.text(i) for i in ids]
    flags = dict(zip(partition.tolist(), special.tolist()))
    tok.add_tokens([AddedToken(t, special=bool(flags[i]), normalized=False)
                    for i, t in zip(ids, texts)])
    sids = [tok.token_to_id(t) for t in texts]
    remap = np.zeros(max(sids, default=0) + 1, dtype=np.int32)
    remap[sids] = [table.find(table.raw(i)) for i in ids]
    return tok, remap
