"""tools/server.py: llama.cpp server flags → ServerConfig (no server started)."""
import importlib

import pytest


@pytest.fixture(scope="module")
def tool():
    from pyllama.__main__ import tools_package
    tools_package()
    return importlib.import_module("pyllama.tools.server"), \
        importlib.import_module("pyllama.tools._args")


def config(tool, tiny_path, *argv):
    srv, args = tool
    return srv.to_config(args.parse("server", ["-m", tiny_path, *argv]))


def test_defaults_are_llama_server_auto(tool, tiny_model_path):
    c = config(tool, tiny_model_path("llama"))
    assert c.n_slots == 4 and c.unified and c.port == 8080 and c.host == "127.0.0.1"
    assert c.sampling is None and c.cache_prompt and c.endpoint_slots and not c.endpoint_metrics
    assert c.numerics == "invariant"         # results independent of slots and batching
    assert config(tool, tiny_model_path("llama"), "--numerics", "llama.cpp").numerics == "llama.cpp"
    assert c.kv_k_center is None
    assert config(tool, tiny_model_path("llama"), "--kv-k-center", "off").kv_k_center is False


def test_flags_map_onto_the_config(tool, tiny_model_path, tmp_path):
    keys = tmp_path / "keys.txt"
    keys.write_text("# comment\nk3\n\nk4\n")
    c = config(tool, tiny_model_path("llama"), "-np", "3", "-no-kvu", "--temp", "0.2", "-r",
               "STOP", "-n", "5", "--api-key", "a,b", "--api-key-file", str(keys), "-a", "x,y",
               "-c", "2048", "--metrics", "--no-slots", "--slot-save-path", str(tmp_path),
               "--no-cache-prompt", "-to", "30", "--chat-template", "chatml", "-sp")
    assert c.n_slots == 3 and not c.unified and c.n_ctx == 2048
    assert c.sampling.temp == 0.2 and "temp" in c.sampling.user_set
    assert c.reverse_prompts == ["STOP"] and c.n_predict == 5 and c.timeout == 30
    assert c.api_keys == ["a", "b", "k3", "k4"] and c.alias == ["x", "y"]
    assert c.endpoint_metrics and not c.endpoint_slots and c.slot_save_path == str(tmp_path)
    assert not c.cache_prompt and c.chat_template == "chatml" and c.special
