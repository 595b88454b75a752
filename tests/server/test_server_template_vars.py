"""The variables llama.cpp 0c1e570 gives every jinja chat template (common/chat.cpp
common_chat_extra_context: `datetime` "%b %d %Y", `date_string` "%d %b %Y") and `--reasoning
on|off` (enable_thinking in default_template_kwargs, common/arg.cpp), seen through
/apply-template."""
import datetime

import httpx
import pytest

from server_proc import ServerProc

TEMPLATE = ("{{ date_string }}|{{ datetime }}|{{ enable_thinking }}|"
            "{% for m in messages %}{{ m.content }}{% endfor %}")


@pytest.mark.parametrize("flag,thinking", [("on", "True"), ("off", "False")])
def test_date_and_reasoning_flag(tiny_llama, tmp_path, flag, thinking):
    tpl = tmp_path / "t.jinja"
    tpl.write_text(TEMPLATE)
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "-t", "1", "--jinja",
                    "--chat-template-file", str(tpl), "--reasoning", flag]).wait_ready()
    try:
        today = datetime.datetime.now()
        r = httpx.post(s.url + "/apply-template", json={"messages": [
            {"role": "user", "content": "hi"}]}, timeout=30)
        date_string, dt, enable, rest = r.json()["prompt"].split("|")
        assert date_string == today.strftime("%d %b %Y") and dt == today.strftime("%b %d %Y")
        assert enable == thinking and rest == "hi"
        r = httpx.post(s.url + "/apply-template", json={"messages": [
            {"role": "user", "content": "hi"}], "chat_template_kwargs": {
            "date_string": "1 Jan 2000"}}, timeout=30)
        assert r.json()["prompt"].startswith("1 Jan 2000|")     # the request's own win
    finally:
        assert s.stop() == 0, s.output()
