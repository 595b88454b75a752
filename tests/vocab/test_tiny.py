"""Small vocabularies written with the `gguf` package: the SPM tokenizer against llama.cpp's SPM
loop (vocabsupport.merge_symbols, an independent Python port), flags from the GGUF, the token
table (empty and duplicate entries, BPE merges), errors."""
import os

import gguf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pyllama.errors import TokenizerError
from pyllama.gguf import GGUFReader
from pyllama.vocab import Vocab
from vocabsupport import bpe_merge, merge_symbols

SP = "\u2581"
PIECES = ["a", "b", "c", "é", SP, "ab", "bc", "ca", "abc", SP + "a", SP + "ab", "aa", "aaa",
          "aaaa", SP + SP, "bca", "cab", "é" + SP, "ba", "cc", "ccc"]
CONTROL = ["<unk>", "<s>", "</s>", "<|im_end|>"]
USER = ["<tag>", "  "]
BYTES = [f"<0x{i:02X}>" for i in range(256)]


def spm_tokens():
    tokens = CONTROL + BYTES + PIECES + USER
    types = [3] * len(CONTROL) + [6] * 256 + [1] * len(PIECES) + [4] * len(USER)
    types[0] = 2
    scores = [0.0] * (len(CONTROL) + 256) + [-float(i) for i in range(len(PIECES))] + \
        [0.0] * len(USER)
    scores[len(CONTROL) + 256 + PIECES.index("bc")] = -5.0       # tie with "ab": leftmost wins
    return tokens, types, scores


def write_spm(path, **kv):
    tokens, types, scores = spm_tokens()
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores(scores)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for k, v in kv.items():
        w.add_bool(f"tokenizer.ggml.{k}", v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def oracle(text: str, space_prefix: bool) -> list[int]:
    """llama.cpp's SPM path: split out user-defined tokens, escape spaces, merge, byte fallback."""
    tokens, _, scores = spm_tokens()
    ids = {t: i for i, t in enumerate(tokens)}
    score = {t: s for t, s in zip(tokens, scores)}
    out, frag = [], ""
    i = 0
    while i <= len(text):
        hit = next((u for u in sorted(USER, key=len, reverse=True) if text.startswith(u, i)), None)
        if hit is None and i < len(text):
            frag += text[i]
            i += 1
            continue
        if frag:
            syms, _ = merge_symbols(((" " if space_prefix else "") + frag).replace(" ", SP), score)
            for s in syms:
                out += [ids[s]] if s in ids else [ids[f"<0x{b:02X}>"] for b in s.encode()]
        frag = ""
        if hit is None:
            break
        out.append(ids[hit])
        i += len(hit)
    return out


@pytest.fixture(scope="module")
def spm_vocab(tmp_path_factory):
    os.environ["LLAMA_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    path = write_spm(str(tmp_path_factory.mktemp("spm") / "spm.gguf"))
    return Vocab.from_gguf(GGUFReader(path))


@pytest.fixture(scope="module")
def spm_vocab_noprefix(tmp_path_factory):
    path = write_spm(str(tmp_path_factory.mktemp("spm") / "spm-np.gguf"), add_space_prefix=False,
                     add_eos_token=True)
    return Vocab.from_gguf(GGUFReader(path))


ALPHABET = st.lists(st.sampled_from(["a", "b", "c", "é", " ", "<tag>", "  ", "ü", "\n", "x"]),
                    max_size=24).map("".join)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=ALPHABET)
def test_spm_matches_llama_cpp_loop(spm_vocab, spm_vocab_noprefix, s):
    assert spm_vocab.tokenize(s, add_special=False) == oracle(s, True)
    assert spm_vocab_noprefix.tokenize(s, add_special=False) == oracle(s, False)


def test_spm_flags_and_specials(spm_vocab, spm_vocab_noprefix):
    v, w = spm_vocab, spm_vocab_noprefix
    assert (v.bos, v.eos, v.add_bos, v.add_eos, v.add_space_prefix) == (1, 2, True, False, True)
    assert v.tokenize("") == [1] and w.tokenize("") == [1, 2]
    assert v.tokenize("<s>a", parse_special=False) == [1] + oracle("<s>a", True)
    assert v.tokenize("<s>a", parse_special=True) == [1, 1] + oracle("a", True)
    assert v.eog_ids == frozenset({2, 3})           # eos and <|im_end|> (by its text)
    assert v.eot == 3


def test_spm_detokenize_removes_prefix_space(spm_vocab):
    v = spm_vocab
    ids = v.tokenize("ab ca")
    assert v.detokenize(ids) == " ab ca"                         # BOS kept: no strip
    assert v.detokenize(ids, remove_special=True) == " ab ca"    # BOS removed: no strip either
    assert v.detokenize(ids[1:]) == "ab ca"                      # first piece loses its space
    assert v.detokenize(ids, unparse_special=True) == "<s> ab ca"


def test_build_writes_no_cache(tmp_path, monkeypatch):
    """The tables come straight from the GGUF arrays: nothing is cached between runs."""
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "cache"))
    v = Vocab.from_gguf(GGUFReader(write_spm(str(tmp_path / "copy.gguf"))))
    assert v.tokenize("abc aaa", add_special=False) == oracle("abc aaa", True)
    assert not (tmp_path / "cache").exists()


