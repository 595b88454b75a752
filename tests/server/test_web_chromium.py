"""The llama-server web page (pyllama/server/web/index.html) in headless Chromium.

Opens `/` of a real server (tiny model) with selenium + Debian's chromium/chromium-driver, types a
message, sends it and reads the streamed reply from the DOM; it must equal the API's reply to the
same greedy request. Skipped when selenium, chromium or chromedriver is not installed.
"""
import os
import shutil

import httpx
import pytest

from server_proc import ServerProc

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
from selenium.common.exceptions import WebDriverException  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

MESSAGE = "Tell me about llamas."
N_PREDICT = 24

# Records every text the assistant bubble shows, to check that the reply arrived in pieces.
OBSERVE = """
window.__seen = [];
new MutationObserver(() => {
  const b = document.querySelectorAll('.msg.assistant');
  if (b.length) window.__seen.push(b[b.length - 1].textContent);
}).observe(document.getElementById('log'), {childList: true, subtree: true, characterData: true});
"""


def _binary(*names: str) -> str | None:
    return next((p for p in map(shutil.which, names) if p), None)


@pytest.fixture(scope="module")
def browser():
    chrome = _binary("chromium", "chromium-browser")
    driver = _binary("chromedriver")
    if chrome is None or driver is None:
        pytest.skip("chromium / chromium-driver not installed "
                    "(apt-get install chromium chromium-driver)")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1000,700"):
        opts.add_argument(arg)
    service = webdriver.ChromeService(executable_path=driver)
    try:
        b = webdriver.Chrome(options=opts, service=service)
    except WebDriverException as e:  # a broken or partial install: an environment matter
        pytest.skip(f"headless chromium does not start: {e.msg}")
    yield b
    b.quit()


def _set(browser, element_id: str, value) -> None:
    browser.execute_script("document.getElementById(arguments[0]).value = arguments[1];",
                           element_id, str(value))


def _finished(browser) -> bool:
    """The final chunk (with timings) was shown and the send button is back."""
    return (bool(browser.find_elements(By.CSS_SELECTOR, ".meta"))
            and browser.find_element(By.ID, "send").text == "Send")


def chat_in_page(browser, url: str, message: str, n_predict: int, screenshot: str) -> dict:
    """Open the page, send `message` greedily with max tokens `n_predict`, wait for the end of
    the stream; returns the bubbles' texts, every text the reply showed, and the timings line."""
    browser.get(url + "/")
    WebDriverWait(browser, 10).until(
        lambda b: b.find_element(By.ID, "model").get_property("textContent"))
    assert browser.title == "pyllama chat"
    browser.execute_script(OBSERVE)
    _set(browser, "temp", 0)
    _set(browser, "maxtok", n_predict)
    box = browser.find_element(By.ID, "input")
    box.send_keys(message)
    box.send_keys(Keys.ENTER)
    WebDriverWait(browser, 60).until(_finished)
    browser.save_screenshot(os.environ.get("PYLLAMA_WEB_SCREENSHOT", screenshot))
    texts = (lambda css: [e.get_property("textContent")
                          for e in browser.find_elements(By.CSS_SELECTOR, css)])
    return {"user": texts(".msg.user"), "assistant": texts(".msg.assistant"),
            "error": texts(".msg.error"), "meta": texts(".meta"),
            "seen": [t for t in browser.execute_script("return window.__seen;") if t]}


def api_reply(url: str, message: str, n_predict: int) -> str:
    r = httpx.post(url + "/v1/chat/completions", timeout=120, json={
        "messages": [{"role": "user", "content": message}], "temperature": 0,
        "max_tokens": n_predict})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["usage"]["completion_tokens"] == n_predict
    return body["choices"][0]["message"]["content"]


def check_page(browser, url: str, message: str, n_predict: int, screenshot: str) -> str:
    page = chat_in_page(browser, url, message, n_predict, screenshot)
    expected = api_reply(url, message, n_predict)
    assert page["user"] == [message] and page["error"] == []
    assert expected and page["assistant"] == [expected]
    assert len(set(page["seen"])) > 1, "the reply did not arrive in pieces"
    assert all(expected.startswith(t) for t in page["seen"])
    assert len(page["meta"]) == 1 and f"{n_predict} generated" in page["meta"][0]
    return expected


def test_page_streams_greedy_reply(browser, server, tmp_path):
    check_page(browser, server.url, MESSAGE, N_PREDICT, str(tmp_path / "chat.png"))


@pytest.mark.realmodel
@pytest.mark.slow
def test_page_gemma_reply(browser, gemma_path, tmp_path):
    s = ServerProc(["-m", gemma_path, "-c", "1024", "-np", "1"]).wait_ready(300)
    try:
        reply = check_page(browser, s.url, "Write a haiku about the sea.", 32,
                           str(tmp_path / "chat-gemma.png"))
    finally:
        assert s.stop() == 0
    assert any(c.isalpha() for c in reply)
