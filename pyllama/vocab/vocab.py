"""Vocab: llama.cpp's llama_vocab in Python -- tokenize, detokenize, special tokens.

Tokenization: the `tokenizers` library splits out added tokens and pre-tokenizes, _merge.pyx
merges each text piece (build.py explains the split); attributes, special ids, BOS/EOS
insertion, pieces and detokenization follow llama.cpp's src/llama-vocab.cpp.
"""
from __future__ import annotations

import codecs
import threading

import numpy as np

from ..errors import TokenizerError
from ..log import get_logger
from . import attrs, build
from .attrs import BYTE, CONTROL, NORMAL, UNKNOWN, USER_DEFINED
from .pretok import pre_tokenizer

log = get_logger("vocab")
_SPECIAL_ATTR = UNKNOWN | CONTROL
_PARTITION_ATTR = CONTROL | USER_DEFINED | UNKNOWN


# GPT-2 byte-level alphabet: printable stand-in character -> byte
_BYTE_DECODER = {c: b for b, c in enumerate(build.bytes_to_unicode())}


def _one_byte_replace(err: UnicodeDecodeError):
    return "\ufffd", err.start + 1


codecs.register_error("pyllama.byte_replace", _one_byte_replace)


def _valid_text(text) -> str:
    """str for the tokenizer: bytes decoded with one U+FFFD per invalid byte (llama.cpp's
    unicode_cpts_from_utf8), lone surrogates replaced by U+FFFD."""
    if isinstance(text, (bytes, bytearray, memoryview)):
        return bytes(text).decode("utf-8", "pyllama.byte_replace")
    if not isinstance(text, str):
        raise TypeError(f"tokenize() needs str or bytes, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def _clean_spaces(b: bytes) -> bytes:
    """llama.cpp's detokenize clean-up (clean_spaces), ported pass by pass (in place, like the
    C code): ' ?' ' !' ' .' ' ,' lose the space; " ' " -> "'"; " 's" " 'm" " 're" " 've" lose
    the space."""
    t = bytearray(b)
    n = _clean_pass(t, len(t), _drop_before_punct)
    n = _clean_pass(t, n, _drop_around_quote)
    n = _clean_pass(t, n, _drop_before_contraction)
    return bytes(t[:n])


def _clean_pass(t: bytearray, n: int, rule) -> int:
    total = 1 if n else 0
    i = 1
    while i < n:
        x = t[i]
        drop, skip = rule(t, i, n)
        total -= drop
        if skip:
            i += 1
            t[i] = 0
        t[total] = x
        total += 1
        i += 1
    return total


def _drop_before_punct(t, i, n):
    return int(t[i - 1] == 0x20 and t[i] in b"?!.,"), False


def _drop_around_quote(t, i, n):
    hit = t[i] == 0x27 and i + 1 < n and t[i - 1] == 0x20 and t[i + 1] == 0x20
    return int(hit), hit


def _drop_before_contraction(t, i, n):
    if not (t[i - 1] == 0x20 and t[i] == 0x27 and i + 1 < n):
        return 0, False
    x1 = t[i + 1]
    if x1 in b"sm":
        return 1, False
    return int(i + 2 < n and bytes(t[i + 1:i + 3]) in (b"re", b"ve")), False


class Vocab:
    """A model's vocabulary (see module doc). Build with `Vocab.from_gguf(reader)`."""

    def __init__(self, kind: str, table, attr: np.ndarray, special: dict[str, int],
                 flags: dict[str, bool], splitter, remap: np.ndarray, merger,
                 chat_template: str | None = None):
        self.kind = kind                        # "spm" or "bpe" (llama.cpp's vocab type)
        self._table = table                     # _merge.TokenTable: texts, exact bytes, ids
        self.attr = attr                        # llama_token_attr flags per token
        self.special = special                  # name -> id (-1 when absent)
        self.add_bos = bool(flags["add_bos"])
        self.add_eos = bool(flags["add_eos"])
        self.add_space_prefix = bool(flags["add_space_prefix"])
        self.clean_spaces = bool(flags["clean_spaces"])
        self.eog_ids: frozenset[int] = flags["eog"]
        self.chat_template = chat_template
        self._tok = splitter                    # tokenizers.Tokenizer: added tokens, pre-split
        self._remap = remap                     # splitter id -> vocab id (0: a text piece)
        self._merger = merger                   # _merge.Merger: text piece -> ids
        self._lock = threading.Lock()
        self._pieces: dict[int, bytes] = {}

    # ---- construction -------------------------------------------------------------------
    @classmethod
    def from_gguf(cls, reader) -> "Vocab":
        """From a GGUFReader (or its metadata dict)."""
        md = getattr(reader, "metadata", reader)
        model = md.get("tokenizer.ggml.model")
        if model not in ("llama", "gpt2"):
            raise TokenizerError(f"unsupported tokenizer model {model!r} "
                                 "(supported: 'llama' (SPM), 'gpt2' (BPE))")
        if "tokenizer.ggml.tokens" not in md:
            raise TokenizerError("cannot find tokenizer vocab in model file")
        table = build.token_table(md["tokenizer.ggml.tokens"])
        attr, special, flags = _attributes(md, model, table, build.TextIds(table))
        sel = np.nonzero(attr & _PARTITION_ATTR)[0]
        tok, remap = build.splitter(table, sel, attr[sel] & _SPECIAL_ATTR, flags["pre"])
        return cls("spm" if model == "llama" else "bpe", table, attr, special, flags, tok,
                   remap, _merger(model, md, table, flags), md.get("tokenizer.chat_template"))

    # ---- properties ---------------------------------------------------------------------
    @property
    def n_vocab(self) -> int:
        return len(self._table)

    bos = property(lambda self: self.special["bos"])
    eos = property(lambda self: self.special["eos"])
    eot = property(lambda self: self.special["eot"])
    pad = property(lambda self: self.special["pad"])
    unk = property(lambda self: self.special["unk"])
    sep = property(lambda self: self.special["sep"])

    def is_eog(self, id: int) -> bool:
        return id in self.eog_ids

    def is_control(self, id: int) -> bool:
        return bool(self.attr[id] & CONTROL)

    def token_text(self, id: int) -> str:
        return self._table.text(id)

    def token_id(self, text: str) -> int | None:
        """The id whose vocab string is `text` (exact; the last of duplicates), or None."""
        i = self._table.find(text.encode("utf-8", "surrogatepass"))
        return None if i < 0 else i

    # ---- text -> ids --------------------------------------------------------------------
    def tokenize(self, text, add_special: bool = True, parse_special: bool = False) -> list[int]:
        """llama_tokenize: BOS/EOS per add_bos/add_eos when add_special; special-token text
        becomes its id only when parse_special (user-defined tokens always do)."""
        text = _valid_text(text)
        ids: list[int] = []
        if text:
            with self._lock:
                self._tok.encode_special_tokens = not parse_special
                # encode_batch releases the GIL (encode holds it: 3 s for a 2.7 MB text, during
                # which no other thread, e.g. the server's event loop, runs); same result
                enc = (self._tok.encode(text, add_special_tokens=False) if len(text) < 4096
                       else self._tok.encode_batch([text], add_special_tokens=False)[0])
            data = text.encode("utf-8")
            ids = self._merger.encode(data, list(zip(enc.ids, enc.offsets)),
                                      _byte_offsets(text, data), self._remap)
        if add_special:
            if self.add_bos:
                ids.insert(0, self._need("bos"))
                if len(ids) > 1 and ids[1] == ids[0]:
                    log.warning("Added a BOS token to the prompt as specified by the model but "
                                "the prompt also starts with a BOS token. So now the final "
                                "prompt starts with 2 BOS tokens. Are you sure this is what "
                                "you want?")
            if self.add_eos:
                ids.append(self._need("eos"))
        return ids

    def _need(self, name: str) -> int:
        i = self.special[name]
        if i < 0:
            raise TokenizerError(f"the vocab adds a {name.upper()} token but has none")
        return i

    # ---- ids -> text --------------------------------------------------------------------
    def token_to_piece(self, id: int, special: bool = True, lstrip: bool = False) -> bytes:
        """llama_token_to_piece: the bytes of one token (may be part of a UTF-8 sequence).
        Control/unknown tokens give b"" unless `special`; lstrip drops one leading space."""
        if not 0 <= id < len(self._table):
            raise TokenizerError(f"token id {id} out of range [0, {len(self._table)})")
        if not special and self.attr[id] & _SPECIAL_ATTR:
            return b""
        piece = self._pieces.get(id)
        if piece is None:
            piece = self._pieces[id] = self._piece(id)
        if lstrip and piece[:1] == b" ":
            piece = piece[1:]
        return piece

    def _piece(self, id: int) -> bytes:
        a = int(self.attr[id])
        if a & (_SPECIAL_ATTR | USER_DEFINED):
            return self._table.raw(id)
        if self.kind == "spm":
            if a & NORMAL:
                return self._table.text(id).replace(build.SPACE, " ").encode()
            if a & BYTE:
                return bytes([int(self._table.text(id)[3:5], 16)])
            return b""
        if a & NORMAL:
            return _bytelevel_decode(self._table.text(id))
        return b""

    def detokenize_bytes(self, ids, remove_special: bool = False,
                         unparse_special: bool = False) -> bytes:
        ids = list(ids)
        remove_space = self.add_space_prefix
        if remove_special and self.add_bos and ids and ids[0] == self.bos:
            remove_space = False
            ids = ids[1:]
        if remove_special and self.add_eos and ids and ids[-1] == self.eos:
            ids = ids[:-1]
        parts = []
        for id in ids:
            parts.append(self.token_to_piece(id, unparse_special, remove_space))
            remove_space = False
        out = b"".join(parts)
        return _clean_spaces(out) if self.clean_spaces else out

    def detokenize(self, ids, remove_special: bool = False, unparse_special: bool = False) -> str:
        """llama_detokenize as text (invalid UTF-8 shown as U+FFFD)."""
        return self.detokenize_bytes(ids, remove_special, unparse_special).decode(
            "utf-8", "replace")


def _byte_offsets(text: str, data: bytes) -> np.ndarray | None:
    """The UTF-8 offset of each character of `text` (and of its end); None when ASCII."""
    if len(data) == len(text):
        return None
    cp = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    out = np.zeros(cp.shape[0] + 1, dtype=np.int64)
    np.cumsum(1 + (cp >= 0x80) + (cp >= 0x800) + (cp >= 0x10000), out=out[1:])
    return out


def _bytelevel_decode(text: str) -> bytes:
    """llama_decode_text: byte-level characters back to bytes; unknown ones kept visible."""
    out = bytearray()
    for c in text:
        b = _BYTE_DECODER.get(c)
        if b is not None:
            out.append(b)
        else:
            hexs = c.encode().hex()
            out += f"[UNK_BYTE_0x{hexs}{text}]".encode()
    return bytes(out)


def _attributes(md: dict, model: str, tokens, ids):
    """(token attributes, special ids, flags) in llama.cpp's order: model defaults, GGUF keys,
    then the tokens found by their text."""
    attr = attrs.from_types(md.get("tokenizer.ggml.token_type"), len(tokens))
    special, flags = _defaults(model, md.get("tokenizer.ggml.pre"))
    _read_flags(md, flags)
    attrs.read_special_ids(md, special, len(tokens))
    attrs.detect_by_text(ids, special, attr)
    attrs.mark_unused(tokens, attr)
    flags["eog"] = attrs.eog_set(tokens, ids, special, attr)
    return attr, special, flags


def _defaults(model: str, pre_name: str | None) -> tuple[dict[str, int], dict]:
    special = dict.fromkeys(attrs.SPECIAL_KEYS, -1)
    if model == "llama":
        special.update(bos=1, eos=2, unk=0)
        flags = dict(add_space_prefix=True, add_bos=True, add_eos=False, clean_spaces=False,
                     pre=None)
    else:
        pre = pre_tokenizer(pre_name)
        special.update(bos=-1 if pre.no_bos else 11, eos=11)
        flags = dict(add_space_prefix=False, add_bos=pre.add_bos, add_eos=False,
                     clean_spaces=pre.clean_spaces, pre=pre)
    return special, flags


def _read_flags(md: dict, flags: dict) -> None:
    for key, name in (("add_space_prefix", "add_space_prefix"), ("add_bos_token", "add_bos"),
                      ("add_eos_token", "add_eos")):
        v = md.get(f"tokenizer.ggml.{key}")
        if isinstance(v, bool):
            flags[name] = v


def _merger(model: str, md: dict, table, flags: dict):
    if model == "llama":
        return build.spm_merger(table, md.get("tokenizer.ggml.scores"),
                                flags["add_space_prefix"])
    if "tokenizer.ggml.merges" not in md:
        raise TokenizerError("BPE vocab without tokenizer.ggml.merges")
    return build.bpe_merger(table, md["tokenizer.ggml.merges"], flags["pre"])
