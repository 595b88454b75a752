"""The llama-server chat page (pyllama/server/web/) in headless Chromium, against a real server.

selenium + Debian's chromium/chromium-driver (installed by .ci/run); skipped when they are
missing. The chat tests use the bundled Qwen2.5-Coder (it has a chat template) started with
`--temp 0`, so each prompt's reply is the greedy one, the same as the API's for the same request;
every prompt was checked to produce what its test needs. What does not depend on the words of a
reply (loading, prompt progress, --ui-config, --api-prefix, the rendering of an imported answer)
runs on the tiny random model. Screenshots of the main states go to
$PYLLAMA_WEB_SCREENSHOTS (a temporary folder when unset). Every test checks, in the browser's
performance log, that no request left for another host than the server.
"""
import json
import os
import re
import shutil
import time

import httpx
import pytest

from server_proc import ServerProc

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

N_PREDICT = 96      # the server's -n: every reply of these tests fits, the counting one is cut

CODE_PROMPT = "Write a Python function that reverses a string. Be brief."
HTML_PROMPT = "Repeat exactly: <b>hello</b> <script>alert(1)</script>"
COUNT_PROMPT = "Count from 1 to 100, separated by commas."


def _binary(*names: str) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


@pytest.fixture(scope="module")
def shots(tmp_path_factory):
    d = os.environ.get("PYLLAMA_WEB_SCREENSHOTS")
    if d:
        os.makedirs(d, exist_ok=True)
        return d
    return str(tmp_path_factory.mktemp("web-screenshots"))


@pytest.fixture(scope="module")
def downloads(tmp_path_factory):
    return str(tmp_path_factory.mktemp("web-downloads"))


@pytest.fixture(scope="module")
def browser(downloads):
    chrome = _binary("chromium", "chromium-browser")
    driver = _binary("chromedriver")
    if chrome is None or driver is None:
        pytest.skip("chromium / chromium-driver not installed "
                    "(apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1200,820", "--disable-background-networking",
                "--disable-component-update", "--no-first-run"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    opts.add_experimental_option("prefs", {"download.default_directory": downloads,
                                           "download.prompt_for_download": False})
    service = webdriver.ChromeService(executable_path=driver)
    try:
        b = webdriver.Chrome(options=opts, service=service)
    except WebDriverException as e:  # a broken or partial install: an environment matter
        pytest.skip(f"headless chromium does not start: {e.msg}")
    b.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow",
                                                      "downloadPath": downloads})
    yield b
    b.quit()


@pytest.fixture(scope="module")
def qwen(qwen_path):
    s = ServerProc(["-m", qwen_path, "-c", "2048", "-np", "1", "--temp", "0",
                    "-n", str(N_PREDICT)]).wait_ready(300)
    yield s
    assert s.stop() == 0, s.output()


def foreign_requests(browser, *allowed: str) -> list[str]:
    """URLs of the requests the page sent to anything but the allowed origins."""
    out = []
    for entry in browser.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"] != "Network.requestWillBeSent":
            continue
        url = msg["params"]["request"]["url"]
        if not url.startswith(tuple(a + "/" for a in allowed)) and \
                not url.startswith(("data:", "blob:")):
            out.append(url)
    return out


