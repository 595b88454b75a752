"""The requests both llama-servers answer for the field-by-field comparison (recorded from
llama.cpp's by tests/make_server_fixture.py), and the runner shared by the recorder and the
test: start a server with the given arguments, send each request, keep status and body."""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.expanduser("~/.cache/pyllama")
QWEN = os.path.join(MODELS, "qwen2.5-coder-0.5b-instruct.gguf")
RERANK = os.path.join(os.path.dirname(HERE), "data", "rerank-qwen3.gguf")
COMMON = ["-np", "1", "-t", "2", "-fa", "off", "--temp", "0", "--no-webui"]
HI = [{"role": "user", "content": "Say hello"}]
TOOLS_A = [{"name": "get_weather", "description": "Get the weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}]
TOOLS_R = [{"type": "function", "name": "get_weather", "description": "Get the weather for a city",
            "parameters": TOOLS_A[0]["input_schema"]}]
ASK = "What is the weather in Paris? Use the tool."

EMBD = [
    ("POST", "/v1/embeddings", {"input": ["Hello world, this is a test.", "Le chat."]}),
    ("POST", "/v1/embeddings", {"input": "Hello", "encoding_format": "base64"}),
    ("POST", "/v1/embeddings", {"input": [[9707, 1879], [40, 1079]], "embd_normalize": -1}),
    ("POST", "/embedding", {"content": "Hello world"}),
    ("POST", "/v1/embeddings", {}),
    ("POST", "/v1/embeddings", {"input": ""}),
    ("POST", "/v1/embeddings", {"input": []}),
    ("POST", "/v1/embeddings", {"input": "x", "encoding_format": "hex"}),
    ("POST", "/v1/embeddings", {"input": [5] * 600}),
    ("POST", "/v1/embeddings", {"input": [1, 10 ** 9]}),
]
CHAT = [
    ("POST", "/infill", {"input_prefix": "def fibonacci(n):\n    ",
                         "input_suffix": "\n    return result\n", "n_predict": 16,
                         "input_extra": [{"filename": "utils.py", "text": "import math\n"}]}),
    ("POST", "/infill", {"input_prefix": "a", "input_suffix": "b", "input_extra": {}}),
    ("POST", "/infill", {"input_prefix": "a", "input_suffix": "b",
                         "input_extra": [{"filename": "x"}]}),
    ("POST", "/v1/messages", {"max_tokens": 8, "messages": HI, "system": "Be friendly."}),
    ("POST", "/v1/messages", {"max_tokens": 8, "messages": HI, "stream": True}),
    ("POST", "/v1/messages", {"max_tokens": 20, "messages": HI, "stop_sequences": ["!"]}),
    ("POST", "/v1/messages", {"max_tokens": 64, "tools": TOOLS_A,
                              "messages": [{"role": "user", "content": ASK}]}),
    ("POST", "/v1/messages/count_tokens", {"messages": HI, "system": "Be friendly."}),
    ("POST", "/v1/messages", {"max_tokens": 5}),
    ("POST", "/v1/responses", {"input": "Say hello", "max_output_tokens": 8,
                               "instructions": "Be brief."}),
    ("POST", "/v1/responses", {"input": "Say hello", "max_output_tokens": 8, "stream": True}),
    ("POST", "/v1/responses", {"input": ASK, "tools": TOOLS_R, "max_output_tokens": 64}),
    ("POST", "/v1/responses/input_tokens", {"input": "Say hello"}),
    ("POST", "/v1/responses", {}),
    ("POST", "/v1/responses", {"input": [{"foo": 1}]}),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": ASK}],
                                      "tools": [{"type": "function", "function": {
                                          k: v for k, v in TOOLS_R[0].items() if k != "type"}}],
                                      "max_tokens": 64}),
]
RERANK_CASES = [
    ("POST", "/v1/rerank", {"query": "what is a cat", "documents": [
        "a cat is a small animal", "the stock market fell", "cats purr and meow"]}),
    ("POST", "/rerank", {"query": "what is a cat", "top_n": 1,
                         "documents": ["a cat is a small animal", "the stock market fell"]}),
    ("POST", "/reranking", {"query": "what is a cat", "texts": ["a cat", "stocks"],
                            "return_text": True}),
    ("POST", "/v1/rerank", {"documents": ["a"]}),
    ("POST", "/v1/rerank", {"query": "q", "documents": []}),
]
CONFIGS = {
    "embd": (["-m", QWEN, "-c", "1024", "--embeddings", "--pooling", "mean"] + COMMON, EMBD),
    "chat": (["-m", QWEN, "-c", "2048"] + COMMON, CHAT),
    "rerank": (["-m", RERANK, "-c", "256", "--rerank"] + COMMON, RERANK_CASES),
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _sse(text: str) -> list:
    """SSE frames -> [[event name or None, data (JSON or the raw string)], ...]."""
    out = []
    for frame in text.split("\n\n"):
        name, data = None, None
        for line in frame.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                raw = line[6:]
                try:
                    data = json.loads(raw)
                except ValueError:
                    data = raw
        if data is not None:
            out.append([name, data])
    return out


def run_config(cmd: list[str], args: list[str], cases: list, env: dict | None = None) -> list:
    """Start `cmd + args --port P`, answer every case: [{status, body | events}]."""
    port = _port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen(cmd + args + ["--port", str(port)], stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise RuntimeError(open(log.name).read()[-3000:])
            try:
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() - t0 > 180:
                raise RuntimeError("server not ready")
            time.sleep(0.2)
        out = []
        for method, path, body in cases:
            r = httpx.request(method, url + path, json=body, timeout=300)
            if r.headers.get("content-type", "").startswith("text/event-stream"):
                out.append({"status": r.status_code, "events": _sse(r.text)})
            else:
                try:
                    out.append({"status": r.status_code, "body": r.json()})
                except ValueError:
                    out.append({"status": r.status_code, "text": r.text})
        return out
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
