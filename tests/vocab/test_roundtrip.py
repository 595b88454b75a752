"""Property: detokenize(tokenize(s)) == s for any Unicode text (no special parsing, no BOS).
Neither model adds a space prefix, so no adjustment is needed (a vocab with add_space_prefix
would need remove_special=True and a BOS; see test_tiny.py)."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.realmodel

TEXT = st.text(st.characters(codec="utf-8"), max_size=60)
MIXED = st.lists(st.sampled_from(["  ", "\n", "\t", " ", "<s>", "</s>", "<|im_start|>", "é",
                                  "ab", "'s", " ,", "\r\n", "1234"]), max_size=12).map("".join)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=st.one_of(TEXT, MIXED))
def test_round_trip_gemma(gemma_vocab, s):
    assert gemma_vocab.detokenize(gemma_vocab.tokenize(s, add_special=False)) == s


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(s=st.one_of(TEXT, MIXED))
def test_round_trip_qwen(qwen_vocab, s):
    assert qwen_vocab.detokenize(qwen_vocab.tokenize(s, add_special=False)) == s
