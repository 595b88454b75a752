"""Record llama.cpp's grammar test cases into tests/data/grammar/llamacpp-cases.json.

Reads, from llama.cpp's source tree (`bash scripts/build_llamacpp.sh src` prints where it is;
the tree is <path>/vendor/llama.cpp):
  tests/test-grammar-integration.cpp   every test_grammar / test_schema call: the grammar or
                                       schema, passing strings, failing strings
  tests/test-json-schema-to-grammar.cpp  every test({status, name, schema, grammar}) case
  grammars/*.gbnf                      the example grammars

    python tests/grammar/make_llamacpp_cases.py <llama.cpp tree>

C++ string expressions are evaluated here: raw strings R"delim(...)delim", ordinary "..."
literals with escapes, adjacent-literal and `+` concatenation, and token(N) (the integration
test's 0xff marker for a token id), which is stored as {"token": N}. The tests read only the
stored fixture.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "data", "grammar", "llamacpp-cases.json")


class Src:
    def __init__(self, text: str, pos: int = 0):
        self.t, self.p = text, pos

    def ws(self):
        t = self.t
        while True:
            while self.p < len(t) and t[self.p] in " \t\r\n":
                self.p += 1
            if t.startswith("//", self.p):
                self.p = t.index("\n", self.p)
            elif t.startswith("/*", self.p):
                self.p = t.index("*/", self.p) + 2
            else:
                return

    def peek(self, s: str) -> bool:
        self.ws()
        return self.t.startswith(s, self.p)

    def expect(self, s: str):
        self.ws()
        if not self.t.startswith(s, self.p):
            raise ValueError(f"expected {s!r} at {self.t[self.p:self.p + 60]!r}")
        self.p += len(s)

    def literal(self) -> str:
        self.ws()
        t = self.t
        if t.startswith('R"', self.p):
            open_ = t.index("(", self.p)
            delim = t[self.p + 2:open_]
            close = t.index(")" + delim + '"', open_)
            self.p = close + len(delim) + 2
            return t[open_ + 1:close]
        if t[self.p] != '"':
            raise ValueError(f"not a string at {t[self.p:self.p + 60]!r}")
        self.p += 1
        out = bytearray()
        while t[self.p] != '"':
            c = t[self.p]
            if c == "\\":
                e = t[self.p + 1]
                simple = {"n": 10, "t": 9, "r": 13, "\\": 92, '"': 34, "'": 39, "0": 0, "?": 63}
                if e == "x":
                    m = re.match(r"[0-9a-fA-F]+", t[self.p + 2:])
                    out.append(int(m.group(0), 16) & 0xFF)
                    self.p += 2 + len(m.group(0))
                    continue
                if e == "u" or e == "U":
                    n = 4 if e == "u" else 8
                    out += chr(int(t[self.p + 2:self.p + 2 + n], 16)).encode()
                    self.p += 2 + n
                    continue
                out.append(simple[e])
                self.p += 2
                continue
            out += c.encode()
            self.p += 1
        self.p += 1
        return out.decode("utf-8", "surrogateescape")

    def expr(self):
        """A string expression: a list of segments (str, or {"token": n})."""
        parts = []
        while True:
            self.ws()
            if self.t.startswith("token(", self.p):
                self.p += len("token(")
                m = re.match(r"\s*(\d+)\s*\)", self.t[self.p:])
                parts.append({"token": int(m.group(1))})
                self.p += m.end()
            elif self.t.startswith('"', self.p) or self.t.startswith('R"', self.p):
                s = self.literal()
                if parts and isinstance(parts[-1], str):
                    parts[-1] += s
                else:
                    parts.append(s)
            else:
                raise ValueError(f"bad expression at {self.t[self.p:self.p + 60]!r}")
            if self.peek("+"):
                self.expect("+")
                continue
            if self.peek('"') or self.peek('R"'):
                continue  # adjacent literals
            break
        return parts

    def string_list(self):
        self.expect("{")
        items = []
        while not self.peek("}"):
            items.append(self.expr())
            if self.peek(","):
                self.expect(",")
        self.expect("}")
        return items


def flat(parts):
    """A plain string when there are no token segments."""
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)
    return parts


def integration_cases(text: str):
    cases = []
    for m in re.finditer(r"\btest_(grammar|schema)\(", text):
        start = text.rfind("\n", 0, m.start())
        if text[start:m.start()].lstrip().startswith("//") or "static void" in text[start:m.start()]:
            continue
        s = Src(text, m.end())
        desc = flat(s.expr())
        s.expect(",")
        body = flat(s.expr())
        s.expect(",")
        passing = s.string_list()
        failing = []
        if s.peek(","):
            s.expect(",")
            failing = s.string_list()
        s.expect(")")
        cases.append({"kind": m.group(1), "desc": desc, "body": body,
                      "passing": [flat(x) for x in passing], "failing": [flat(x) for x in failing]})
    return cases


def schema_cases(text: str):
    cases = []
    for m in re.finditer(r"\btest\(\{", text):
        s = Src(text, m.end())
        s.ws()
        status = re.match(r"(SUCCESS|FAILURE)", text[s.p:]).group(1)
        s.p += len(status)
        s.expect(",")
        name = flat(s.expr())
        s.expect(",")
        schema = flat(s.expr())
        s.expect(",")
        grammar = flat(s.expr())
        cases.append({"status": status, "name": name, "schema": schema, "grammar": grammar})
    return cases


def main(tree: str):
    read = lambda *p: open(os.path.join(tree, *p), encoding="utf-8").read()
    data = {
        "source": "llama.cpp 0c1e570: tests/test-grammar-integration.cpp, "
                  "tests/test-json-schema-to-grammar.cpp, grammars/",
        "integration": integration_cases(read("tests", "test-grammar-integration.cpp")),
        "json_schema": schema_cases(read("tests", "test-json-schema-to-grammar.cpp")),
        "grammars": {f: read("grammars", f) for f in sorted(os.listdir(os.path.join(tree, "grammars")))
                     if f.endswith(".gbnf")},
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, ensure_ascii=False)
    print(f"{OUT}: {len(data['integration'])} integration cases, "
          f"{len(data['json_schema'])} schema cases, {len(data['grammars'])} grammars")


if __name__ == "__main__":
    main(sys.argv[1])