class Page:
    """The chat page in the browser, opened fresh (no conversations, default settings)."""

    def __init__(self, browser, url: str, shots: str):
        self.b, self.url, self.shots = browser, url, shots

    def open(self, path: str = "/"):
        self.b.get(self.url + path)
        self.wait(lambda b: "ready" in b.find_element(By.TAG_NAME, "body").get_attribute("class"))
        return self

    def reset(self, prefix: str = ""):
        self.b.get(self.url + prefix + "/health")  # same origin, no page holding the database
        self.b.execute_async_script("""
            const done = arguments[arguments.length - 1];
            localStorage.clear();
            const r = indexedDB.deleteDatabase("pyllama-webui");
            r.onsuccess = r.onerror = r.onblocked = () => done();""")
        self.b.get_log("performance")
        return self.open(prefix + "/")

    def wait(self, cond, timeout=60):
        return WebDriverWait(self.b, timeout, poll_frequency=0.05).until(cond)

    def css(self, sel):
        return self.b.find_elements(By.CSS_SELECTOR, sel)

    def one(self, sel):
        return self.b.find_element(By.CSS_SELECTOR, sel)

    def text(self, sel) -> list[str]:
        """textContent of each match, read at once (the page re-renders while it streams)."""
        return self.b.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent);", sel)

    def attr(self, sel, name):
        return self.b.execute_script(
            "const e = document.querySelector(arguments[0]); "
            "return e && e.getAttribute(arguments[1]);", sel, name)

    def idle(self) -> bool:
        return self.b.execute_script(
            "return !document.querySelector('article.live') && "
            "!document.getElementById('send').classList.contains('stop');")

    def observe(self):
        """Record every text the last assistant message shows while it streams."""
        self.b.execute_script("""
            window.__seen = [];
            new MutationObserver(() => {
              const a = document.querySelectorAll('#log article.assistant .msg-content');
              if (a.length) window.__seen.push(a[a.length - 1].textContent);
            }).observe(document.getElementById('log'),
                       {childList: true, subtree: true, characterData: true});""")

    def seen(self) -> list[str]:
        return [t for t in self.b.execute_script("return window.__seen || [];") if t]

    def send(self, text: str, wait: bool = True):
        box = self.one("#input")
        box.send_keys(text)
        box.send_keys(Keys.ENTER)
        if wait:
            self.wait(lambda b: self.css("article.assistant") and self.idle())

    def replies(self) -> list[str]:
        return self.text("#log article.assistant .msg-content")

    def stored(self) -> list[dict]:
        return self.b.execute_async_script("""
            const done = arguments[arguments.length - 1];
            const r = indexedDB.open("pyllama-webui");
            r.onsuccess = () => {
              const q = r.result.transaction("conversations").objectStore("conversations").getAll();
              q.onsuccess = () => { r.result.close(); done(q.result); };
            };""")

    def shot(self, name: str):
        path = os.path.join(self.shots, name + ".png")
        self.b.save_screenshot(path)
        return path


@pytest.fixture
def page(browser, qwen, shots):
    p = Page(browser, qwen.url, shots).reset()
    yield p
    assert foreign_requests(browser, qwen.url) == []


def api_chat(url: str, prompt: str) -> dict:
    r = httpx.post(url + "/v1/chat/completions", timeout=120,
                   json={"messages": [{"role": "user", "content": prompt}]})
    assert r.status_code == 200, r.text
    return r.json()


def api_reply(url: str, prompt: str) -> str:
    return api_chat(url, prompt)["choices"][0]["message"]["content"]


# ----------------------------------------------------------------------------- chat
@pytest.mark.realmodel
def test_streamed_markdown_with_highlighted_code(page, qwen):
    assert page.b.title == "pyllama chat"
    page.wait(lambda b: page.one("#model").text == "qwen2.5-coder-0.5b-instruct.gguf")
    assert page.one("#ctx").text == "ctx 2,048"
    assert not page.one("#empty").get_property("hidden")
    page.shot("empty")
    page.observe()
    page.send(CODE_PROMPT, wait=False)
    page.wait(lambda b: len(page.seen()) > 2)
    page.shot("streaming")
    page.wait(lambda b: page.idle())
    ref = api_chat(qwen.url, CODE_PROMPT)
    expected = ref["choices"][0]["message"]["content"]
    code = re.search(r"```python\n(.*?)\n```", expected, re.S).group(1)
    # the Markdown is rendered: the prose as paragraphs, the fence as a highlighted block
    assert page.text("#log article.user .msg-content") == [CODE_PROMPT]
    block = page.one("#log article.assistant .code-block")
    assert block.find_element(By.CSS_SELECTOR, ".code-lang").text == "python"
    assert block.find_element(By.CSS_SELECTOR, "pre").get_property("textContent") == code
    kws = [e.text for e in block.find_elements(By.CSS_SELECTOR, ".tok-kw")]
    assert "def" in kws and "return" in kws
    assert page.css("#log article.assistant .msg-content p code")      # `s[::-1]` inline
    assert page.stored()[0]["messages"][1]["content"] == expected
    seen = page.seen()
    assert len(set(seen)) > 2, "the reply did not arrive in pieces"
    # stats from the final chunk's timings
    stats = page.text("#log article.assistant .msg-stats")[0]
    assert f" {ref['usage']['completion_tokens']} generated" in stats, stats
    assert "t/s" in stats and "/2048" in stats
    page.shot("code-answer")
    # the copy button puts the code on the clipboard
    page.b.execute_cdp_cmd("Browser.grantPermissions", {
        "origin": qwen.url, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]})
    copy = block.find_element(By.CSS_SELECTOR, ".copy-code")
    copy.click()
    page.wait(lambda b: copy.text == "Copied")
    clipboard = "navigator.clipboard.readText().then(arguments[arguments.length - 1]);"
    assert page.b.execute_async_script(clipboard) == code
    # and the message's copy button the whole Markdown source
    page.one("#log article.assistant button.copy-msg").click()
    page.wait(lambda b: page.b.execute_async_script(clipboard) == expected, 5)
    check_themes_and_narrow_window(page)


