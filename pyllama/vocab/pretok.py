"""BPE pre-tokenizers selected by `tokenizer.ggml.pre`, as llama.cpp's llm_tokenizer_bpe.

Each pre-tokenizer is a list of regexes applied in turn, every match and every gap between
matches kept as its own piece (`tokenizers` Split(..., "isolated")). The patterns are the ones
llama.cpp 0c1e570 uses (its adaptations of the tokenizer.json originals, src/llama-vocab.cpp),
in Oniguruma syntax; where llama.cpp runs a hand-written splitter instead of its regex
(src/unicode.cpp: Kimi-K2, AFMoE / Tiny Aya digits) the pattern here is the regex that splitter
implements. The name -> type table and the per-type options (clean_spaces, ignore_merges,
add_bos, no BOS) are llama_vocab::impl::load's. A name llama.cpp does not know is refused, as
llama.cpp refuses it ("unknown pre-tokenizer type"); a missing name is 'default'.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import TokenizerError

_C = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"   # contractions
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
           r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2 = (_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
          r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_PORO = r" ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{964}\x{6D4}\x{60C})]+"
_UPPER, _LOWER = r"((?=[\p{L}])([^a-z]))", r"((?=[\p{L}])([^A-Z]))"
_TEKKEN = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + r"+|[^\r\n\p{L}\p{N}]?" + _UPPER
           + "+" + _LOWER + r"*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT4O = (r"[^\r\n\p{L}\p{N}]?" + _UPPER + "*" + _LOWER + "+" + _C
          + r"?|[^\r\n\p{L}\p{N}]?" + _UPPER + "+" + _LOWER + "*" + _C
          + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_UPPER_M, _LOWER_M = r"((?=[\p{L}\p{M}])([^a-z]))", r"((?=[\p{L}\p{M}])([^A-Z]))"
_GRANITE_EMB = (r"[^\r\n\p{L}\p{N}]?" + _UPPER_M + "*" + _LOWER_M + "+" + _C
                + r"?|[^\r\n\p{L}\p{N}]?" + _UPPER_M + "+" + _LOWER_M + "*" + _C
                + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CASED = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+" + _C
          + r"?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
          + _C + "?")
_DS3_WORDS = (r'''[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+'''
              r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+")
_DEEPSEEK3 = _DS3_WORDS + r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_DEEPSEEK_LLM_LETTERS = (
    r"\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+")
# unicode_cpt_is_han's ranges (src/unicode.cpp), used by llama.cpp's Kimi-K2 splitter
_HAN = (r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
        r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{2CEB0}-\x{2EBEF}\x{F900}-\x{FAFF}"
        r"\x{2F800}-\x{2FA1F}")
# unicode_regex_split_custom_kimi_k2: Han runs; letters (no case split, marks not letters) with
# a leading non-letter and a contraction; 1-3 digits; punctuation; whitespace as llama3
_KIMI_K2 = (r"[" + _HAN + r"]+|[^\r\n\p{L}\p{N}]?[\p{L}&&[^" + _HAN + r"]]+"
            r"(?:'[sS]|'[tT]|'[mM]|'[dD]|'[rR][eE]|'[vV][eE]|'[lL][lL])?"
            r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# unicode_regex_split_custom_afmoe: a digit run split into its leading len % 3 digits and then
# groups of three (also what llama.cpp runs for Tiny Aya's \d{1,3}(?=(?:\d{3})*\b))
_DIGITS3 = r"\p{N}{1,3}(?=(?:\p{N}{3})*(?!\p{N}))"
_NEWLINES = r"[^\n]+|[\n]+"
_CJK_KO = r"[\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+"
_CJK_KANA = r"[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+"

# pre-tokenizer type (LLAMA_VOCAB_PRE_TYPE_*, lower case) -> regexes, as llm_tokenizer_bpe
REGEXES: dict[str, list[str]] = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "llama3": [_LLAMA3],
    "jais2": [_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+" + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32,
                                                                      16, 8, 4))
              + r"|\s{1,2}(?!\S)|\s{1}"],
    "deepseek-llm": [r"[\r\n]", _DEEPSEEK_LLM_LETTERS, r"\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+",
                     r"\s+$", _CJK_KO, r"\p{N}+"],
    "deepseek3": [r"\p{N}{1,3}", _CJK_KANA, _DEEPSEEK3],
    "spark2_5": [r"\p{N}{1,3}", _CJK_KANA,
                 _DS3_WORDS + r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+", r"\p{N}"],
    "youtu": [r"[\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+",
              _CASED + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "deepseek-coder": [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_KO, r"\p{N}"],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"],
    "starcoder": [r"\p{N}", _GPT2],
    "gpt2": [_GPT2],
    "qwen2": [_QWEN2],
    "qwen35": [_C + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "poro": [_PORO],
    "viking": [_PORO, r"\p{N}"],
    "tekken": [_TEKKEN],
    "chameleon": [r"<sentinel:[0-9]+>", r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
                  r"([\t\n]|    |  )", r"\p{N}", r"[\p{P}!-/:-@\[-`{-~]", _GPT2],
    "gpt-4o": [_GPT4O],
    "granite-emb-multi": [_GRANITE_EMB],
    "tiny-aya": [_DIGITS3, _CASED + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+"
                 r"|\s+(?!\S)|\s+"],
    "kimi-k2": [_KIMI_K2],
    "superbpe": [r"\p{N}+", r"(?=(\d{3})+(?!\d))"],
    "bailingmoe": [r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"],
    "seed-coder": [_C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
                   r"|\s+(?!\S)|\s+"],
    "ufakzeka": [r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
                 r"|\s+(?!\S)|\s+"],
    "afmoe": [_DIGITS3,
              r"[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{8C48}-\x{FAFF}\x{3040}-\x{309F}\x{30A0}-\x{30FF}\x{FF65}-\x{FF9F}\x{2F00}-\x{2FDF}\x{E40}-\x{E7F}\x{E80}-\x{EFF}\x{1780}-\x{17FF}\x{1000}-\x{109F}\x{AA60}-\x{AA7F}\x{A9E0}-\x{A9FF}\x{AC00}-\x{D7AF}\x{1100}-\x{11FF}]+",
              _DEEPSEEK3],
    "laguna": [_NEWLINES, _QWEN2],
    "exaone-moe": [_C + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+"],
    "minicpm5": [r"\p{N}{1,3}", _C + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+"],
}


def engine_regex(regex: str) -> str:
    """A REGEXES entry as `tokenizers` runs it with llama.cpp's meaning: llama.cpp's regex
    engine (unicode_regex_split, k_ucat_enum) reads \\p{Lu} \\p{Ll} \\p{Lt} \\p{Lm} \\p{Lo}
    all as \\p{L}, so e.g. Tiny Aya's cased-word pattern does not split "XMLHttp"."""
    return re.sub(r"\\p\{L[ultmo]\}", r"\\p{L}", regex)


