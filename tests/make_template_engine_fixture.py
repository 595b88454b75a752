"""Write tests/data/template-engine-llamacpp.json: prompts that llama.cpp 0c1e570's own
llama-server renders (POST /apply-template) where its jinja runtime (common/jinja) and jinja2
differ: `+` with an undefined or none operand beside a string, a string beside a number or
bool, map/selectattr filters that give arrays (tojson of them), content parts (text joined; media
without a projector, unknown or missing part types, in part order: the statuses and messages), on a
small probe template and on
models/templates' fireworks-ai-llama-3-firefunction-v2 (`"\\n" + functions`, never defined)
and llama-cpp-deepseek-r1 (`tools | map(attribute='function') | tojson`), plus one template
error (undefined + number) with llama.cpp's status and error body. Each case stores its
template source, the request, and the bos/eos text and date variables the server rendered with.
tests/vocab/test_template_engine.py renders the same with pyllama.vocab.chat.
Run: LLAMA_SERVER=/work/llamacpp/build/bin/llama-server python tests/make_template_engine_fixture.py
"""
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = os.path.join(HERE, "data", "rerank-qwen3.gguf")
OUT = os.path.join(HERE, "data", "template-engine-llamacpp.json")

PROBE = (
    "{%- for m in messages -%}\n"
    "{%- if m.content == 'err' -%}{{- m.missing + 1 -}}{%- endif -%}\n"
    "{{- 'u:' + m.missing + '|' + m.role + ':' + m.content + '|n:' + none + '|' + none + 'n'"
    " + '|i:' + 5 + '|' + 7 + 'i' + '|f:' + 1.5 + '|' + 2.0 + '|' + 0.1 + '|' + 100.25"
    " + '|b:' + true + '|' + false + '|sum:' ~ (1 + 2) ~ '|' ~ (1 + 2.5) ~ '|l:'"
    " ~ ([1] + [2]) | length ~ '\\n' -}}\n"
    "{%- endfor -%}\n"
    "{{- (messages | map(attribute='role') | tojson) + '|' -}}\n"
    "{{- (messages | selectattr('role', 'equalto', 'user') | map(attribute='content')"
    " | join(',')) -}}\n"
    "{%- if add_generation_prompt -%}{{- '\\nA:' -}}{%- endif -%}\n")

TEST_TOOL = {"type": "function", "function": {
    "name": "test", "description": "",
    "parameters": {"type": "object", "properties": {"success": {"type": "boolean", "const": True}},
                   "required": ["success"]}}}
HI = [{"role": "user", "content": "What is today?"}]
TWO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"},
       {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}]

# content parts (oaicompat_chat_params_parse): text parts joined, media without a projector,
# an unknown part type (after a good message; before an image), a part without a type
PARTS = [{"messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                   {"type": "text", "text": "b"}]}]},
         {"messages": [{"role": "user", "content": [
             {"type": "text", "text": "a"},
             {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]}]},
         {"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {
             "data": "AAAA", "format": "wav"}}]}]},
         {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}]},
                       {"role": "user", "content": [{"type": "file", "file": {}}]}]},
         {"messages": [{"role": "user", "content": [{"type": "file", "file": {}},
                                                   {"type": "image_url", "image_url": {"url": "x"}}]}]},
         {"messages": [{"role": "user", "content": [{"text": "a"}]}]}]


def templates_dir() -> str:
    src = subprocess.check_output(["bash", os.path.join(HERE, "..", "scripts", "build_llamacpp.sh"),
                                   "src"], text=True).strip()
    return os.path.join(src, "vendor", "llama.cpp", "models", "templates")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def record(exe: str, source: str, requests: list) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(source)
    port = _port()
    proc = subprocess.Popen([exe, "-m", MODEL, "--jinja", "--chat-template-file", f.name,
                             "-c", "512", "-t", "1", "-np", "1", "--no-webui",
                             "--port", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None or time.monotonic() - t0 > 120:
                raise SystemExit("llama.cpp's llama-server did not start")
            try:
                with urllib.request.urlopen(url + "/props", timeout=2) as r:
                    props = json.load(r)
                break
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.3)
        now = datetime.datetime.now()
        out = {"source": source, "bos_token": props["bos_token"], "eos_token": props["eos_token"],
               "datetime": now.strftime("%b %d %Y"), "date_string": now.strftime("%d %b %Y"),
               "cases": []}
        for body in requests:
            status, resp = _post(url + "/apply-template", body)
            out["cases"].append({"request": body, "status": status, "response": resp})
            print(status, json.dumps(resp)[:200], file=sys.stderr)
        return out
    finally:
        proc.terminate()
        proc.wait(30)
        os.unlink(f.name)


def main():
    exe = os.environ.get("LLAMA_SERVER", "/work/llamacpp/build/bin/llama-server")
    d = templates_dir()

    def model_template(name):
        with open(os.path.join(d, name), encoding="utf-8") as f:
            return f.read()

    with_tools = [{"messages": HI}, {"messages": HI, "tools": []},
                  {"messages": HI, "tools": [TEST_TOOL]}]
    out = {
        "probe": record(exe, PROBE, [{"messages": TWO}, {"messages": HI,
                                                         "add_generation_prompt": False},
                                     {"messages": [{"role": "user", "content": "err"}]},
                                     *PARTS]),
        "fireworks-ai-llama-3-firefunction-v2.jinja": record(
            exe, model_template("fireworks-ai-llama-3-firefunction-v2.jinja"), with_tools),
        "llama-cpp-deepseek-r1.jinja": record(
            exe, model_template("llama-cpp-deepseek-r1.jinja"), with_tools),
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"llama_cpp": "0c1e570", **out}, f, indent=1, ensure_ascii=False)
        f.write("\n")


if __name__ == "__main__":
    main()