@pytest.mark.realmodel
def test_html_in_a_reply_is_shown_as_text(page, qwen):
    page.send(HTML_PROMPT)
    expected = api_reply(qwen.url, HTML_PROMPT)
    assert "<script>" in expected and "<b>" in expected
    content = page.one("#log article.assistant .msg-content")
    assert content.get_property("textContent") == expected
    assert content.find_elements(By.CSS_SELECTOR, "b, script") == []
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content.get_property("innerHTML")


@pytest.mark.realmodel
def test_stop_mid_stream(page, qwen):
    page.observe()
    page.send(COUNT_PROMPT, wait=False)
    page.wait(lambda b: any(len(t) > 12 for t in page.seen()))
    page.one("#input").send_keys(Keys.ESCAPE)            # Esc stops
    page.wait(lambda b: page.idle(), 10)
    assert page.text("#log article.assistant .note") == ["stopped"]
    partial = page.replies()[0]
    # the server stopped generating too: its slot went idle before the -n limit (an idle slot's
    # next_token is reset, as llama.cpp's release() does)
    page.wait(lambda b: not any(s["is_processing"] for s in httpx.get(qwen.url + "/slots").json()),
              10)
    # what was shown is a proper start of the greedy answer, which runs on to the -n limit
    r = httpx.post(qwen.url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": COUNT_PROMPT}]}).json()
    assert r["usage"]["completion_tokens"] == N_PREDICT
    full = r["choices"][0]["message"]["content"]
    assert partial and full.startswith(partial) and len(partial) < len(full)
    stored = page.stored()[0]["messages"]
    # stored: the raw text received; shown: its Markdown rendering, which drops trailing
    # whitespace (a stop right after a token that ends in a space shows "5," for "5, ")
    kept = stored[1]["content"]
    assert stored[1]["stopped"] is True and kept.rstrip() == partial and full.startswith(kept)


@pytest.mark.realmodel
def test_regenerate_and_edit(page, qwen):
    page.send("What is 2+2? Answer with just the number.")
    assert page.replies() == ["4"]
    first = page.attr("#log article.assistant", "data-id")
    page.one("#log article.assistant button.regenerate").click()
    page.wait(lambda b: page.attr("#log article.assistant", "data-id") not in (first, None)
              and page.idle())
    assert page.replies() == ["4"] and len(page.css("#log article")) == 2
    assert "generated" in page.text("#log article.assistant .msg-stats")[0]
    # the first answer is kept as another version
    assert page.text("#log article.assistant .ver-label") == ["2/2"]
    page.one("#log article.assistant .ver-prev").click()
    page.wait(lambda b: page.attr("#log article.assistant", "data-id") == first)
    assert page.text("#log article.assistant .ver-label") == ["1/2"] and page.replies() == ["4"]
    page.one("#log article.assistant .ver-next").click()
    page.wait(lambda b: page.attr("#log article.assistant", "data-id") != first)
    # edit the question and send it again: the old answer is replaced
    user = page.one("#log article.user")
    page.b.execute_script("arguments[0].querySelector('button.edit').click()", user)
    box = page.one("#log article.user textarea.edit-box")
    box.clear()
    box.send_keys("What is 3+3? Answer with just the number.")
    page.one("#log article.user button.edit-send").click()
    page.wait(lambda b: page.replies() == ["6"] and page.idle())
    assert page.text("#log article.user .msg-content") == ["What is 3+3? Answer with just the number."]
    assert [m["content"] for m in page.stored()[0]["messages"]] == [
        "What is 3+3? Answer with just the number.", "6"]
    # the question before the edit, with its answers, is the other version of the message
    assert page.text("#log article.user .ver-label") == ["2/2"]
    page.one("#log article.user .ver-prev").click()
    page.wait(lambda b: page.replies() == ["4"])
    assert page.text("#log article.user .msg-content") == [
        "What is 2+2? Answer with just the number."]
    assert page.text("#log .ver-label") == ["1/2", "2/2"]
    page.b.refresh()                                      # versions are stored too
    page.wait(lambda b: page.text("#log .ver-label") == ["1/2", "2/2"])
    page.one("#log article.user .ver-next").click()
    page.wait(lambda b: page.replies() == ["6"])


@pytest.mark.realmodel
def test_conversations_persist_rename_delete_export_import(page, qwen, downloads):
    page.send("What is 2+2? Answer with just the number.")
    page.one("#new-chat").click()
    assert not page.one("#empty").get_property("hidden")
    page.send("What is 3+3? Answer with just the number.")
    names = page.text("#conv-list .conv-name")
    assert names == ["What is 3+3? Answer with just the number.",
                     "What is 2+2? Answer with just the number."]
    # reload: the open conversation is shown again, the other one is in the list
    page.b.refresh()
    page.wait(lambda b: page.replies() == ["6"])
    page.open("/")
    assert page.text("#conv-list .conv-name") == names
    page.css("#conv-list .conv-open")[1].click()
    page.wait(lambda b: page.replies() == ["4"])
    # the search box filters on names and messages
    page.one("#search").send_keys("6")
    assert page.text("#conv-list .conv-name") == [names[0]]
    page.one("#search").clear()
    page.one("#search").send_keys(Keys.SPACE, Keys.BACKSPACE)
    assert page.text("#conv-list .conv-name") == names
    # rename
    item = page.css("#conv-list .conv-item")[1]
    page.b.execute_script("arguments[0].querySelector('.conv-rename').click()", item)
    box = page.one("#conv-list .rename-input")
    box.send_keys(Keys.CONTROL, "a")
    box.send_keys("Arithmetic", Keys.ENTER)
    page.wait(lambda b: "Arithmetic" in page.text("#conv-list .conv-name"))
    assert sorted(c["name"] for c in page.stored()) == [
        "Arithmetic", "What is 3+3? Answer with just the number."]
    # export, delete, import back
    for f in os.listdir(downloads):
        os.remove(os.path.join(downloads, f))
    page.one("#export").click()
    path = page.wait(lambda b: next((os.path.join(downloads, f) for f in os.listdir(downloads)
                                     if f.endswith(".json")), None), 10)
    time.sleep(0.2)
    exported = json.load(open(path))
    assert sorted(c["name"] for c in exported["conversations"]) == sorted(
        c["name"] for c in page.stored())
    item = next(e for e in page.css("#conv-list .conv-item") if "Arithmetic" in e.text)
    page.b.execute_script("arguments[0].querySelector('.conv-delete').click()", item)
    page.b.switch_to.alert.accept()
    page.wait(lambda b: page.text("#conv-list .conv-name") == [
        "What is 3+3? Answer with just the number."])
    assert len(page.stored()) == 1
    page.b.execute_script("document.getElementById('import-file').hidden = false;")
    page.one("#import-file").send_keys(path)
    page.wait(lambda b: len(page.css("#conv-list .conv-item")) == 3)
    assert sorted(page.text("#conv-list .conv-name")) == [
        "Arithmetic", "What is 3+3? Answer with just the number.",
        "What is 3+3? Answer with just the number."]
    assert page.replies() in (["4"], ["6"])


@pytest.mark.realmodel
def test_settings_persist_and_reach_the_request(page, qwen):
    page.one("#open-settings").click()
    dialog = page.one("#settings")
    page.wait(lambda b: dialog.is_displayed())
    for key in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "presence_penalty",
                "frequency_penalty", "dry_multiplier", "dry_base", "dry_allowed_length",
                "xtc_probability", "xtc_threshold", "max_tokens", "seed", "systemMessage"):
        assert page.css(f"#set-{key}"), key
    # the defaults come from /props
    props = httpx.get(qwen.url + "/props").json()["default_generation_settings"]["params"]
    assert page.one("#set-temperature").get_property("value") == "0"
    assert page.one("#set-top_k").get_property("value") == str(props["top_k"])
    assert page.one("#set-max_tokens").get_property("value") == str(N_PREDICT)
    assert "qwen2.5-coder-0.5b-instruct.gguf" in page.one("#server-info").text
    page.shot("settings")
    temp = page.one("#set-temperature")
    temp.clear()
    temp.send_keys("0.55")
    page.one("#set-max_tokens").clear()
    page.one("#set-max_tokens").send_keys("3")
    page.one("#settings-save").click()
    page.wait(lambda b: not dialog.is_displayed())
    # kept by the browser
    page.b.refresh()
    page.wait(lambda b: "ready" in page.one("body").get_attribute("class"))
    page.one("#open-settings").click()
    assert page.one("#set-temperature").get_property("value") == "0.55"
    page.one("#settings-cancel").click()
    # and sent: the slot's last task ran with them
    page.send(COUNT_PROMPT)
    params = httpx.get(qwen.url + "/slots").json()[0]["params"]
    assert abs(params["temperature"] - 0.55) < 1e-6 and params["max_tokens"] == 3
    # reset to the server's defaults
    page.one("#open-settings").click()
    page.one("#settings-reset").click()
    assert page.one("#set-temperature").get_property("value") == "0"
    page.one("#settings-save").click()
    assert page.b.execute_script("return localStorage.getItem('pyllama-webui.settings')") == "{}"