def test_reader_closed_after_build(tmp_path):
    """The vocab keeps its own copy of the token bytes, not the file mapping."""
    reader = GGUFReader(write_spm(str(tmp_path / "closed.gguf")))
    v = Vocab.from_gguf(reader)
    close = getattr(reader, "close", None)
    if close is not None:
        close()
    assert v.tokenize("<tag>ab", add_special=False) == oracle("<tag>ab", True)
    assert v.token_to_piece(v.token_id("<tag>")) == b"<tag>"


def test_unsupported_model(tmp_path):
    w = gguf.GGUFWriter(str(tmp_path / "x.gguf"), "llama")
    w.add_tokenizer_model("rwkv")
    w.add_token_list(["a"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(TokenizerError, match="unsupported tokenizer model 'rwkv'"):
        Vocab.from_gguf(GGUFReader(str(tmp_path / "x.gguf")))


def test_bpe_tiny_model(tiny_model_path):
    v = Vocab.from_gguf(GGUFReader(tiny_model_path("llama")))
    assert v.kind == "bpe" and not v.add_bos
    ids = v.tokenize("<|im_start|>the cat<|im_end|>", parse_special=True)
    assert ids[0] == v.token_id("<|im_start|>") and ids[-1] == v.token_id("<|im_end|>")
    assert v.is_eog(ids[-1])
    assert v.detokenize(ids) == "the cat"
    assert v.detokenize(v.tokenize("héllo wörld  x", add_special=False)) == "héllo wörld  x"


def test_clean_spaces():
    from pyllama.vocab.vocab import _clean_spaces
    assert _clean_spaces(b"a , b . c ? d !") == b"a, b. c? d!"
    assert _clean_spaces(b"it ' s") == b"it's"
    assert _clean_spaces(b"he 's I 'm we 're you 've I 'll it 't") == \
        b"he's I'm we're you've I 'll it 't"
    assert _clean_spaces(b"x ' ' y") == b"x'' y"


def dict_vocab(extra: list[str], pre="gpt-2") -> Vocab:
    """A byte-level BPE vocab given as a metadata dict (the reader's shape, plain lists)."""
    from tiny import bytes_to_unicode
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)] + ["Ġt", "he"] + extra
    types = [1] * 258 + [3] * len(extra)
    return Vocab.from_gguf({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
                            "tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types,
                            "tokenizer.ggml.merges": ["Ġ t", "h e"],
                            "tokenizer.ggml.eos_token_id": 258 + len(extra) - 1})


def test_eog_by_text_and_workarounds():
    v = dict_vocab(["<|end|>", "<|return|>", "<|call|>", "<|channel|>", "<|endoftext|>"])
    end, ret, call, chan, eot = range(258, 263)
    assert v.eog_ids == frozenset({ret, call, eot})            # gpt-oss: <|end|> is not EOG
    assert not v.is_control(end) and not v.is_control(chan)     # both made USER_DEFINED
    assert v.tokenize("a<|channel|>b", add_special=False) == [ord("a"), chan, ord("b")]
    w = dict_vocab(["<|end|>", "</s>", "<|tool_response>"])
    assert w.eog_ids == frozenset({258, 260}) and not w.is_control(259)


def test_clean_spaces_applied_for_gpt2_pre():
    v = dict_vocab(["<|endoftext|>"])
    assert v.clean_spaces and v.detokenize(v.tokenize("a , b ' c 's", add_special=False)) == \
        "a, b'c's"
    assert not dict_vocab(["<|endoftext|>"], pre="qwen2").clean_spaces


