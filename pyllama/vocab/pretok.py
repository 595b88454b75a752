"""BPE pre-tokenizers selected by `tokenizer.ggml.pre`, as llama.cpp's llm_tokenizer_bpe.

Each pre-tokenizer is a list of regexes applied in turn, every match and every gap between
matches kept as its own piece (`tokenizers` Split(..., "isolated")). The patterns are the ones
llama.cpp uses (its adaptations of the tokenizer.json originals), in Oniguruma syntax.
"""
from __future__ import annotations

from dataclasses import dataclass

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_PORO = r" ?[^(\s|.,!?…。，、।۔،)]+"
_UPPER, _LOWER = r"((?=[\p{L}])([^a-z]))", r"((?=[\p{L}])([^A-Z]))"
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + r"+|[^\r\n\p{L}\p{N}]?" + _UPPER
           + "+" + _LOWER + r"*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + "+" + _CONTRACTIONS
          + r"?|[^\r\n\p{L}\p{N}]?" + _UPPER + "+" + _LOWER + "*" + _CONTRACTIONS
          + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_DEEPSEEK3 = (r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?"
              r"[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

REGEXES: dict[str, list[str]] = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "llama3": [_LLAMA3],
    "qwen2": [_QWEN2],
    "gpt2": [_GPT2],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"],
    "starcoder": [r"\p{N}", _GPT2],
    "deepseek-coder": [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", r"[一-龥ࠀ-一가-퟿]+", r"\p{N}"],
    "poro": [_PORO],
    "viking": [_PORO, r"\p{N}"],
    "tekken": [_TEKKEN],
    "gpt-4o": [_GPT4O],
    "deepseek-v3": [r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+", _DEEPSEEK3],
}


@dataclass(frozen=True)
class PreTok:
    regexes: str                # key of REGEXES
    clean_spaces: bool = True   # llama.cpp's detokenizer clean-up of " ," " 's" ...
    ignore_merges: bool = False  # a word that is a whole vocab entry is not merged
    add_bos: bool = False       # the default before tokenizer.ggml.add_bos_token


_LLAMA3_PT = PreTok("llama3", ignore_merges=True, add_bos=True)
_QWEN2_PT = PreTok("qwen2", clean_spaces=False)
_GPT2_PT = PreTok("gpt2")
_STARCODER_NC = PreTok("starcoder", clean_spaces=False)

# tokenizer.ggml.pre -> pre-tokenizer (names as llama.cpp's llama_vocab::impl::load)
PRE: dict[str, PreTok] = {
    "default": PreTok("default"),
    **dict.fromkeys(["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                     "midm-2.0", "lfm2", "dbrx", "smaug-bpe"], _LLAMA3_PT),
    "glm4": PreTok("llama3"), "chatglm-bpe": PreTok("llama3"),
    **dict.fromkeys(["qwen2", "deepseek-r1-qwen", "kormo", "hunyuan"], _QWEN2_PT),
    "stablelm2": PreTok("qwen2"), "megrez": PreTok("qwen2"),
    **dict.fromkeys(["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                     "jina-v2-de", "a.x-4.0", "mellum", "mpt", "olmo", "jais", "exaone4",
                     "jina-v1-en", "jina-v2-code", "roberta-bpe"], _GPT2_PT),
    "trillion": PreTok("gpt2", clean_spaces=False),
    "granite-docling": PreTok("gpt2", clean_spaces=False),
    "falcon": PreTok("falcon"),
    **dict.fromkeys(["starcoder", "refact", "codeshell", "exaone", "minerva-7b"],
                    PreTok("starcoder")),
    "command-r": _STARCODER_NC, "smollm": _STARCODER_NC,
    "deepseek-coder": PreTok("deepseek-coder", clean_spaces=False),
    "poro-chat": PreTok("poro", clean_spaces=False),
    "bloom": PreTok("poro"), "gpt3-finnish": PreTok("poro"),
    "viking": PreTok("viking", clean_spaces=False),
    "tekken": PreTok("tekken", clean_spaces=False, ignore_merges=True, add_bos=True),
    "gpt-4o": PreTok("gpt-4o", clean_spaces=False), "llama4": PreTok("gpt-4o", clean_spaces=False),
    "deepseek-v3": PreTok("deepseek-v3", clean_spaces=False),
    "hunyuan-dense": PreTok("deepseek-v3", clean_spaces=False),
}


def pre_tokenizer(name: str | None) -> PreTok:
    """llama.cpp falls back to 'default' (with a warning) for a missing or unknown name."""
    return PRE.get(name or "default", PRE["default"])