@pytest.mark.realmodel
def test_server_error_text_is_shown(page, qwen):
    body = {"messages": [{"role": "user", "content": "hi"}], "n_probs": "many"}
    ref = httpx.post(qwen.url + "/v1/chat/completions", json=body)
    assert ref.status_code == 400
    page.b.execute_script("localStorage.setItem('pyllama-webui.settings', "
                          "JSON.stringify({customJson: '{\"n_probs\": \"many\"}'}));")
    page.open("/")
    page.send("hi")
    err = page.text("#log article.assistant .error-text")
    assert err == [f"400: {ref.json()['error']['message']}"]


@pytest.mark.realmodel
def test_attach_and_paste_text_files(page, qwen, tmp_path):
    f = tmp_path / "notes.txt"
    f.write_text("The secret word is PINEAPPLE.")
    page.b.execute_script("document.getElementById('attach-file').hidden = false;")
    page.one("#attach-file").send_keys(str(f))
    page.wait(lambda b: page.text("#attachments .chip-name") == ["notes.txt"])
    page.send("What is the secret word in the file? Answer with one word.")
    assert page.replies() == ["PINEAPPLE"]
    assert page.text("#log article.user .chip-name") == ["notes.txt"]
    # a long paste becomes an attachment instead of filling the box
    page.b.execute_script("""
        const dt = new DataTransfer(); dt.setData('text/plain', 'x'.repeat(3000));
        document.getElementById('input').dispatchEvent(
          new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));""")
    assert page.text("#attachments .chip-name") == ["pasted-text-1.txt"]
    assert page.one("#input").get_property("value") == ""


