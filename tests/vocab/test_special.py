"""Special ids, EOG sets, attributes and pieces of the real vocabularies (llama.cpp's values)."""
import pytest

pytestmark = pytest.mark.realmodel


def test_gemma_special_ids(gemma_vocab):
    v = gemma_vocab
    assert (v.kind, v.n_vocab, v.bos, v.eos, v.eot, v.pad) == ("spm", 262144, 2, 1, 106, 0)
    assert (v.add_bos, v.add_eos, v.add_space_prefix) == (True, False, False)
    # </s> is made CONTROL and end-of-generation by its text, as llama.cpp does
    assert v.eog_ids == frozenset({1, 106, 212}) and v.is_eog(106) and not v.is_eog(2)
    assert v.is_control(212) and v.is_control(2) and not v.is_control(203)


def test_qwen_special_ids(qwen_vocab):
    v = qwen_vocab
    assert (v.kind, v.n_vocab, v.bos, v.eos, v.eot, v.pad) == ("bpe", 151936, 151643, 151645,
                                                                151645, 151643)
    assert (v.add_bos, v.add_eos) == (False, False)
    # <|endoftext|>, <|im_end|>, </s>, fim_pad, repo_name, file_sep
    assert v.eog_ids == frozenset({151643, 151645, 128247, 151662, 151663, 151664})
    assert v.special["fim_pre"] == 151659 and v.special["fim_sep"] == 151664


def test_pieces(gemma_vocab, qwen_vocab):
    g, q = gemma_vocab, qwen_vocab
    assert g.token_to_piece(2) == b"<bos>" and g.token_to_piece(2, special=False) == b""
    assert g.token_to_piece(138) == b"  "                  # user-defined: shown always
    assert g.token_to_piece(238 + 0xE4) == b"\xe4"          # byte token <0xE4>
    assert g.token_to_piece(g.tokenize(" the", False)[0]) == b" the"
    assert q.token_to_piece(151644, special=False) == b""
    assert q.token_to_piece(q.tokenize(" the", False)[0]) == b" the"
    assert q.token_text(151644) == "<|im_start|>"


def test_partial_utf8_pieces(real_vocab):
    """A character split over byte tokens comes back as bytes; whole text as str."""
    _, v = real_vocab
    text = "\U000F0001"              # private use plane: byte fallback / byte-level bytes
    ids = v.tokenize(text, add_special=False)
    pieces = [v.token_to_piece(i) for i in ids]
    assert b"".join(pieces).decode() == text
    assert len(ids) > 1 and any(not _valid_utf8(p) for p in pieces)


def _valid_utf8(b: bytes) -> bool:
    try:
        b.decode()
        return True
    except UnicodeDecodeError:
        return False


def test_detokenize_special_handling(gemma_vocab, qwen_vocab):
    g = gemma_vocab
    ids = g.tokenize("<start_of_turn>user\nhi<end_of_turn>", parse_special=True)
    assert g.detokenize(ids) == "user\nhi"
    assert g.detokenize(ids, unparse_special=True) == "<bos><start_of_turn>user\nhi<end_of_turn>"
    assert g.detokenize(ids, remove_special=True, unparse_special=True) == \
        "<start_of_turn>user\nhi<end_of_turn>"
    q = qwen_vocab
    ids = q.tokenize("<|im_start|>user\nhi<|im_end|>", parse_special=True)
    assert ids[0] == 151644 and ids[-1] == 151645
    assert q.detokenize(ids, unparse_special=True) == "<|im_start|>user\nhi<|im_end|>"


def test_invalid_input_does_not_crash(real_vocab):
    _, v = real_vocab
    assert v.detokenize(v.tokenize(b"ok \xff\xfe end", add_special=False)) == "ok \ufffd\ufffd end"
    assert v.detokenize(v.tokenize("a\ud800b", add_special=False)) == "a\ufffdb"
    # a truncated sequence: one U+FFFD per byte, as llama.cpp's unicode_cpts_from_utf8
    assert v.detokenize(v.tokenize(b"x\xe4\xb8y", add_special=False)) == "x\ufffd\ufffdy"
