"""Functionary v3.2 (meetkai) tool calls, as llama.cpp 0c1e570 handles them
(common/parsers/functionary-v3-2.cpp): the template's generation prompt ends with `>>>`, after
which the model names a recipient: `all\\n<text>` for content, `<tool name>\\n<JSON arguments>`
for a call.

The parser is llama.cpp's PEG parser for this format run the way common_chat_peg_parse runs it
(lenient: input that ends inside a literal, a string or the open content "needs more input"
and still yields what it has captured):

    no tools / tool_choice none:  "all\\n" content(rest)
    tools:                        choice over
        required, parallel:       "all\\n" content(until ">>>") tools | tools
        required:                 "all\\n" content(until ">>>") tool | tools
        auto, parallel:           "all\\n" content(until ">>>") tools | "all\\n" content(rest) | tools
        auto:                     "all\\n" content(until ">>>") tool | "all\\n" content(rest) | tool
    tool:  tool_open(name "\\n") tool_args(JSON value);  tools: tool+;  then the end of input

A call after content never parses (nothing consumes the `>>>` before it), so such text stays
content, as in llama.cpp; an output the whole parser refuses (llama.cpp: a 500 "does not match
the expected peg-native format") is kept as content here (`parse` reports it in `ok`).

The grammar (`grammar`) is llama.cpp's for the same choices without the generation prompt
(llama.cpp prefills the prompt's `>>>` into its grammar; pyllama's starts after it): required
`("all\\n" until tool | tools)` (parallel: `tools` after the content), auto a lazy `tools` rule
triggered by the pattern `>>>(?!all)`. Recorded from llama.cpp: tests/data/functionary-llamacpp.json.
"""
from __future__ import annotations

FAMILY = "functionary-v3.2"
DELIM = ">>>"
TRIGGER = ">>>(?!all)"
PARSE_ERROR = "The model produced output that does not match the expected peg-native format"


def is_template(src: str) -> bool:
    """common_chat_try_specialized_template's test for Functionary v3.2."""
    return ">>>all" in src and ">>>${recipient}" in src


# --------------------------------------------------------------------------- PEG primitives
# A parser is f(text, pos) -> (status, end, nodes); nodes: [(tag, start, end, children)]
OK, MORE, FAIL = 0, 1, 2
CONTENT, TOOL_OPEN, TOOL_NAME, TOOL_ARGS = "content", "tool-open", "tool-name", "tool-args"


def _lit(s: str):
    def p(t, i):
        for k, ch in enumerate(s):
            if i + k >= len(t):
                return MORE, i + k, []
            if t[i + k] != ch:
                return FAIL, i, []
        return OK, i + len(s), []
    return p


def _until(delim: str):
    """Everything before the first `delim`, or before a partial `delim` at the end."""
    def p(t, i):
        j = i
        n = len(t)
        while j < n:
            j = t.find(delim[0], j)
            if j < 0:
                break
            if t.startswith(delim, j) or (n - j < len(delim) and delim.startswith(t[j:])):
                return OK, j, []
            j += 1
        return MORE, len(t), []
    return p


def _rest(t, i):
    return MORE, len(t), []


def _end(t, i):
    return (OK if i >= len(t) else FAIL), i, []


def _seq(*ps):
    def p(t, i):
        pos, nodes = i, []
        for q in ps:
            st, end, ns = q(t, pos)
            if st == FAIL:
                return FAIL, end, []
            nodes += ns
            if st == MORE:
                return MORE, end, nodes
            pos = end
        return OK, pos, nodes
    return p


def _choice(*ps):
    def p(t, i):
        for q in ps:
            r = q(t, i)
            if r[0] != FAIL:
                return r
        return FAIL, i, []
    return p


def _rep(q, lo: int = 0, hi: int = -1):
    def p(t, i):
        pos, n, nodes = i, 0, []
        while hi < 0 or n < hi:
            if pos >= len(t):
                break
            st, end, ns = q(t, pos)
            if st == OK:
                if end == pos:
                    break
                nodes += ns
                pos, n = end, n + 1
                continue
            if st == MORE:
                return MORE, end, nodes + ns
            break
        if n < lo:
            return (MORE if pos >= len(t) else FAIL), pos, nodes
        return OK, pos, nodes
    return p