def check_themes_and_narrow_window(page):
    """Dark theme (the system's, or the settings' choice) and a phone-sized window, on the page
    as it is (a code answer shown)."""
    bg = "return getComputedStyle(document.body).backgroundColor"
    light = page.b.execute_script(bg)
    page.b.execute_cdp_cmd("Emulation.setEmulatedMedia", {
        "features": [{"name": "prefers-color-scheme", "value": "dark"}]})
    try:
        dark = page.b.execute_script(bg)
        assert light == "rgb(255, 255, 255)" and dark != light
        page.shot("dark")
        # an explicit choice in the settings wins over the system's
        page.b.execute_script("localStorage.setItem('pyllama-webui.settings', "
                              "JSON.stringify({theme: 'light'}));")
        page.b.refresh()
        page.wait(lambda b: "ready" in page.one("body").get_attribute("class"))
        assert page.b.execute_script(bg) == light
    finally:
        page.b.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    page.b.execute_script("localStorage.setItem('pyllama-webui.settings', "
                          "JSON.stringify({theme: 'dark'}));")          # and on a light system
    page.b.refresh()
    page.wait(lambda b: "ready" in page.one("body").get_attribute("class"))
    assert page.b.execute_script(bg) == dark
    page.b.set_window_size(420, 820)
    try:
        page.b.refresh()
        page.wait(lambda b: page.replies())
        assert not page.one("#sidebar").is_displayed() or \
            page.one("#sidebar").rect["x"] < 0
        page.one("#toggle-sidebar").click()
        page.wait(lambda b: page.one("#sidebar").rect["x"] == 0)        # slid in
        page.shot("narrow-sidebar")
        page.b.execute_script("document.getElementById('scrim').click()")
        page.wait(lambda b: page.one("#sidebar").rect["x"] + page.one("#sidebar").rect["width"]
                  <= 0)
        page.shot("narrow")
    finally:
        page.b.set_window_size(1200, 820)


