"""How llama-server serves its chat page (pyllama/server/web/), as llama.cpp's server-http.cpp
does: every file at /<name> (under --api-prefix too), no API key needed for them, nothing of the
page with --no-webui."""
from pathlib import Path

import httpx
import pytest

from server_proc import ServerProc

WEB = Path(__file__).resolve().parents[2] / "pyllama" / "server" / "web"
TYPES = {".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml",
         ".html": "text/html"}


@pytest.fixture(scope="module")
def prefixed(tiny_llama):
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "--api-prefix", "/llm",
                    "--api-key", "k1"]).wait_ready()
    yield s
    assert s.stop() == 0


def test_every_file_of_the_page_is_served_without_key(prefixed):
    files = sorted(p.name for p in WEB.iterdir())
    assert {"index.html", "app.js", "style.css", "markdown.js"} <= set(files)
    with httpx.Client(base_url=prefixed.url + "/llm", timeout=30) as c:
        for name in files:
            r = c.get("/" + name)
            assert r.status_code == 200, name
            assert r.headers["content-type"].startswith(TYPES[Path(name).suffix]), name
            assert r.headers["cache-control"] == "no-cache"
            assert r.content == (WEB / name).read_bytes()
        assert c.get("/").content == (WEB / "index.html").read_bytes()
        # the API itself still wants the key
        assert c.get("/props").status_code == 401
        assert c.get("/props", headers={"Authorization": "Bearer k1"}).status_code == 200
        assert c.get("/nothing.js").status_code == 401     # not a page file: the key is asked


def test_page_imports_only_relative_modules():
    """No file of the page refers to another host (the browser test checks the requests)."""
    import re
    for p in WEB.glob("*.js"):
        for spec in re.findall(r'^import .* from "([^"]+)";', p.read_text(), re.M):
            assert spec.startswith("./") and (WEB / spec[2:]).exists(), (p.name, spec)
    for p in WEB.iterdir():
        if p.suffix == ".svg":
            continue        # the SVG namespace URI is a name, not a request
        assert not re.search(r"(src|href)=\"(https?:)?//", p.read_text()), p.name


def test_no_webui(tiny_llama):
    s = ServerProc(["-m", tiny_llama, "-c", "256", "-np", "1", "--no-webui"]).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=30) as c:
            for path in ("/", "/index.html", "/app.js", "/style.css"):
                r = c.get(path)
                assert r.status_code == 404, path
                assert r.json()["error"]["message"] == "File Not Found"
            assert c.get("/health").status_code == 200
    finally:
        assert s.stop() == 0