def _tag(tag: str, q, atomic: bool = False):
    def p(t, i):
        st, end, ns = q(t, i)
        if st == FAIL:
            return st, end, ns
        if st == MORE and atomic:
            return st, end, []
        return st, end, [(tag, i, end, ns)]
    return p


# --------------------------------------------------------------------------- JSON (peg-parser.cpp)
_SPACE = " \t\n\v\f\r"


def _ws(t, i):
    while i < len(t) and t[i] in _SPACE:
        i += 1
    return OK, i, []


def _chars(test, lo: int, hi: int):
    """common_peg_chars_parser: lo..hi characters passing `test`; at the end of the input
    before hi of them, more input may follow."""
    def p(t, i):
        n, pos = 0, i
        while hi < 0 or n < hi:
            if pos >= len(t):
                return (OK if n >= lo else MORE), pos, []
            if not test(t[pos]):
                break
            pos, n = pos + 1, n + 1
        if n < lo:
            return FAIL, i, []
        return OK, pos, []
    return p


def _not(q):
    def p(t, i):
        st, _, _ = q(t, i)
        if st == OK:
            return FAIL, i, []
        if st == MORE:
            return MORE, i, []
        return OK, i, []
    return p


def _opt(q):
    return _rep(q, 0, 1)


_HEX = set("0123456789abcdefABCDEF")


def _string_body(t, i):
    """common_peg_string_parser with delimiter '"': up to (not including) the closing quote."""
    pos = i
    while pos < len(t):
        c = t[pos]
        if c == '"':
            return OK, pos, []
        if c == "\\":
            if pos + 1 >= len(t):
                return MORE, pos, []
            e = t[pos + 1]
            if e in '"\\/bfnrt':
                pos += 2
            elif e == "u":
                for k in range(4):
                    if pos + 2 + k >= len(t):
                        return MORE, pos, []
                    if t[pos + 2 + k] not in _HEX:
                        return FAIL, i, []
                pos += 6
            else:
                return FAIL, i, []
        else:
            pos += 1
    return MORE, pos, []


def _json_value(t, i):
    return _VALUE(t, i)


_digit = lambda c: "0" <= c <= "9"   # noqa: E731
_JSTRING = _seq(_lit('"'), _string_body, _lit('"'))
_NUMBER = _seq(_opt(_lit("-")),
               _choice(_lit("0"), _seq(_chars(lambda c: "1" <= c <= "9", 1, 1),
                                       _chars(_digit, 0, -1))),
               _opt(_seq(_lit("."), _chars(_digit, 1, -1))),
               _opt(_seq(_choice(_lit("e"), _lit("E")), _opt(_chars(lambda c: c in "+-", 1, 1)),
                         _chars(_digit, 1, -1))),
               _not(_chars(lambda c: c in "0123456789.eE+-", 1, 1)))
_MEMBER = _seq(_JSTRING, _ws, _lit(":"), _ws, _json_value)
_OBJECT = _seq(_lit("{"), _ws, _choice(_lit("}"), _seq(_MEMBER, _rep(_seq(_ws, _lit(","), _ws,
                                                                          _MEMBER)),
                                                      _ws, _lit("}"))))
_ARRAY = _seq(_lit("["), _ws, _choice(_lit("]"), _seq(_json_value, _rep(_seq(_ws, _lit(","), _ws,
                                                                            _json_value)),
                                                     _ws, _lit("]"))))
_VALUE = _choice(_OBJECT, _ARRAY, _JSTRING, _NUMBER, _choice(_lit("true"), _lit("false")),
                 _lit("null"))


# --------------------------------------------------------------------------- the parser
def _parser(names, choice: str, parallel: bool):
    content_until_end = _seq(_lit("all\n"), _tag(CONTENT, _rest))
    if not names or choice == "none":
        return _seq(content_until_end, _end)
    tool = _choice(*[_seq(_tag(TOOL_OPEN, _seq(_tag(TOOL_NAME, _lit(n), True), _lit("\n")), True),
                          _tag(TOOL_ARGS, _VALUE)) for n in names])
    tools = _rep(tool, 1)
    content_until_tool = _seq(_lit("all\n"), _tag(CONTENT, _until(DELIM)))
    if choice == "required":
        alts = (_seq(content_until_tool, tools if parallel else tool), tools)
    elif parallel:
        alts = (_seq(content_until_tool, tools), content_until_end, tools)
    else:
        alts = (_seq(content_until_tool, tool), content_until_end, tool)
    return _seq(_choice(*alts), _end)