THINK_TEMPLATE = """{%- for m in messages %}<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}{#- a reply starts with its reasoning, closed by </think> -#}
"""


@pytest.mark.realmodel
def test_streamed_reasoning_is_collapsed(browser, qwen_path, shots, tmp_path):
    """Qwen with a chat template whose generation prompt opens a think block: the server streams
    the reply as reasoning_content deltas, the page folds them into a collapsed block."""
    tpl = tmp_path / "think.jinja"
    tpl.write_text(THINK_TEMPLATE)
    s = ServerProc(["-m", qwen_path, "-c", "1024", "-np", "1", "--temp", "0", "-n", "32",
                    "--chat-template-file", str(tpl)]).wait_ready(300)
    try:
        prompt = "What is 2+2? Write one sentence of reasoning, then the tag </think>, then the answer."
        ref = httpx.post(s.url + "/v1/chat/completions", timeout=120, json={
            "messages": [{"role": "user", "content": prompt}]}).json()["choices"][0]["message"]
        assert ref["reasoning_content"] == "2 + 2 equals 4"
        p = Page(browser, s.url, shots).reset()
        p.b.execute_script("""
            window.__summaries = [];
            new MutationObserver(() => {
              const e = document.querySelector('#log details.reasoning summary');
              if (e) window.__summaries.push(e.textContent);
            }).observe(document.getElementById('log'), {childList: true, subtree: true});""")
        p.send(prompt)
        assert "Thinking…" in p.b.execute_script("return window.__summaries;")
        details = p.one("#log article.assistant details.reasoning")
        assert details.get_property("open") is False
        assert details.find_element(By.TAG_NAME, "summary").text == "Reasoning"
        assert p.text("#log article.assistant .reasoning-body") == [ref["reasoning_content"]]
        # the streamed deltas end with the "\n" before the end of generation
        assert p.stored()[0]["messages"][1]["reasoning"].rstrip() == ref["reasoning_content"]
        assert foreign_requests(browser, s.url) == []
    finally:
        assert s.stop() == 0


