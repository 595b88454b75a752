"""Target/draft vocabulary compatibility, as common_speculative_are_compatible checks it."""
from ..errors import PyllamaError

SPEC_VOCAB_MAX_SIZE_DIFFERENCE = 128
SPEC_VOCAB_CHECK_START_TOKEN_ID = 5


def check_vocab_compatible(tgt, dft) -> None:
    """Raise PyllamaError naming the first difference between the two vocabularies."""
    def fail(why: str):
        raise PyllamaError(f"the target and draft vocabs are not compatible: {why}")

    if tgt.kind != dft.kind:
        fail(f"vocab type {tgt.kind} != {dft.kind}")
    if tgt.add_bos != dft.add_bos or (tgt.add_bos and tgt.bos != dft.bos):
        fail(f"BOS differs (add {tgt.add_bos}/{dft.add_bos}, id {tgt.bos}/{dft.bos})")
    if tgt.add_eos != dft.add_eos or (tgt.add_eos and tgt.eos != dft.eos):
        fail(f"EOS differs (add {tgt.add_eos}/{dft.add_eos}, id {tgt.eos}/{dft.eos})")
    if abs(tgt.n_vocab - dft.n_vocab) > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        fail(f"vocab sizes differ by more than {SPEC_VOCAB_MAX_SIZE_DIFFERENCE} "
             f"({tgt.n_vocab} vs {dft.n_vocab})")
    for i in range(SPEC_VOCAB_CHECK_START_TOKEN_ID, min(tgt.n_vocab, dft.n_vocab)):
        if tgt.token_text(i) != dft.token_text(i):
            fail(f"token {i} is '{tgt.token_text(i)}' in the target and "
                 f"'{dft.token_text(i)}' in the draft")
