"""Write tests/data/chat-parse-llamacpp.json: llama.cpp 0c1e570's chat-output parsing cases for the
common tool-call families, read from its source distribution: the templates of
models/templates/ and the `tst.test(...)` cases of tests/test-chat.cpp for them (model output,
tools, reasoning format, expected content / reasoning / tool calls). Cases that need a
conversation (continuation), a JSON schema or a partial parse are left out.
Run: python tests/make_chat_parse_fixture.py [<llama.cpp source dir>]
(default: the tree `bash scripts/build_llamacpp.sh src` unpacks)."""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = ["Qwen-Qwen2.5-7B-Instruct", "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use",
             "mistralai-Mistral-Nemo-Instruct-2407", "Mistral-Small-3.2-24B-Instruct-2506",
             "unsloth-mistral-Devstral-Small-2507", "mistralai-Ministral-3-14B-Reasoning-2512",
             "meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct",
             "meta-llama-Llama-3.3-70B-Instruct", "openai-gpt-oss-120b",
             "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"]
TOOL_NAMES = {"special_function_tool": "special_function",
              "special_function_tool_with_optional_param": "special_function_with_opt",
              "python_tool": "python"}
SKIP = (".messages(", ".json_schema(", ".continue_final_message(", ".is_partial(true)",
        ".grammar(", ".tool_choice(", ".parse_tool_calls(false)")


def source_dir() -> str:
    if len(sys.argv) > 1:
        return sys.argv[1]
    out = subprocess.run(["bash", os.path.join(HERE, "..", "scripts", "build_llamacpp.sh"),
                          "src"], capture_output=True, text=True, check=True).stdout
    return os.path.join(out.strip().splitlines()[-1], "vendor", "llama.cpp")


_ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def literals(text: str, i: int) -> tuple[str, int]:
    """Adjacent C++ string literals ("..." and R"d(...)d") starting at text[i] (after blanks)."""
    out, found = [], False
    while True:
        m = re.compile(r"\s*(?://[^\n]*\s*)*").match(text, i)
        i = m.end()
        if text.startswith('R"', i):
            j = text.index("(", i)
            delim = text[i + 2:j]
            end = text.index(")" + delim + '"', j)
            out.append(text[j + 1:end])
            i, found = end + len(delim) + 2, True
        elif text.startswith('"', i):
            i += 1
            buf = []
            while text[i] != '"':
                if text[i] == "\\":
                    buf.append(_ESC.get(text[i + 1], text[i + 1]))
                    i += 2
                else:
                    buf.append(text[i])
                    i += 1
            out.append("".join(buf))
            i, found = i + 1, True
        else:
            if not found:
                raise ValueError(f"no literal at {text[i:i + 40]!r}")
            return "".join(out), i


def messages(src: str) -> dict:
    """const common_chat_msg NAME = simple_assist_msg(lit, lit, ...) -> message dicts."""
    out = {}
    for m in re.finditer(r"const common_chat_msg (\w+)\s*=\s*simple_assist_msg\(", src):
        args, i = [], m.end()
        try:
            while True:
                lit, i = literals(src, i)
                args.append(lit)
                j = re.compile(r"\s*(/\*[^*]*\*/)?\s*").match(src, i).end()
                if src[j] == ",":
                    i = j + 1
                    i = re.compile(r"\s*(/\*[^*]*\*/)?\s*").match(src, i).end()
                    continue
                break
        except ValueError:
            continue
        args += [""] * (5 - len(args))
        content, reasoning, name, arguments, cid = args[:5]
        calls = [{"name": name, "arguments": arguments, "id": cid}] if name or cid else []
        out[m.group(1)] = {"content": content, "reasoning_content": reasoning,
                           "tool_calls": calls}
    return out


def _call_list(text: str, i: int) -> list[dict]:
    """`{ lit, lit[, lit] }, ...}` (expect_tool_calls' name, arguments, id) from text[i]."""
    calls = []
    ws = re.compile(r"\s*")
    while True:
        i = ws.match(text, i).end()
        if text[i] == "}":
            return calls
        assert text[i] == "{", text[i:i + 30]
        vals, i = [], i + 1
        while True:
            lit, i = literals(text, i)
            vals.append(lit)
            i = ws.match(text, i).end()
            if text[i] == ",":
                i = ws.match(text, i + 1).end()
                if text[i] == "}":
                    break
                continue
            break
        assert text[i] == "}", text[i:i + 30]
        calls.append({"name": vals[0], "arguments": vals[1] if len(vals) > 1 else "",
                      "id": vals[2] if len(vals) > 2 else ""})
        i = ws.match(text, i + 1).end()
        if text[i] == ",":
            i += 1


def cases(src: str, template: str, msgs: dict) -> list[dict]:
    at = src.index(f'"models/templates/{template}.jinja"')     # a peg_tester or a for list
    start = src.index("peg_tester(", at - len("peg_tester(") - 1)
    nxt = src.find("peg_tester(", start + 10)
    block = src[start:nxt if nxt > 0 else len(src)]
    out = []
    for m in re.finditer(r"tst\.test\(", block):
        try:
            text, i = literals(block, m.end())
        except ValueError:
            continue
        end = block.find(".run();", i)
        chain = block[i:end]
        if any(s in chain for s in SKIP):
            continue
        case = {"output": text, "tools": [], "reasoning_format": "none",
                "parallel_tool_calls": ".parallel_tool_calls(true)" in chain}
        t = re.search(r"\.tools\(\{(.*?)\}\)", chain, re.S)
        if t:
            case["tools"] = [TOOL_NAMES[n] for n in re.findall(r"\w+", t.group(1))
                             if n in TOOL_NAMES]
        r = re.search(r"\.reasoning_format\(COMMON_REASONING_FORMAT_(\w+)\)", chain)
        if r:
            case["reasoning_format"] = r.group(1).lower().replace("_", "-")
        e = re.search(r"\.expect\((\w+)\)", chain)
        want = dict(msgs[e.group(1)]) if e and e.group(1) in msgs else None
        if e and want is None:
            continue
        want = want or {"content": None, "reasoning_content": None, "tool_calls": None}
        for key, field in (("expect_content", "content"), ("expect_reasoning",
                                                          "reasoning_content")):
            k = chain.find(f".{key}(")
            if k >= 0:
                want[field] = literals(chain, k + len(key) + 2)[0]
        k = chain.find(".expect_tool_calls(")
        if k >= 0:
            try:
                want["tool_calls"] = _call_list(chain, chain.index("{", k) + 1)
            except (ValueError, AssertionError, IndexError):
                continue              # a call list this reader does not parse
        if all(v is None for v in want.values()):
            continue
        case["expect"] = want
        out.append(case)
    return out


def main():
    root = source_dir()
    src = open(os.path.join(root, "tests", "test-chat.cpp"), encoding="utf-8").read()
    msgs = messages(src)
    fixture = {}
    for name in TEMPLATES:
        with open(os.path.join(root, "models", "templates", name + ".jinja"),
                  encoding="utf-8") as f:
            source = f.read()
        fixture[name] = {"template": source, "cases": cases(src, name, msgs)}
    with open(os.path.join(HERE, "data", "chat-parse-llamacpp.json"), "w") as f:
        json.dump(fixture, f, indent=1, ensure_ascii=False)
    for name, v in fixture.items():
        print(f"{name}: {len(v['cases'])} cases")


if __name__ == "__main__":
    main()
