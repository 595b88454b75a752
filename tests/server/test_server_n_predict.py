"""A request's n_predict over the server's -n, and four parallel requests in a unified cache,
against llama.cpp 0c1e570's llama-server (tests/data/n-predict-llamacpp.json, recorded by
tests/make_n_predict_fixture.py on the same tiny model): the request's limit wins over -n
(launch_slot_with_task), as llama.cpp's suite checks in test_completion_unified."""
import json

from n_predict_cases import DATA, SERVER_ARGS, run_scenario
from server_proc import ServerProc


def test_request_n_predict_over_server_limit_and_unified_pool(tiny_llama):
    with open(DATA) as f:
        want = json.load(f)
    s = ServerProc(["-m", tiny_llama, *SERVER_ARGS]).wait_ready()
    try:
        got = run_scenario(s.url)
    finally:
        assert s.stop() == 0, s.output()
    assert got == {"solo": want["solo"], "parallel": want["parallel"]}
