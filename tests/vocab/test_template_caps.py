"""pyllama.vocab.template_caps against llama.cpp 0c1e570's jinja capability analysis
(common/jinja/caps.cpp): tests/data/template-caps-llamacpp.json holds, for every template of
llama.cpp's models/templates/, its source and the `chat_template_caps` llama.cpp's own
llama-server reported for it (recorded by tests/make_template_caps_fixture.py)."""
import json
import os

import pytest

from pyllama.errors import TemplateError
from pyllama.vocab.chat import ChatTemplate
from pyllama.vocab.template_caps import template_caps

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                    "template-caps-llamacpp.json")
with open(DATA, encoding="utf-8") as _f:
    RECORDED = json.load(_f)


# templates whose probes fail under jinja2 but render in llama.cpp's own jinja runtime: not the
# analysis but the template engine differs (these conversations fail in pyllama's chat too)
ENGINE_GAPS = {
    "Kimi-K2-Instruct.jinja": "list.append is refused by jinja2's immutable sandbox",
    "Kimi-K2-Thinking.jinja": "list.append is refused by jinja2's immutable sandbox",
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    reason=ENGINE_GAPS[n], strict=True)) if n in ENGINE_GAPS else n for n in sorted(RECORDED)])
def test_caps_as_llama_cpp(name):
    rec = RECORDED[name]
    if rec["caps"] is None:
        pytest.skip("llama.cpp's server refused this template")
    try:
        tmpl = ChatTemplate(rec["source"])
    except TemplateError as e:
        pytest.skip(f"jinja2 cannot compile it: {e}")
    assert template_caps(tmpl) == rec["caps"]
