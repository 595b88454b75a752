"""llama-server in the llama.cpp numerics gives llama.cpp's tokens (issue 21's fidelity bug: the
server ignored -fa, so `--numerics llama.cpp -fa on` ran the non-flash-attention arithmetic), and
seeded sampling through the server equals llama.cpp's server (tests/data/server-fidelity-llamacpp.json,
recorded by tests/make_server_fidelity_fixture.py) and pyllama's llama-completion with the same settings
(both replay the prompt into the sampler: penalties count it, as llama.cpp's init_sampler and
completion loop do)."""
import subprocess
import sys

import httpx
import pytest

from server_proc import REPO, ServerProc

pytestmark = pytest.mark.realmodel
PROMPT = "Once upon a time in a small village,"
# llama.cpp 0c1e570's llama-server (AVX2, -np 1 -c 4096 -fa on), temperature 0: the issue's text
LLAMACPP_GREEDY = ' there was a group of friends who loved to play a game called "The Game of ' \
                  'Thrones."'
SEEDED = [  # (request fields, llama-completion flags)
    ({"seed": 42}, ["--seed", "42"]),
    ({"seed": 7, "temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0},
     ["--seed", "7", "--temp", "1.0", "--top-k", "0", "--top-p", "1.0", "--min-p", "0"]),
    ({"seed": 3, "repeat_penalty": 1.2, "top_k": 10},
     ["--seed", "3", "--repeat-penalty", "1.2", "--top-k", "10"]),
]
N = 24


def _recorded() -> dict:
    """llama.cpp's own server on the same requests (tests/make_server_fidelity_fixture.py)."""
    import json
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                        "server-fidelity-llamacpp.json")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@pytest.fixture(scope="module")
def qwen_llamacpp_server(qwen_path):
    s = ServerProc(["-m", qwen_path, "-c", "4096", "-np", "1", "--numerics", "llama.cpp",
                    "-fa", "on"]).wait_ready(300)
    yield s
    assert s.stop() == 0


def _completion_tool(qwen_path, *flags) -> str:
    r = subprocess.run([sys.executable, "-m", "pyllama", "completion", "-m", qwen_path, "-p",
                        PROMPT, "-n", str(N), "-no-cnv", "-fa", "on", "-c", "4096", *flags],
                       capture_output=True, cwd=REPO, timeout=600)
    assert r.returncode == 0, r.stderr.decode()
    out = r.stdout.decode()
    assert out.startswith(PROMPT) and out.endswith("\n\n")   # the tool ends with a blank line
    return out[len(PROMPT):-2]


def test_greedy_is_llamacpp_server_text(qwen_llamacpp_server):
    with httpx.Client(base_url=qwen_llamacpp_server.url, timeout=300) as c:
        r = c.post("/completion", json={"prompt": PROMPT, "n_predict": 16,
                                        "temperature": 0}).json()
        # the default chain at temperature 0 and top_k 1 alone agree
        r1 = c.post("/completion", json={"prompt": PROMPT, "n_predict": 16, "temperature": 0,
                                         "samplers": ["top_k"], "top_k": 1}).json()
    assert LLAMACPP_GREEDY.startswith(r["content"])
    assert r["content"] == _recorded()["greedy_16"]
    assert r1["content"] == r["content"]


@pytest.mark.parametrize("i", range(len(SEEDED)))
def test_seeded_matches_completion_tool(qwen_llamacpp_server, qwen_path, i):
    body, flags = SEEDED[i]
    with httpx.Client(base_url=qwen_llamacpp_server.url, timeout=300) as c:
        r = c.post("/completion", json={"prompt": PROMPT, "n_predict": N, **body}).json()
    assert r["content"] == _recorded()["seeded"][i]        # llama.cpp's server
    assert r["content"] == _completion_tool(qwen_path, *flags)
