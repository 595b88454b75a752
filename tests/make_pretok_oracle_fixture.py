"""Record tests/data/pretok-oracle-llamacpp.json.gz: every tokenizer.ggml.pre name llama.cpp
knows, tokenized by llama.cpp itself (llama-cpp-python, vocab only) on one vocab.

Most pre-tokenizer names have no shipped test vocab (kimi-k2, deepseek-v3, afmoe, ...). For each
name in llama_vocab::impl::load (parsed from src/llama-vocab.cpp) this writes, with the `gguf`
package, a copy of models/ggml-vocab-llama-bpe.gguf whose tokenizer.ggml.pre is that name, loads
it in llama.cpp and tokenizes STRINGS (add_special=false, parse_special=false); a name llama.cpp
refuses is recorded as refused. Stored: the results and the part of the vocab the strings can
reach (as make_vocab_models_fixture.py prunes it).

    python tests/make_pretok_oracle_fixture.py [ORACLE_PYTHON]     # default /work/oracle/bin/python
The oracle step runs as `ORACLE_PYTHON this_file --oracle GGUF_DIR OUT_JSON`.
"""
import gzip
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LLAMA_CPP = os.path.expanduser(
    "~/.cache/pyllama-oracle/llama_cpp_python-0.3.36/vendor/llama.cpp")
SRC = os.path.join(LLAMA_CPP, "src", "llama-vocab.cpp")
BASE = os.path.join(LLAMA_CPP, "models", "ggml-vocab-llama-bpe.gguf")
OUT = os.path.join(HERE, "data", "pretok-oracle-llamacpp.json.gz")
ORACLE_PYTHON = "/work/oracle/bin/python"

STRINGS = [
    "Hello world", " Hello World!", "I'm you're it's WE'LL they've DON'T she'D",
    "1 12 123 1234 12345 123456 1234567 3.14159 1,000,000", "x=1+2*3^4|5~6$7<8>9`",
    "你好世界，这是一个测试。", "こんにちは、カタカナ ひらがな", "안녕하세요 세계", "漢字かな交じり文abc",
    "Hello, world!... (x) [y] {z} <a> \"q\" 'r'", "a  b\t\tc\n\n\nd   \n  e\r\n\r\n f",
    "   leading and trailing   ", "🦙🔥 👍🏽 🇺🇸 ❤️", "Äpfel Über naïve café Ωmega Kelvin ﬁne",
    "e\u0301 a\u0300\u0301 Zoë", "مرحبا بالعالم नमस्ते दुनिया", "Привет, мир! Ёжик",
    "camelCaseWord HTTPServer iPhone XMLHttpRequest", "ab'cd'EF 's 'T", "\n", " ", "  ",
    "<sentinel:12> IMGIMGABZ", "tab\tsep\tvalues\t", "a.b,c;d:e!f?g", "…。，、।۔،", "$$$ ### @@@",
    "def f(x):\n    return x**2  # square\n", "１２３ＡＢＣ！", "line1\nline2\n\nline4",
]


def _cstr(s: str) -> str:
    b, i, res = s.encode(), 0, bytearray()
    esc = {"n": b"\n", "r": b"\r", "t": b"\t", "\\": b"\\", '"': b'"', "'": b"'"}
    while i < len(b):
        if b[i] == 0x5C:
            res += esc[chr(b[i + 1])]
            i += 2
        else:
            res.append(b[i])
            i += 1
    return res.decode()


def _src() -> str:
    with open(SRC, encoding="utf-8") as f:
        return f.read()


def cpp_types() -> dict[str, list[str]]:
    """LLAMA_VOCAB_PRE_TYPE_X (without prefix; 'DEFAULT' for default:) -> regex_exprs, from
    llm_tokenizer_bpe's constructor."""
    src = _src()
    a = src.index("struct llm_tokenizer_bpe : llm_tokenizer {")
    body = src[a:src.index("std::vector<std::string> regex_exprs;", a)]
    out = {}
    for m in re.finditer(r"((?:\s*(?:case LLAMA_VOCAB_PRE_TYPE_\w+|default):)+)(.*?)break;",
                         body, re.S):
        blk = m.group(2)
        i = blk.index("regex_exprs = {")
        lits = [_cstr(re.match(r'"((?:[^"\\]|\\.)*)"', ln.strip()).group(1))
                for ln in blk[i:blk.index("};", i)].split("\n") if ln.strip().startswith('"')]
        for ty, dflt in re.findall(r"LLAMA_VOCAB_PRE_TYPE_(\w+)|(default)", m.group(1)):
            out[ty or "DEFAULT"] = lits
    return out


