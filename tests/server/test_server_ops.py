"""Operations flags of llama-server that exited 1 before: --ssl-key-file/--ssl-cert-file (HTTPS),
--path (static files, server-http.cpp's mount point), --reuse-port (SO_REUSEPORT)."""
import shutil
import ssl
import subprocess

import httpx
import pytest

from server_proc import ServerProc, free_port

BASE = ["-c", "256", "-np", "1", "-t", "1"]


@pytest.fixture(scope="module")
def cert(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1, made here with openssl."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                   capture_output=True)
    return str(key), ssl.create_default_context(cafile=str(crt)), str(crt)


def test_tls_with_self_signed_certificate(tiny_llama, cert):
    key, trust, crt = cert
    s = ServerProc(["-m", tiny_llama, *BASE, "--ssl-key-file", key, "--ssl-cert-file", crt],
                   scheme="https", verify=trust).wait_ready()
    try:
        with httpx.Client(base_url=s.url, verify=trust, timeout=60) as c:
            r = c.post("/completion", json={"prompt": "a", "n_predict": 2, "temperature": 0})
            assert r.status_code == 200 and r.json()["tokens_predicted"] == 2
        with pytest.raises(httpx.HTTPError):   # plain HTTP on the TLS port is no answer
            httpx.get(f"http://127.0.0.1:{s.port}/health", timeout=5).raise_for_status()
        with pytest.raises(httpx.ConnectError):    # and the certificate is checked
            httpx.get(s.url + "/health", timeout=5)
    finally:
        assert s.stop() == 0, s.output()
    assert f"listening on https://127.0.0.1:{s.port}" in s.output()


def test_tls_bad_certificate_fails_the_start(tiny_llama, tmp_path):
    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    s = ServerProc(["-m", tiny_llama, *BASE, "--ssl-key-file", str(bad),
                    "--ssl-cert-file", str(bad)])
    assert s.proc.wait(60) == 1
    assert "failed to load the SSL certificate" in s.output()
    assert "Traceback" not in s.output()


def test_static_path_served_before_routes(tiny_llama, tmp_path):
    (tmp_path / "index.html").write_text("<p>mine</p>")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("hello")
    s = ServerProc(["-m", tiny_llama, *BASE, "--path", str(tmp_path), "--api-key", "k"]
                   ).wait_ready()
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            r = c.get("/")     # the directory's index.html replaces the built-in UI
            assert r.status_code == 200 and r.text == "<p>mine</p>"
            assert r.headers["content-type"].startswith("text/html")
            assert c.get("/index.html").text == "<p>mine</p>"    # a UI path: no key needed
            assert c.get("/sub/a.txt").status_code == 401        # other files need the key
            r = c.get("/sub/a.txt", headers={"Authorization": "Bearer k"})
            assert r.status_code == 200 and r.text == "hello"
            assert r.headers["content-type"].startswith("text/plain")
            assert c.get("/sub", headers={"Authorization": "Bearer k"}).status_code == 404
            r = c.get("/sw.js", headers={"Authorization": "Bearer k"})   # the built-in UI's
            # service worker, still registered in browsers, removes itself
            assert r.status_code == 200 and "unregister" in r.text
            assert c.get("/health").json() == {"status": "ok"}
            assert c.get("/app.js").status_code == 404       # no built-in UI assets
    finally:
        assert s.stop() == 0, s.output()


def test_static_path_missing_fails_the_start(tiny_llama, tmp_path):
    s = ServerProc(["-m", tiny_llama, *BASE, "--path", str(tmp_path / "nope")])
    assert s.proc.wait(60) == 1
    assert "static assets path not found" in s.output()


def test_reuse_port_two_processes_one_port(tiny_llama):
    port = free_port()
    a = ServerProc(["-m", tiny_llama, *BASE, "--reuse-port", "-a", "first"], port=port
                   ).wait_ready()
    b = ServerProc(["-m", tiny_llama, *BASE, "-a", "second"], port=port,
                   env={"LLAMA_ARG_REUSE_PORT": "1"})
    try:
        import time
        t0 = time.monotonic()
        seen = set()
        while len(seen) < 2 and time.monotonic() - t0 < 90:
            assert a.proc.poll() is None and b.proc.poll() is None, b.output()
            with httpx.Client(timeout=30) as c:   # a new connection each time: the kernel
                r = c.get(a.url + "/v1/models")  # spreads them over both processes
            if r.status_code == 200:             # (503 while the second one loads)
                seen.add(r.json()["data"][0]["id"])
            time.sleep(0.05)
        assert seen == {"first", "second"}
        c = ServerProc(["-m", tiny_llama, *BASE], port=port)   # without the flag: refused
        assert c.proc.wait(60) != 0 and "already in use" in c.output(), c.output()
    finally:
        assert b.stop() == 0, b.output()
        assert a.stop() == 0, a.output()


def _wait_log(s: ServerProc, text: str, count: int = 1, timeout: float = 60) -> None:
    import time
    t0 = time.monotonic()
    while s.output().count(text) < count:
        assert s.proc.poll() is None and time.monotonic() - t0 < timeout, s.output()
        time.sleep(0.05)


def test_sleep_idle_unloads_and_reloads(tiny_llama):
    """llama.cpp's --sleep-idle-seconds: idle N s -> the model is unloaded; /health and /metrics
    answer without waking it; the next request waits for the reload and is answered as before."""
    s = ServerProc(["-m", tiny_llama, *BASE, "--sleep-idle-seconds", "1", "--metrics"]
                   ).wait_ready()
    entering, exiting = "entering sleeping state", "exiting sleeping state"
    body = {"prompt": "hello", "n_predict": 4, "temperature": 0}
    try:
        with httpx.Client(base_url=s.url, timeout=60) as c:
            first = c.post("/completion", json=body).json()
            _wait_log(s, entering)
            assert c.get("/health").json() == {"status": "ok"}
            assert c.get("/metrics").status_code == 200
            assert exiting not in s.output()          # neither woke the model
            again = c.post("/completion", json=body).json()
            assert exiting in s.output()
            assert again["content"] == first["content"] and again["tokens_predicted"] == 4
            assert s.output().count("model loaded") == 2
            _wait_log(s, entering, 2)                # and sleeps again once idle
    finally:
        assert s.stop() == 0, s.output()


def test_sleep_idle_zero_is_refused(tiny_llama):
    s = ServerProc(["-m", tiny_llama, *BASE, "--sleep-idle-seconds", "0"])
    assert s.proc.wait(60) == 1
    assert "cannot be 0 or less than -1" in s.output()
