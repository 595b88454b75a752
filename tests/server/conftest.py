"""Fixtures: a real llama-server process with the tiny model, and an httpx client for it."""
import httpx
import pytest

from server_proc import ServerProc


@pytest.fixture(scope="session")
def tiny_llama(tiny_model_path):
    return tiny_model_path("llama")


@pytest.fixture(scope="session")
def slot_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("slots"))


@pytest.fixture(scope="session")
def server(tiny_llama, slot_dir):
    """-np 2 slots of 512 tokens, metrics and slot saving on."""
    s = ServerProc(["-m", tiny_llama, "-c", "1024", "-np", "2", "--metrics",
                    "--slot-save-path", slot_dir, "-t", "1"]).wait_ready()
    yield s
    rc = s.stop()
    assert rc == 0, s.output()
    assert "listening on http://127.0.0.1:" in s.output()


@pytest.fixture
def client(server):
    with httpx.Client(base_url=server.url, timeout=60) as c:
        yield c
