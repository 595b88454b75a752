"""Token attributes and special-token discovery, as llama.cpp's llama_vocab::impl::load.

Attributes are llama.cpp's bit flags (llama_token_attr). Besides the ids stored in the GGUF,
llama.cpp finds EOT/EOM/FIM tokens and the end-of-generation set by their text, and marks each
such token CONTROL (so e.g. Gemma's "</s>" and Qwen's "</s>" are only split out of text when
special tokens are parsed).
"""
from __future__ import annotations

import numpy as np

UNDEFINED, UNKNOWN, UNUSED, NORMAL = 0, 1 << 0, 1 << 1, 1 << 2
CONTROL, USER_DEFINED, BYTE = 1 << 3, 1 << 4, 1 << 5

# tokenizer.ggml.token_type -> attribute (LLAMA_TOKEN_TYPE_* 0..6)
_TYPE_ATTR = np.array([UNDEFINED, NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE],
                      dtype=np.int32)

EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
             "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>", "<fim-sep>", "<fim_sep>", "<SEP>"),
}
EOG_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
             "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
             "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
             "<turn|>", "<|tool_response>")
# gpt-oss: always rendered (llama.cpp makes them USER_DEFINED)
ALWAYS_SHOWN = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")

# GGUF keys of the special ids (llama.cpp's special_token_types)
SPECIAL_KEYS = {
    "bos": "bos_token_id", "eos": "eos_token_id", "eot": "eot_token_id",
    "eom": "eom_token_id", "unk": "unknown_token_id", "sep": "seperator_token_id",
    "pad": "padding_token_id", "mask": "mask_token_id", "cls": "cls_token_id",
    "fim_pre": "fim_pre_token_id", "fim_suf": "fim_suf_token_id",
    "fim_mid": "fim_mid_token_id", "fim_pad": "fim_pad_token_id",
    "fim_rep": "fim_rep_token_id", "fim_sep": "fim_sep_token_id",
}
_DEPRECATED_KEYS = {"fim_pre": "prefix_token_id", "fim_suf": "suffix_token_id",
                    "fim_mid": "middle_token_id"}


def from_types(token_type, n: int) -> np.ndarray:
    if token_type is None:
        return np.full(n, NORMAL, dtype=np.int32)
    tt = np.asarray(token_type, dtype=np.int64)[:n]
    return _TYPE_ATTR[np.clip(tt, 0, 6)] * (tt <= 6)


def read_special_ids(md: dict, special: dict[str, int], n: int) -> None:
    """Override the model type's defaults with the ids stored in the GGUF (valid ones only)."""
    for name, key in SPECIAL_KEYS.items():
        for k in (key, _DEPRECATED_KEYS.get(name)):
            v = md.get(f"tokenizer.ggml.{k}") if k else None
            if isinstance(v, int) and 0 <= v < n:
                special[name] = v


def _find(ids: dict[str, int], texts) -> int:
    for t in texts:
        if t in ids:
            return ids[t]
    return -1


def detect_by_text(ids: dict[str, int], special: dict[str, int], attr: np.ndarray) -> None:
    """EOT, EOM and FIM tokens not given in the GGUF, found by their text; made CONTROL."""
    for name, texts in (("eot", EOT_TEXTS), ("eom", EOM_TEXTS), *FIM_TEXTS.items()):
        if special.get(name, -1) < 0:
            i = _find(ids, texts)
            if i >= 0:
                special[name] = i
                attr[i] |= CONTROL


def mark_unused(tokens: list[str], attr: np.ndarray) -> None:
    for i in np.nonzero(attr & CONTROL)[0].tolist():
        if "unused" in tokens[i]:
            attr[i] |= UNUSED


def eog_set(tokens: list[str], ids: dict[str, int], special: dict[str, int],
            attr: np.ndarray) -> frozenset[int]:
    eog = {special[k] for k in ("fim_pad", "fim_rep", "fim_sep") if special.get(k, -1) >= 0}
    for t in EOG_TEXTS:
        i = ids.get(t)
        if i is not None:
            eog.add(i)
            attr[i] |= CONTROL
    for t in ALWAYS_SHOWN:
        if t in ids:
            attr[ids[t]] = USER_DEFINED
    eog.update(special[k] for k in ("eos", "eot", "eom") if special.get(k, -1) >= 0)
    _eog_workarounds(tokens, eog, attr)
    return frozenset(eog)


def _eog_workarounds(tokens: list[str], eog: set[int], attr: np.ndarray) -> None:
    """llama.cpp's exceptions: <|end|> is not EOG next to <|return|>+<|call|> (gpt-oss) or
    <|calls|>+<|flush|> (solar-open); </s> is not EOG next to <|tool_response> (gemma4)."""
    texts = {tokens[i]: i for i in eog}
    has = texts.__contains__
    if has("<|end|>") and ((has("<|return|>") and has("<|call|>")) or
                           (has("<|calls|>") and has("<|flush|>"))):
        eog.discard(texts["<|end|>"])
        attr[texts["<|end|>"]] = USER_DEFINED
    if has("<|tool_response>") and has("</s>"):
        eog.discard(texts["</s>"])
        attr[texts["</s>"]] = NORMAL