@pytest.mark.parametrize("pre", sorted(__import__("pyllama.vocab.pretok", fromlist=["PRE"]).PRE))
def test_every_pre_tokenizer_builds(pre):
    v = dict_vocab(["<|endoftext|>"], pre=pre)
    from pyllama.vocab.vocab import _clean_spaces
    text = "Hello World it's ABCdef 12345 (x)\n\n  y 你好 .Net , ok"
    want = _clean_spaces(text.encode()).decode() if v.clean_spaces else text
    assert v.detokenize(v.tokenize(text, add_special=False)) == want


BPE_MERGES = ["Ġ t", "h e", "Ġt he", "a b", "b a", "ab a", "a ba", "Ġ a", "Ġa b", "é é",
              "Ã ©", "c c", "cc c", "c cc"]


def bpe_vocab(pre="gpt-2", merges=BPE_MERGES, extra=()) -> Vocab:
    """Byte-level BPE with overlapping merges (ties between positions, rank order that differs
    from left-to-right order) and extra whole-word tokens."""
    from tiny import bytes_to_unicode
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    for m in merges:
        if m.replace(" ", "") not in tokens:
            tokens.append(m.replace(" ", ""))
    tokens += [t for t in extra if t not in tokens] + ["<|endoftext|>"]
    return Vocab.from_gguf({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre,
                            "tokenizer.ggml.tokens": tokens,
                            "tokenizer.ggml.token_type": [1] * (len(tokens) - 1) + [3],
                            "tokenizer.ggml.merges": list(merges),
                            "tokenizer.ggml.eos_token_id": len(tokens) - 1})


def bpe_oracle(v: Vocab, text: str) -> list[int]:
    from tiny import bytes_to_unicode
    b2u = bytes_to_unicode()
    ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(BPE_MERGES)}
    out = []
    for word, _ in v._tok.pre_tokenizer.pre_tokenize_str(text):
        out += [v.token_id(s) for s in bpe_merge("".join(b2u[b] for b in word.encode()), ranks)]
    return out


@settings(max_examples=300, deadline=None)
@given(s=st.lists(st.sampled_from(["a", "b", "c", "é", " ", "the", " t", "x", "\n", "ab"]),
                  max_size=24).map("".join))
def test_bpe_matches_llama_cpp_loop(s):
    v = bpe_vocab()
    assert v.tokenize(s, add_special=False) == bpe_oracle(v, s)
    assert v.detokenize(v.tokenize(s, add_special=False)) == v.detokenize(bpe_oracle(v, s))


def test_bpe_ignore_merges_takes_whole_words():
    merged = bpe_vocab("gpt-2", extra=["hello"])
    whole = bpe_vocab("llama3", extra=["hello"])                # llama3: ignore_merges
    hello = whole.token_id("hello")
    assert merged.tokenize("hello", add_special=False) == [merged.token_id(c) for c in
                                                           ("he", "l", "l", "o")]
    assert whole.tokenize("hello", add_special=False) == [hello]
    assert whole.tokenize("abab", add_special=False) == [whole.token_id("ab")] * 2


def test_bad_merges_are_errors():
    with pytest.raises(TokenizerError, match="bad merge entry"):
        bpe_vocab(merges=["ab"])
    with pytest.raises(TokenizerError, match="not in the vocab"):
        Vocab.from_gguf({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["q", "z"],
                         "tokenizer.ggml.merges": ["q z"], "tokenizer.ggml.eos_token_id": 1})


def test_empty_and_duplicate_tokens():
    """llama.cpp's loader: an empty entry reads "[EMPTY_<id>]"; text -> id takes the last of
    duplicate entries (token_to_id is overwritten in id order)."""
    v = Vocab.from_gguf({"tokenizer.ggml.model": "llama",
                         "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "", "a", "b", "a"],
                         "tokenizer.ggml.scores": [0.0] * 7,
                         "tokenizer.ggml.token_type": [2, 3, 3, 1, 1, 1, 1]})
    assert v.token_text(3) == "[EMPTY_3]" and v.token_id("[EMPTY_3]") == 3
    assert v.token_id("a") == 6
    assert v.tokenize("ab", add_special=False, parse_special=False) == [6, 5]