# ----------------------------------------------------------------------------- servers of their own
def test_reasoning_collapsed_and_tool_calls_shown(browser, server, shots, tmp_path):
    """An answer with reasoning_content and tool calls (imported, as the stream folds them:
    tests/server/test_web_markdown.py) shows the reasoning collapsed and each call as such."""
    args = {"city": "Paris", "unit": "celsius"}
    conv = {"id": "c-tools", "name": "Weather", "created": 1, "updated": 2, "messages": [
        {"id": "m1", "role": "user", "content": "Weather in Paris?"},
        {"id": "m2", "role": "assistant", "content": "Let me check.",
         "reasoning": "The user wants the **weather**.",
         "toolCalls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps(args)}}]}]}
    f = tmp_path / "weather.json"
    f.write_text(json.dumps({"conversations": [conv]}))
    p = Page(browser, server.url, shots).reset()
    p.b.execute_script("document.getElementById('import-file').hidden = false;")
    p.one("#import-file").send_keys(str(f))
    p.b.execute_script("document.getElementById('import-file').hidden = true;")
    p.wait(lambda b: p.replies() == ["Let me check."])
    details = p.one("#log article.assistant details.reasoning")
    assert details.get_property("open") is False
    assert details.find_element(By.TAG_NAME, "summary").text == "Reasoning"
    body = details.find_element(By.CSS_SELECTOR, ".reasoning-body")
    assert "<strong>weather</strong>" in body.get_property("innerHTML")
    assert not body.is_displayed()
    details.find_element(By.TAG_NAME, "summary").click()
    p.wait(lambda b: body.is_displayed())
    call = p.one("#log article.assistant .tool-call")
    assert call.find_element(By.CSS_SELECTOR, ".tool-head code").text == "get_weather"
    assert call.find_element(By.TAG_NAME, "pre").get_property("textContent") == \
        json.dumps(args, indent=2)
    p.shot("reasoning-tool-call")
    # every control has an accessible name (the settings dialog's too)
    p.one("#open-settings").click()
    unnamed = p.b.execute_script("""
        return [...document.querySelectorAll('button, input, textarea, select, summary')]
          .filter(e => !(e.getAttribute('aria-label') || (e.labels && e.labels.length &&
                         e.labels[0].textContent.trim()) || e.textContent.trim()))
          .map(e => e.outerHTML.slice(0, 80));""")
    assert unnamed == []
    p.one("#settings-cancel").click()
    # keyboard: Shift+Enter is a new line, Enter would send
    box = p.one("#input")
    box.send_keys("line one", Keys.SHIFT, Keys.ENTER, Keys.NULL, "line two")
    assert box.get_property("value") == "line one\nline two"
    assert len(p.css("#log article")) == 2
    assert foreign_requests(browser, server.url) == []


@pytest.mark.realmodel
def test_error_when_the_server_is_gone(browser, qwen_path, shots):
    s = ServerProc(["-m", qwen_path, "-c", "512", "-np", "1", "--temp", "0"]).wait_ready(300)
    try:
        p = Page(browser, s.url, shots).reset()
        p.wait(lambda b: p.one("#model").text)
    finally:
        assert s.stop() == 0
    p.send("hello")
    err = p.text("#log article.assistant .error-text")
    assert len(err) == 1 and err[0].startswith("cannot reach the server"), err
    p.shot("server-gone")


def test_loading_message_until_the_model_is_ready(browser, tiny_llama, shots):
    """While the engine loads, the page's files are served and /props answers 503: the page says
    the model is loading, then shows the model once it is ready. The server runs in this process
    (starlette app + a real Engine, started only after the page is open)."""
    import threading
    import uvicorn
    from pyllama.server.app import create_app
    from pyllama.server.config import ServerConfig
    from pyllama.server.engine import Engine
    from server_proc import free_port
    cfg = ServerConfig(model=tiny_llama, n_ctx=256, n_parallel=1, port=free_port())
    engine = Engine(cfg)
    server = uvicorn.Server(uvicorn.Config(create_app(cfg, engine), host="127.0.0.1",
                                           port=cfg.port, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{cfg.port}"
    try:
        p = Page(browser, url, shots)
        WebDriverWait(browser, 10).until(lambda b: server.started)
        p.reset()
        p.wait(lambda b: "loading the model" in p.one("#banner").text)
        assert "(Loading model)" in p.one("#banner").text        # the server's own words
        p.shot("loading")
        engine.start()
        p.wait(lambda b: p.one("#model").text == "tiny-llama.gguf", 30)
        assert p.one("#banner").get_property("hidden")
    finally:
        server.should_exit = True
        thread.join(10)
        engine.stop()


def test_prompt_progress_while_a_long_prompt_is_read(browser, tiny_llama, shots):
    """return_progress: the page shows how much of the prompt was processed, chunk by chunk."""
    s = ServerProc(["-m", tiny_llama, "-c", "2048", "-np", "1", "-b", "64", "-ub", "64",
                    "-n", "2"]).wait_ready()
    try:
        p = Page(browser, s.url, shots).reset()
        p.b.execute_script("""
            window.__progress = [];
            new MutationObserver(() => {
              const e = document.querySelector('#log .typing .progress');
              if (e) window.__progress.push(e.textContent);
            }).observe(document.getElementById('log'), {childList: true, subtree: true});
            const dt = new DataTransfer();
            dt.setData('text/plain', 'the cat sat on the mat. '.repeat(110));
            document.getElementById('input').dispatchEvent(
              new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));""")
        p.send("Summarise.")
        seen = [int(re.search(r"(\d+)%", t).group(1))
                for t in dict.fromkeys(p.b.execute_script("return window.__progress;"))]
        slot = httpx.get(s.url + "/slots").json()[0]
        n_prompt = slot["n_prompt_tokens"]
        assert n_prompt > 600
        # (the last chunk's 100% may be replaced by the first token within one frame)
        assert len(seen) >= 3 and seen == sorted(seen) and 0 <= seen[0] and seen[-1] <= 100, seen
    finally:
        assert s.stop() == 0


def test_ui_config_gives_the_defaults(browser, tiny_llama, shots):
    """--ui-config (llama.cpp's preferences keys, and sampling fields): the page's defaults; a
    sampling value from it is sent with each request."""
    cfg = {"pasteLongTextToFileLen": 0, "systemMessage": "Be terse.", "temperature": 0.3,
           "theme": "dark"}
    s = ServerProc(["-m", tiny_llama, "-c", "512", "-np", "1", "-n", "2",
                    "--ui-config", json.dumps(cfg)]).wait_ready()
    try:
        p = Page(browser, s.url, shots).reset()
        p.wait(lambda b: p.one("#model").text)
        assert p.b.execute_script("return document.documentElement.dataset.theme") == "dark"
        p.one("#open-settings").click()
        assert p.one("#set-temperature").get_property("value") == "0.3"
        assert p.one("#set-systemMessage").get_property("value") == "Be terse."
        assert p.one("#set-pasteLongTextToFileLen").get_property("value") == "0"
        p.one("#settings-cancel").click()
        p.send("hello")
        slot = httpx.get(s.url + "/slots").json()[0]
        assert abs(slot["params"]["temperature"] - 0.3) < 1e-6
        prompt = httpx.post(s.url + "/apply-template", json={"messages": [
            {"role": "system", "content": "Be terse."}, {"role": "user", "content": "hello"}]})
        n_prompt = len(httpx.post(s.url + "/tokenize", json={
            "content": prompt.json()["prompt"]}).json()["tokens"])
        assert slot["n_prompt_tokens"] == n_prompt            # the system message was sent
    finally:
        assert s.stop() == 0


def test_page_under_api_prefix(browser, tiny_llama, shots):
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "--api-prefix", "/llm",
                    "--api-key", "sekrit"]).wait_ready()
    try:
        p = Page(browser, s.url, shots).reset("/llm")
        p.b.get(s.url + "/llm")                  # redirected to /llm/ so the assets resolve
        p.wait(lambda b: b.current_url.split("#")[0] == s.url + "/llm/" and
               "ready" in p.one("body").get_attribute("class"))
        # the key is needed for the API, not for the page: the page says so
        p.wait(lambda b: "API key" in p.one("#banner").text)
        p.b.execute_script("localStorage.setItem('pyllama-webui.settings', "
                           "JSON.stringify({apiKey: 'sekrit', max_tokens: 4}));")
        p.open("/llm/")
        p.wait(lambda b: p.one("#model").text)
        assert p.one("#banner").get_property("hidden")
        p.send("hello")
        assert p.text("#log article.assistant .error-text") == []
        assert "4 generated" in p.text("#log article.assistant .msg-stats")[0], p.text("#log")
        assert foreign_requests(browser, s.url) == []
        p.b.execute_script("localStorage.clear()")
    finally:
        assert s.stop() == 0
