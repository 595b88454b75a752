"""Write tests/data/parallel-calls-llamacpp.json: what llama.cpp 0c1e570's chat parser
(common_chat_templates_apply + common_chat_peg_parse, as llama-server runs them on a finished
generation) makes of outputs holding two tool calls, with parallel_tool_calls false and true,
for the tool-call families pyllama parses (templates of models/templates/). The parser is
reached through tests/chat_parse_probe.cpp, compiled here against the llama.cpp build's
libllama-common (test-chat.cpp has no such case).
Run: LLAMACPP_BUILD=/work/llamacpp/build python tests/make_parallel_calls_fixture.py [<llama.cpp src>]
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from make_chat_parse_fixture import source_dir  # noqa: E402

ARG1 = {"type": "object", "properties": {"arg1": {"type": "integer"}}, "required": ["arg1"]}
TOOLS = [{"type": "function", "function": {"name": "special_function", "description": "f",
                                            "parameters": ARG1}},
         {"type": "function", "function": {"name": "other_function", "description": "g",
                                            "parameters": ARG1}}]
HERMES = ('<tool_call>\n{"name": "special_function", "arguments": {"arg1": 1}}\n</tool_call>\n'
          '<tool_call>\n{"name": "other_function", "arguments": {"arg1": 2}}\n</tool_call>')
OUTPUTS = {
    "Qwen-Qwen2.5-7B-Instruct": [HERMES, "Sure." + HERMES, HERMES + "\nDone."],
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": [HERMES],
    "mistralai-Mistral-Nemo-Instruct-2407": [
        '[TOOL_CALLS][{"name": "special_function", "arguments": {"arg1": 1}, "id": "123456789"}, '
        '{"name": "other_function", "arguments": {"arg1": 2}, "id": "987654321"}]'],
    "Mistral-Small-3.2-24B-Instruct-2506": [
        "[TOOL_CALLS]special_function[CALL_ID]000000001[ARGS]{\"arg1\": 1}"
        "[TOOL_CALLS]other_function[CALL_ID]000000002[ARGS]{\"arg1\": 2}"],
}


def main():
    src = source_dir()
    build = os.environ.get("LLAMACPP_BUILD", "/work/llamacpp/build")
    exe = os.path.join(tempfile.mkdtemp(), "probe")
    inc = [f"-I{src}/{d}" for d in ("common", "include", "ggml/include", "vendor")]
    subprocess.run(["g++", "-std=c++17", *inc, os.path.join(HERE, "chat_parse_probe.cpp"),
                    "-o", exe, f"-L{build}/bin", "-lllama-common", "-lllama", "-lggml",
                    "-lggml-base", f"-Wl,-rpath,{build}/bin"], check=True)
    out = {}
    for name, outputs in OUTPUTS.items():
        with open(os.path.join(src, "models", "templates", name + ".jinja")) as f:
            tpl = f.read()
        cases = [{"input": o, "tools": TOOLS, "parallel_tool_calls": p}
                 for o in outputs for p in (False, True)]
        r = subprocess.run([exe], input=json.dumps({"template": tpl, "cases": cases}),
                           capture_output=True, text=True, check=True)
        out[name] = {"template": tpl, "cases": [{**c, "expect": e} for c, e in
                                                zip(cases, json.loads(r.stdout))]}
    path = os.path.join(HERE, "data", "parallel-calls-llamacpp.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(sum(len(v["cases"]) for v in out.values()), "cases ->", path)


if __name__ == "__main__":
    main()