def _visit(nodes, t, out):
    for tag, s, e, children in nodes:
        text = t[s:e]
        if tag == CONTENT:
            out["content"] += text
        elif tag == TOOL_OPEN:
            out["pending"] = True
        elif tag == TOOL_NAME and out["pending"]:
            out["calls"].append([text.rstrip(" \t\n\r"), "{"])
            out["pending"] = False
        elif tag == TOOL_ARGS and out["calls"]:
            args = text.rstrip(" \t\n\r")
            if args.startswith("{"):
                out["calls"][-1][1] = args
        _visit(children, t, out)


def parse(text: str, names, choice: str = "auto", parallel: bool = False,
          partial: bool = False):
    """(content, [(name, arguments)], ok) of one output (the text after the prompt's `>>>`).
    `names`: the request's tool names (none: no tools); `choice`: "auto" | "required" |
    "none". ok is False where llama.cpp's final parse fails (a partial parse then yields
    nothing, as there)."""
    st, end, nodes = _parser(list(names or ()), choice, parallel)(text, 0)
    if st == FAIL:
        if partial:
            return "", [], True
        body = text[4:] if text.startswith("all\n") else text
        return body, [], False
    out = {"content": "", "calls": [], "pending": False}
    _visit(nodes, text, out)
    return out["content"], [tuple(c) for c in out["calls"]], True


# --------------------------------------------------------------------------- the grammar
def _excluding(name: str, delim: str) -> dict:
    """gbnf_excluding_grammar for one string: any text in which `delim` does not occur (an
    automaton over the matched prefix length, every state accepting)."""
    def nxt(d, c):
        s = delim[:d] + c
        for k in range(min(len(s), len(delim)), 0, -1):
            if s.endswith(delim[:k]):
                return k
        return 0
    state = lambda d: name if d == 0 else f"{name}-{d:02d}"   # noqa: E731
    rules = {}
    chars = sorted(set(delim))
    for d in range(len(delim)):
        buckets, specific = {}, []
        for c in chars:
            k = nxt(d, c)
            if k != 0:
                specific.append(c)           # not the default transition back to the start
            if 0 < k < len(delim):           # k == len: the forbidden string, no alternative
                buckets.setdefault(k, []).append(c)
        rhs = "|"
        for k in sorted(buckets):
            rhs += f" [{_cls(buckets[k])}] {state(k)} |"
        rhs += f" [^{_cls(specific)}] {state(0)}"
        rules[state(d)] = rhs
    return rules


def _cls(chars) -> str:
    return "".join("\\" + c if c in "]\\^-" else c for c in chars)


def grammar(tools: list, choice: str = "required", parallel: bool = False,
            only: str | None = None) -> tuple[str, bool, tuple]:
    """(GBNF, lazy, triggers) of the calls over these tools (all, or just `only`): required
    (or a named function) forces a call, possibly after `all\\n` content; auto is lazy, started
    by the pattern `>>>(?!all)` (the trigger is listed in both cases, as llama.cpp does)."""
    from pyllama.grammar.json_schema import Builder, Converter, _SchemaFail
    from .schemas import invalid, tool_functions
    conv = Converter()
    names = []
    for name, fn in tool_functions(tools, only):
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        try:
            node = Builder(params).build()
        except _SchemaFail as e:
            raise invalid(f"tool '{name}': JSON schema conversion failed: {e}") from None
        schema = conv.visit(node, f"tool-{name}-schema")
        names.append(conv.add_rule(f"tool-{name}", f'("{_esc(name)}" "\\n") {schema}'))
    if not names:
        raise invalid(f"tool_choice names a function that is not in 'tools': {only}")
    if conv.errors:
        raise invalid("JSON schema conversion failed:\n" + "\n".join(conv.errors))
    conv.add_rule("tools", f"({' | '.join(names)})+")
    if choice == "auto":
        conv.add_rule("root", "tools")
        return conv.format_grammar(), True, (("pattern", TRIGGER),)
    for rule, rhs in _excluding("until-0", DELIM).items():
        conv.add_rule(rule, rhs)
    one = "tools" if parallel else f"({' | '.join(names)})"
    conv.add_rule("root", f'("all\\n" until-0 {one} | tools)')
    # llama.cpp sets the trigger either way (reported in generation_settings; unused unless lazy)
    return conv.format_grammar(), False, (("pattern", TRIGGER),)


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
