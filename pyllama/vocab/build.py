"""Build a `tokenizers.Tokenizer` from GGUF vocab metadata (ARCHITECTURE decision 2).

- SPM (`tokenizer.ggml.model` = llama): a BPE model with byte fallback whose merges are, for
  each vocab entry, the split llama.cpp's SPM loop ends with on the entry's own text, ranked by
  the entry's score (then id) -- the order SPM merges in. Spaces become U+2581 first (plus a
  leading one per text piece when add_space_prefix). Deriving the merges takes seconds, so
  they are cached: $LLAMA_CACHE/tokenizers/<hash of the vocab arrays>.json.
- BPE (gpt2): byte-level BPE from the GGUF merges, split first by the pre-tokenizer regexes.
Control/unknown tokens are added as special tokens (split out only when parsing special
text), user-defined ones as normal added tokens (always split out), both matched on the raw
text, as llama.cpp's tokenizer_st_partition does. BOS/EOS are added by the caller.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers

from ..errors import TokenizerError
from ..log import get_logger
from . import strings
from .pretok import REGEXES, PreTok
from .spm import last_split

log = get_logger("vocab")

CACHE_VERSION = 3
SPACE = "\u2581"


def cache_dir() -> Path:
    root = os.environ.get("LLAMA_CACHE") or os.path.join(os.path.expanduser("~"), ".cache",
                                                         "pyllama")
    return Path(root) / "tokenizers"


def metadata_hash(md: dict) -> str:
    """Digest of everything the built tokenizer depends on (no tensor data is read)."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"v{CACHE_VERSION}|{md.get('tokenizer.ggml.model')}|"
             f"{md.get('tokenizer.ggml.pre')}|".encode())
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges"):
        if key in md:
            strings.digest(h, md[key])
    for key in ("tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        if key in md:
            h.update(np.ascontiguousarray(md[key]).tobytes())
    return h.hexdigest()


def spm_merge_ids(tokens: list[str], scores: np.ndarray, ids: dict[str, int]) -> np.ndarray:
    """[n_merges, 2] int32 token ids (left, right), best first (see module doc): for every
    entry SPM can form, the split SPM itself ends with on the entry's own text (spm.py explains
    why that one merge per entry is enough)."""
    score = {t: float(scores[i]) for t, i in ids.items()}
    found = []
    for t, i in ids.items():
        k = last_split(t, score) if len(t) > 1 else None
        if k is not None:
            a, b = ids.get(t[:k]), ids.get(t[k:])
            if a is not None and b is not None:   # else a part is a character outside the vocab
                found.append((-score[t], i, a, b))
    found.sort()
    return np.array([f[2:] for f in found], dtype=np.int32).reshape(-1, 2)


def _load_cached(path: Path) -> np.ndarray | None:
    try:
        doc = json.loads(path.read_text())
        if doc.get("version") != CACHE_VERSION:
            return None
        return np.frombuffer(base64.b64decode(doc["merges"]), dtype=np.int32).reshape(-1, 2)
    except (OSError, ValueError, KeyError):
        return None


def _save_cached(path: Path, merges: np.ndarray) -> None:
    doc = {"version": CACHE_VERSION, "kind": "spm-merges",
           "merges": base64.b64encode(merges.astype(np.int32).tobytes()).decode()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        log.warning("tokenizer cache not written (%s): %s", path, e)


def cached_spm_merges(md: dict, tokens: list[str], ids: dict[str, int]) -> np.ndarray:
    scores = md.get("tokenizer.ggml.scores")
    if scores is None:
        scores = np.zeros(len(tokens), dtype=np.float32)
    path = cache_dir() / f"{metadata_hash(md)}.json"
    merges = _load_cached(path)
    if merges is None:
        merges = spm_merge_ids(tokens, np.asarray(scores), ids)
        _save_cached(path, merges)
    return merges


def build_spm(tokens: list[str], ids: dict[str, int], merges: np.ndarray,
              add_space_prefix: bool) -> Tokenizer:
    arr = np.array(tokens, dtype=object)
    pairs = list(zip(arr[merges[:, 0]], arr[merges[:, 1]]))
    try:
        bpe = models.BPE(ids, pairs, byte_fallback=True, fuse_unk=False)
    except Exception as e:  # tokenizers raises a bare Exception
        raise TokenizerError(f"cannot build the SPM tokenizer: {e}") from None
    tok = Tokenizer(bpe)
    norm = [normalizers.Replace(" ", SPACE)]
    if add_space_prefix:
        norm.insert(0, normalizers.Prepend(" "))
    tok.normalizer = normalizers.Sequence(norm)
    return tok


def build_bpe(tokens: list[str], ids: dict[str, int], merges, pre: PreTok) -> Tokenizer:
    pairs = strings.pairs(merges)
    if pairs is None:
        pairs = [_split_merge(m) for m in strings.strings(merges)]
    try:
        bpe = models.BPE(ids, pairs, fuse_unk=False, ignore_merges=pre.ignore_merges)
    except Exception as e:
        raise TokenizerError(f"cannot build the BPE tokenizer: {e}") from None
    tok = Tokenizer(bpe)
    splits = [pre_tokenizers.Split(Regex(r), "isolated") for r in REGEXES[pre.regexes]]
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        splits + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    return tok


def _split_merge(m: str) -> tuple[str, str]:
    a, sep, b = m.partition(" ")
    if not sep:
        raise TokenizerError(f"bad merge entry {m!r} in tokenizer.ggml.merges")
    return a, b


def add_partition_tokens(tok: Tokenizer, tokens: list[str], ids: np.ndarray,
                         special: np.ndarray) -> None:
    """Tokens split out of the raw text before the model runs (see module doc)."""
    added = [AddedToken(tokens[i], special=bool(s), normalized=False)
             for i, s in zip(ids.tolist(), special.tolist()) if tokens[i]]
    tok.add_tokens(added)
