"""Built-in agent tools (`--tools`, pyllama/server/tools_builtin.py) against llama.cpp's answers
to the same /tools requests (tests/data/llamacpp_tools_builtin.json, recorded from llama.cpp
0c1e570's llama-server by scripts/record_llamacpp_tools.py), and the safety rules: off by
default (403), localhost-only CORS with tools on, a runtime never falling back to the host."""
import json
import os
import shutil

import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from pyllama.server import tools_builtin as TB
from tools_builtin_cases import CASES, make_tree, normalize, sort_listing, substitute

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURE = os.path.join(HERE, "..", "data", "llamacpp_tools_builtin.json")
with open(FIXTURE, encoding="utf-8") as f:
    REF = json.load(f)
# std::regex's error texts are not Python's: only the prefix is compared
_PREFIX_ONLY = {"grep_bad_regex": "invalid regex: "}


@pytest.fixture(scope="module")
def client():
    app = Starlette(routes=TB.routes(TB.Tools(["all"])))
    with TestClient(app) as c:
        yield c


def test_tool_list_matches_llamacpp(client):
    r = client.get("/tools")
    assert r.status_code == 200
    assert r.json() == REF["tools"]


@pytest.mark.parametrize("name,body,headers,readback", CASES, ids=[c[0] for c in CASES])
def test_case_matches_llamacpp(client, tmp_path, name, body, headers, readback):
    root = str(tmp_path / "tree")
    os.makedirs(root)
    make_tree(root)
    r = client.post("/tools", json=substitute(body, root), headers=substitute(headers, root))
    ref = REF["cases"][name]
    assert r.status_code == ref["status"]
    got = normalize(r.json(), root)
    if name in _PREFIX_ONLY:
        assert got["error"].startswith(_PREFIX_ONLY[name]) and ref["body"]["error"].startswith(
            _PREFIX_ONLY[name])
    else:
        assert sort_listing(got) == sort_listing(ref["body"])
    for rel, text in ref["files"].items():
        p = os.path.join(root, rel)
        assert (open(p, encoding="utf-8").read() if os.path.exists(p) else None) == text
    shutil.rmtree(root)


def test_stream_matches_llamacpp(client):
    with client.stream("POST", "/tools", json={"tool": "exec_shell_command", "stream": True,
                                               "params": {"command": "echo a; echo b"}}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith(REF["stream"]["content_type"])
        events = [json.loads(ln[6:]) for ln in r.iter_lines() if ln.startswith("data: ")]
    # the chunking of a pipe read is not fixed: compare the text and the final event
    text = "".join(e.get("chunk", "") for e in events)
    ref = REF["stream"]["events"]
    assert text == "".join(e.get("chunk", "") for e in ref)
    assert events[-1] == ref[-1] == {"done": True}


def test_disabled_is_403():
    app = Starlette(routes=TB.routes(None))
    with TestClient(app) as c:
        for method in ("GET", "POST"):
            r = c.request(method, "/tools")
            assert r.status_code == 403
            assert r.json() == {"error": {"message": "this feature is disabled",
                                          "type": "feature_disabled"}}


def test_only_named_tools_are_enabled():
    tools = TB.Tools(["read_file", "grep_search"])
    assert [t.name for t in tools.tools] == ["read_file", "grep_search"]
    with pytest.raises(TB.ToolError, match='unknown tool "rm_rf". available tools: read_file'):
        TB.Tools(["rm_rf"])


def test_runtime_spec_checked_at_startup():
    with pytest.raises(TB.ToolError, match="unknown tool runtime: nope"):
        TB.make_runtime("nope")
    with pytest.raises(TB.ToolError, match="invalid ssh target"):
        TB.make_runtime("ssh:-oProxyCommand=x")
    assert TB.make_runtime("ssh:user@host").spec() == "ssh:user@host"


def test_runtime_argv_never_reparses_options():
    """The isolate argv: ssh batch/key-only with the command as one quoted word; exec -i only
    when stdin is needed."""
    ssh = TB.SshIO("u@h", cwd="/w")
    argv = ssh.build_argv(["sh", "-c", "echo 'x'"], False)
    assert argv[:9] == ["ssh", "-o", "BatchMode=yes", "-o", "PasswordAuthentication=no", "-o",
                        "KbdInteractiveAuthentication=no", "-o", "StrictHostKeyChecking=yes"]
    assert argv[9:] == ["-n", "u@h", "'sh' '-c' 'echo '\\''x'\\'''"]
    c = TB.ContainerIO("podman", "abc123")
    assert c.build_argv(["cat", "f"], True) == ["podman", "exec", "-i", "abc123", "cat", "f"]
    assert TB.valid_container_id("a.b-c_d") and not TB.valid_container_id("-x")
    assert not TB.valid_container_id("a b")


def test_glob_match_rules():
    assert TB.path_glob_match("*.cpp", "src/deep/a.cpp")
    assert not TB.path_glob_match("src/*.cpp", "src/a.cpp")     # auto-anchored "**/src/*.cpp"
    assert TB.path_glob_match("**/src/*.cpp", "x/src/a.cpp")
    assert TB.glob_match("a[!b]c", "axc") and not TB.glob_match("a[!b]c", "abc")
    assert TB.glob_match("a?c", "abc") and not TB.glob_match("a?c", "a/c")


def test_cors_localhost_default_with_tools():
    """llama.cpp's common_params_parse: tools or MCP servers without --cors-origins limit CORS to
    localhost; an explicit --cors-origins wins."""
    from tools._args import parse
    from tools.server import cors_origins
    assert cors_origins(parse("server", ["--tools", "all"])) == "localhost"
    assert cors_origins(parse("server", ["-ag"])) == "localhost"
    assert cors_origins(parse("server", ["--mcp-servers-json", "{}"])) == "localhost"
    assert cors_origins(parse("server", ["--tools", "all", "--cors-origins", "*"])) == "*"
    assert cors_origins(parse("server", [])) == "*"
