"""Write tests/data/server-api-llamacpp.json: llama.cpp 0c1e570's own llama-server answers (status,
JSON body or the SSE events) to the requests of tests/server/server_api_cases.py, for the
embedding, infill, Anthropic Messages, Responses and rerank routes, on the bundled Qwen2.5-Coder
(and the random qwen3 reranker of tests/make_rerank_fixture.py). Greedy, flash attention off,
2 threads, one slot. tests/server/test_server_api_llamacpp.py sends the same requests to
pyllama's llama-server and compares field by field (ids, timestamps and timings excepted).
Run: LLAMA_SERVER=/work/llamacpp/build/bin/llama-server .venv/bin/python tests/make_server_fixture.py
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "server"))

from server_api_cases import CONFIGS, run_config  # noqa: E402


def main():
    exe = os.environ.get("LLAMA_SERVER", "/work/llamacpp/build/bin/llama-server")
    out = {}
    for name, (args, cases) in CONFIGS.items():
        out[name] = run_config([exe], args, cases)
        print(name, len(out[name]), "answers")
    with open(os.path.join(HERE, "data", "server-api-llamacpp.json"), "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main()