@dataclass(frozen=True)
class PreTok:
    regexes: str                # key of REGEXES (llama.cpp's pre-tokenizer type)
    clean_spaces: bool = True   # llama.cpp's detokenizer clean-up of " ," " 's" ...
    ignore_merges: bool = False  # a word that is a whole vocab entry is not merged
    add_bos: bool = False       # the default before tokenizer.ggml.add_bos_token
    no_bos: bool = False        # the type's default BOS id is none (ChatGLM)


def _pt(kind, **kw):
    return PreTok(kind, **kw)


_NC = dict(clean_spaces=False)

# tokenizer.ggml.pre -> pre-tokenizer, exactly llama_vocab::impl::load's chain
PRE: dict[str, PreTok] = {
    "default": _pt("default"),
    "minicpm5": _pt("minicpm5", ignore_merges=True),
    **dict.fromkeys(["llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral",
                     "midm-2.0", "lfm2", "jina-v5-nano"],
                    _pt("llama3", ignore_merges=True, add_bos=True)),
    "deepseek-llm": _pt("deepseek-llm", **_NC),
    "deepseek-coder": _pt("deepseek-coder", **_NC),
    "deepseek-v3": _pt("deepseek3", **_NC),
    "spark2_5": _pt("spark2_5", **_NC),
    "youtu": _pt("youtu", clean_spaces=False, ignore_merges=True),
    "falcon": _pt("falcon"),
    "mpt": _pt("gpt2"),
    "starcoder": _pt("starcoder"),
    **dict.fromkeys(["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es",
                     "jina-v2-de", "a.x-4.0", "mellum", "modern-bert"], _pt("gpt2")),
    "jais-2": _pt("jais2"),
    # jina-v1-en, jina-v2-code, roberta-bpe also set add_sep (read by llama.cpp's common
    # reranking code, not by the tokenizer)
    **dict.fromkeys(["jina-v1-en", "jina-v2-code", "roberta-bpe"], _pt("gpt2")),
    "refact": _pt("starcoder"),
    "command-r": _pt("starcoder", **_NC),
    **dict.fromkeys(["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"], _pt("qwen2", **_NC)),
    "qwen35": _pt("qwen35", **_NC),
    "stablelm2": _pt("qwen2"),
    "olmo": _pt("gpt2"),
    "dbrx": _pt("llama3"),
    "smaug-bpe": _pt("llama3"),
    "poro-chat": _pt("poro", **_NC),
    "chatglm-bpe": _pt("llama3", no_bos=True),
    **dict.fromkeys(["glm4", "glm5"], _pt("llama3", no_bos=True, ignore_merges=True)),
    "viking": _pt("viking", **_NC),
    "jais": _pt("gpt2"),
    "tekken": _pt("tekken", clean_spaces=False, ignore_merges=True, add_bos=True),
    "smollm": _pt("starcoder", **_NC),
    "codeshell": _pt("starcoder"),
    "bloom": _pt("poro"),
    "gpt3-finnish": _pt("poro"),
    "exaone": _pt("starcoder"),
    "exaone4": _pt("gpt2"),
    "exaone-moe": _pt("exaone-moe"),
    "chameleon": _pt("chameleon", clean_spaces=False, add_bos=True),
    "minerva-7b": _pt("starcoder"),
    "megrez": _pt("qwen2"),
    **dict.fromkeys(["gpt-4o", "llama4", "kanana2", "talkie"], _pt("gpt-4o", **_NC)),
    "granite-embed-multi-97m": _pt("granite-emb-multi", clean_spaces=False,
                                   ignore_merges=True),
    **dict.fromkeys(["tiny_aya", "cohere2moe"], _pt("tiny-aya", **_NC)),
    "superbpe": _pt("superbpe", **_NC),
    "trillion": _pt("gpt2", **_NC),
    "granite-docling": _pt("gpt2", **_NC),
    **dict.fromkeys(["bailingmoe", "bailingmoe2", "llada-moe"], _pt("bailingmoe", **_NC)),
    "seed-coder": _pt("seed-coder", **_NC),
    "hunyuan": _pt("qwen2", **_NC),
    "hunyuan-dense": _pt("deepseek3", **_NC),
    "hy_v4": _pt("deepseek3", **_NC),
    "joyai-llm": _pt("deepseek3", **_NC),
    "kimi-k2": _pt("kimi-k2", **_NC),
    "ufakzeka": _pt("ufakzeka", **_NC),
    "grok-2": _pt("qwen2", **_NC),
    "afmoe": _pt("afmoe", **_NC),
    "laguna": _pt("laguna", **_NC),
    "minimax-m2": _pt("gpt-4o", **_NC),
    "solar-open": _pt("qwen2", **_NC),
    "mellum2": _pt("starcoder"),
}

# names llama.cpp knows whose BPE runs on raw UTF-8 with escaped spaces instead of GPT-2 bytes
# (byte_encode = false); pyllama's BPE merge step is byte-level only
RAW_UTF8 = ("gemma4", "granite-embed-multi-311m", "sarvam-moe", "whitespace")


def pre_tokenizer(name: str | None) -> PreTok:
    """The pre-tokenizer of `tokenizer.ggml.pre`: llama.cpp uses 'default' (with a warning) for
    a missing or empty name and refuses a name it does not know."""
    if not name:
        return PRE["default"]
    pt = PRE.get(name)
    if pt is not None:
        return pt
    if name in RAW_UTF8:
        raise TokenizerError(f"pre-tokenizer type {name!r} (raw-UTF-8 BPE with escaped "
                             "spaces) is not supported by pyllama")
    raise TokenizerError(f"unknown pre-tokenizer type: {name!r}")
