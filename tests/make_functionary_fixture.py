"""Write tests/data/functionary-llamacpp.json: what llama.cpp 0c1e570 makes of the Functionary
v3.2 template (models/templates/meetkai-functionary-medium-v3.2.jinja, its specialized handler
common/parsers/functionary-v3-2.cpp) for requests with and without tools, tool_choice auto /
required / none, parallel_tool_calls off and on: the generation prompt, the grammar (text, lazy,
triggers), the chat parser's message for a set of model outputs (whole, as at the end of a
generation, and partial, as while streaming; or its error) and whether the grammar accepts a set
of outputs (llama.cpp's grammar engine, the generation prompt fed first as the server prefills
it; a lazy grammar from its trigger on). Reached through tests/chat_params_probe.cpp, compiled
here against the llama.cpp build's libllama-common / libllama.
Run: LLAMACPP_BUILD=/work/llamacpp/build python tests/make_functionary_fixture.py [<llama.cpp src>]
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from make_chat_parse_fixture import source_dir  # noqa: E402

TEMPLATE = "meetkai-functionary-medium-v3.2"
TEST = {"type": "function", "function": {"name": "test", "description": "", "parameters": {
    "type": "object", "properties": {"success": {"type": "boolean", "const": True}},
    "required": ["success"]}}}
PYTHON = {"type": "function", "function": {
    "name": "python", "description": "Runs code in an ipython interpreter.",
    "parameters": {"type": "object", "properties": {"code": {"type": "string",
                                                             "description": "The code."}},
                   "required": ["code"]}}}
SPECIAL = {"type": "function", "function": {
    "name": "special_function", "description": "I'm special",
    "parameters": {"type": "object", "properties": {"arg1": {"type": "integer"},
                                                    "arg2": {"type": "string"}},
                   "required": ["arg1"]}}}
OUTPUTS = [
    "all\nHello, world!\nWhat's up?", "all\n", "", "al", "all\n  spaced  \n",
    "all\nHello\u00e9 \U0001F600", "Hello",
    'test\n{"success": true}', 'test\n{ "success" : true }', 'test\n{"success": true}\n',
    'test\n{"success": true} ', "te", "test", "test\n", "test\n{", 'test\n{"success": tru',
    'test\n{"success": true', 'test\n{"success": true}test\n{"success": true}',
    'test\n{"success": true}python\n{"code": "1"}', 'test\n{"success": true}>>>all\nDone',
    'python\n{"code": "print(\\"hi\\")\\n"}', 'python\n{"code": "x = \\u00e9"}',
    'python\n{"code": "a\\', 'python\n{"code": "a\\u00', 'python\n{"code": "print(1)"}\n',
    'python\nprint("hello world")', 'test\n[1, 2]', 'test\n"str"',
    'test\n{"a": -1.5e3, "b": [true, false, null], "c": {}}', 'test\n{"a": 12',
    "all\nHi>>", "all\nHi>>>", 'all\nHi>>>python\n{"code": "1"}',
    'all\nHi there\ntest\n{"success": true}', 'all\nSure!\npython\n{"code": "print(1)"}',
    'unknown\n{"x": 1}', 'special_function\n{"arg1": 1}',
]
MATCHES = [
    'test\n{"success": true}', 'test\n{ "success" : true }', 'test\n{"success": false}',
    'test\n{"success": true}test\n{"success": true}', 'test\n{"success": true}\n',
    'test\n{"success": true}python\n{"code": "x"}', 'python\n{"code": "print(1)"}',
    'python\n{"code": 1}', 'python\nprint(1)', 'all\nHello', "all\n", "",
    'all\nHi\ntest\n{"success": true}', 'all\nHi>>>test\n{"success": true}',
    'all\nHi>>test\n{"success": true}', 'all\n>test\n{"success": true}',
    'all\nHi\ntest\n{"success": true}python\n{"code": "x"}', '>>>test\n{"success": true}',
    'special_function\n{"arg1": 1}', 'special_function\n{"arg1": 1, "arg2": "x"}',
    'special_function\n{"arg2": "x"}', 'special_function\n{"arg1": 1.5}',
]


def cases() -> list[dict]:
    out = []
    for tools in ([TEST, PYTHON], [SPECIAL]):
        for choice in ("auto", "required", "none"):
            for parallel in (False, True):
                out.append({"tools": tools, "tool_choice": choice, "parallel_tool_calls": parallel,
                            "outputs": OUTPUTS, "matches": MATCHES})
    out.append({"tools": [], "tool_choice": "auto", "parallel_tool_calls": False,
                "outputs": OUTPUTS, "matches": []})
    return out


def main():
    src = source_dir()
    build = os.environ.get("LLAMACPP_BUILD", "/work/llamacpp/build")
    exe = os.path.join(tempfile.mkdtemp(), "probe")
    inc = [f"-I{src}/{d}" for d in ("common", "include", "ggml/include", "vendor", "src")]
    subprocess.run(["g++", "-std=c++17", "-O1", *inc, os.path.join(HERE, "chat_params_probe.cpp"),
                    "-o", exe, f"-L{build}/bin", "-lllama-common", "-lllama", "-lggml",
                    "-lggml-base", f"-Wl,-rpath,{build}/bin"], check=True)
    with open(os.path.join(src, "models", "templates", TEMPLATE + ".jinja")) as f:
        tpl = f.read()
    cs = cases()
    r = subprocess.run([exe], input=json.dumps({"template": tpl, "cases": cs}),
                       capture_output=True, text=True, check=True)
    got = json.loads(r.stdout)
    out = {"template_name": TEMPLATE, "template": tpl,
           "cases": [{**c, "expect": e} for c, e in zip(cs, got)]}
    path = os.path.join(HERE, "data", "functionary-llamacpp.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
    print(len(cs), "cases ->", path)


if __name__ == "__main__":
    main()