def cpp_names() -> dict[str, tuple[str, dict[str, bool]]]:
    """tokenizer.ggml.pre -> (type, options set), from llama_vocab::impl::load."""
    src = _src()
    a = src.index('} else if (tokenizer_pre == "default") {')
    body = src[a:src.index("unknown pre-tokenizer type", a)]
    out = {}
    for blk in body.split("} else if (")[1:]:
        ty = re.search(r"pre_type = LLAMA_VOCAB_PRE_TYPE_(\w+);", blk).group(1)
        opts = {k: v == "true" for k, v in re.findall(
            r"\b(clean_spaces|ignore_merges|add_bos|add_sep|escape_whitespaces) = "
            r"(true|false);", blk)}
        if "special_bos_id = LLAMA_TOKEN_NULL" in blk:
            opts["no_bos"] = True
        for n in re.findall(r'tokenizer_pre == "([^"]+)"', blk):
            out[n] = (ty, opts)
    return out


def oracle(path: str, out_json: str) -> None:
    """(oracle python) tokenize STRINGS with the vocab of one GGUF."""
    import llama_cpp
    try:
        m = llama_cpp.Llama(path, vocab_only=True, verbose=False)
    except Exception as e:          # llama.cpp refused the vocab
        res = {"refused": str(e)}
    else:
        res = {"ids": [m.tokenize(s.encode(), add_bos=False, special=False) for s in STRINGS]}
    with open(out_json, "w") as f:
        json.dump(res, f)


def write_ggufs(names, out_dir: str) -> None:
    import gguf
    r = gguf.GGUFReader(BASE)
    fields = [f for f in r.fields.values() if not f.name.startswith("GGUF.")]
    for name in names:
        w = gguf.GGUFWriter(os.path.join(out_dir, f"{name}.gguf"), "llama")
        for f in fields:
            if f.name == "general.architecture":
                continue
            val = name if f.name == "tokenizer.ggml.pre" else f.contents()
            sub = f.types[1] if len(f.types) > 1 else None
            w.add_key_value(f.name, val, f.types[0], sub_type=sub)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def main(oracle_python: str = ORACLE_PYTHON) -> None:
    sys.path.insert(0, os.path.dirname(HERE))
    sys.path.insert(0, HERE)
    import make_vocab_models_fixture as fx
    from pyllama.gguf import GGUFReader
    names = sorted(cpp_names()) + ["no-such-pre"]
    res = {}
    with tempfile.TemporaryDirectory() as tmp:
        write_ggufs(names, tmp)
        for name in names:          # one process each: llama.cpp may abort on a vocab
            out = os.path.join(tmp, name + ".json")
            p = subprocess.run([oracle_python, os.path.abspath(__file__), "--oracle",
                                os.path.join(tmp, name + ".gguf"), out],
                               capture_output=True, text=True)
            if p.returncode == 0:
                with open(out) as f:
                    res[name] = json.load(f)
            else:
                tail = (p.stderr.strip().splitlines() or ["?"])[-1]
                res[name] = {"refused": f"llama.cpp exited {p.returncode}: {tail}"}
    vocab = fx.prune(GGUFReader(BASE).metadata, STRINGS)
    data = {"source": "llama.cpp 0c1e570 via llama-cpp-python 0.3.36, vocab of "
                      "models/ggml-vocab-llama-bpe.gguf with tokenizer.ggml.pre replaced",
            "strings": STRINGS, "vocab": vocab, "results": res}
    with gzip.GzipFile(OUT, "wb", mtime=0) as f:
        f.write(json.dumps(data, ensure_ascii=False).encode())
    print(OUT, os.path.getsize(OUT), "bytes;", sum("refused" in v for v in res.values()),
          "refused of", len(res))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--oracle"]:
        oracle(*sys.argv[2:4])
    else:
        main(*sys.argv[1:])
