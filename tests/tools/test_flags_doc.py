"""docs/flags.md is generated from the flag table and must be current."""
from pyllama.tools import _flagsdoc


def test_flags_doc_is_current():
    with open(_flagsdoc.doc_path()) as f:
        on_disk = f.read()
    assert on_disk == _flagsdoc.render(), "regenerate with: python -m pyllama flags-doc"


def test_every_flag_listed_with_disposition():
    from pyllama.tools._args import OPTIONS
    text = _flagsdoc.render()
    for o in OPTIONS:
        assert f"`{o.args[0]}`" in text
    for word in ("implemented", "accepted, no effect", "not supported yet", "old spelling"):
        assert word in text
