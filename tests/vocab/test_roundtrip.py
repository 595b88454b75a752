"""Property: detokenize(tokenize(s)) == s for any Unicode text (no special parsing, no BOS).
Neither model adds a space prefix, so no adjustment is needed (a vocab with add_space_prefix
would need remove_special=True and a BOS; see test_tiny.py). Documented SPM effect: U+2581
is SentencePiece's space, so Gemma (like llama.cpp) gives it back as " " -- excluded."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.realmodel

TEXT = st.text(st.characters(codec="utf-8"), max_size=60)
SPM_TEXT = st.text(st.characters(codec="utf-8", exclude_characters="\u2581"), max_size=60)
MIXED = st.lists(st.sampled_from(["  ", "\n", "\t", " ", "<s>", "</s>", "<|im_start|>", "é",
                                  "ab", "'s", " ,", "\r\n", "1234"]), max_size=12).map("".join)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=st.one_of(SPM_TEXT, MIXED))
def test_round_trip_gemma(gemma_vocab, s):
    assert gemma_vocab.detokenize(gemma_vocab.tokenize(s, add_special=False)) == s


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=st.one_of(TEXT, MIXED))
def test_round_trip_qwen(qwen_vocab, s):
    assert qwen_vocab.detokenize(qwen_vocab.tokenize(s, add_special=False)) == s


def test_spm_space_symbol_comes_back_as_space(gemma_vocab):
    assert gemma_vocab.detokenize(gemma_vocab.tokenize("a\u2581b", add_special=False)) == "a b"
