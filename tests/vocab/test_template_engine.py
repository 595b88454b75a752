"""Chat templates where llama.cpp's jinja runtime (common/jinja) and jinja2 differ, rendered by
pyllama's server path (pyllama.server.chat.render_chat) and compared with what llama.cpp
0c1e570's own llama-server answered on POST /apply-template for the same template and request:
tests/data/template-engine-llamacpp.json, recorded by tests/make_template_engine_fixture.py
(the firefunction-v2 and deepseek-r1 templates of llama.cpp's models/templates are stored in
it). Covered: `+` with undefined/none beside a string, a string beside a number or bool, arrays
from map/select/selectattr, a template error (undefined + number) as llama.cpp's status, and
content parts: text joined, media without a projector (500) and bad part types (400)."""
import json
import os

import pytest

from pyllama.server.chat import render_chat
from pyllama.server.schemas import ChatBody, ServerError, decode_body
from pyllama.vocab.chat import ChatTemplate

DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                    "template-engine-llamacpp.json")
with open(DATA, encoding="utf-8") as _f:
    RECORDED = json.load(_f)

CASES = [(name, i) for name in sorted(RECORDED) if name != "llama_cpp"
         for i in range(len(RECORDED[name]["cases"]))]


@pytest.mark.parametrize("name,i", CASES)
def test_apply_template_as_llama_cpp(name, i):
    rec = RECORDED[name]
    case = rec["cases"][i]
    tmpl = ChatTemplate(rec["source"], rec["bos_token"], rec["eos_token"])
    body = decode_body(json.dumps(case["request"]).encode(), ChatBody)
    kwargs = {"datetime": rec["datetime"], "date_string": rec["date_string"],
              "enable_thinking": False}
    if case["status"] == 200:
        assert render_chat(tmpl, body, kwargs, None) == case["response"]["prompt"]
    else:
        with pytest.raises(ServerError) as e:
            render_chat(tmpl, body, kwargs, None)
        assert e.value.code == case["status"]
        err = case["response"]["error"]
        assert e.value.type == err["type"]
        if name == "probe" and i > 2:       # the content-part errors: llama.cpp's own messages
            assert e.value.message == err["message"]
