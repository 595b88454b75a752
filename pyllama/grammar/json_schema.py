"""JSON schema -> GBNF, llama.cpp's conversion (common/json-schema.cpp builds a typed schema
tree, common/json-schema-to-grammar.cpp turns it into rules): the same rule names and text,
so a schema gives the grammar llama.cpp gives.

Supported: type (and arrays of types), enum, const, anyOf/oneOf/allOf, local $ref into
$defs/definitions (any "#/..." path), properties/required/additionalProperties (required
properties in schema order, then the optional ones), items/prefixItems/minItems/maxItems,
string minLength/maxLength/pattern (a regex, anchored ^...$, to a grammar)/format (date, time,
date-time, uuid), integer minimum/maximum/exclusiveMinimum/exclusiveMaximum (exact digit-range
rules), number, boolean, null. Other keywords are ignored, as in llama.cpp. A pattern without
a grammar equivalent degrades to any string (with a warning); an invalid one is an error.
"""
import json
import logging
import math
import re

from pyllama.errors import GrammarError

log = logging.getLogger("pyllama.grammar")

INT64_MIN, INT64_MAX, INT_MAX = -(2 ** 63), 2 ** 63 - 1, 2 ** 31 - 1

SPACE_RULE = '| " " | "\\n"{1,2} [ \\t]{0,20}'

# name -> (content, deps)
PRIMITIVE_RULES = {
    "boolean": ('("true" | "false")', []),
    "decimal-part": ("[0-9]{1,16}", []),
    "integral-part": ("[0] | [1-9] [0-9]{0,15}", []),
    "number": ('("-"? integral-part) ("." decimal-part)? ([eE] [-+]? integral-part)?',
               ["integral-part", "decimal-part"]),
    "integer": ('("-"? integral-part)', ["integral-part"]),
    "value": ("object | array | string | number | boolean | null",
              ["object", "array", "string", "number", "boolean", "null"]),
    "object": ('"{" space ( string ":" space value ("," space string ":" space value)* )? '
               'space "}"', ["string", "value"]),
    "array": ('"[" space ( value ("," space value)* )? space "]"', ["value"]),
    "uuid": ('"\\"" [0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} '
             '"-" [0-9a-fA-F]{12} "\\""', []),
    "char": ('[^"\\\\\\x7F\\x00-\\x1F] | [\\\\] (["\\\\bfnrt] | "u" [0-9a-fA-F]{4})', []),
    "string": ('"\\"" char* "\\""', ["char"]),
    "null": ('"null"', []),
}
STRING_FORMAT_RULES = {
    "date": ('[0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [1-2] [0-9] | "3" [0-1] )',
             []),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{3} )? '
             '( "Z" | ( "+" | "-" ) ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )', []),
    "date-time": ('date "T" time', ["date", "time"]),
    "date-string": ('"\\"" date "\\""', ["date"]),
    "time-string": ('"\\"" time "\\""', ["time"]),
    "date-time-string": ('"\\"" date-time "\\""', ["date-time"]),
}
RESERVED_NAMES = {"root"} | set(PRIMITIVE_RULES) | set(STRING_FORMAT_RULES)

INVALID_RULE_CHARS_RE = re.compile(r"[^a-zA-Z0-9-]+")
GRAMMAR_LITERAL_ESCAPE_RE = re.compile(r'[\r\n"\\]')
GRAMMAR_LITERAL_ESCAPES = {"\r": "\\r", "\n": "\\n", '"': '\\"', "-": "\\-", "]": "\\]",
                           "\\": "\\\\"}
MAX_PATTERN_DEPTH = 100
NON_LITERAL_SET = set("|.()[]{}*+?^$")
ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS = set("^$.[]()|{}*+?")


def dump(value) -> str:
    """common_json::dump(): compact, keys in document order, UTF-8 kept."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def format_literal(literal: str) -> str:
    return '"' + GRAMMAR_LITERAL_ESCAPE_RE.sub(lambda m: GRAMMAR_LITERAL_ESCAPES[m.group(0)],
                                               literal) + '"'


def gbnf_escape_length(pattern: str, pos: int) -> int:
    """Length of a GBNF escape at pos (as llama-grammar.cpp's parse_char reads it), else 0."""
    if pos + 1 >= len(pattern) or pattern[pos] != "\\":
        return 0
    e = pattern[pos + 1]
    n_hex = {"x": 2, "u": 4, "U": 8}.get(e)
    if n_hex is None:
        return 2 if e in 'trn\\"[]-' else 0
    if pos + 2 + n_hex > len(pattern):
        return 0
    if not all(h in "0123456789abcdefABCDEF" for h in pattern[pos + 2:pos + 2 + n_hex]):
        return 0
    return 2 + n_hex


# -- the schema tree (common/json-schema.cpp) ----------------------------------------------------
class Node:
    def __init__(self, kind, **fields):
        self.kind = kind
        self.__dict__.update(fields)


class _SchemaFail(Exception):
    pass


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class Builder:
    def __init__(self, root):
        self.root = root
        self.refs: dict = {}
        self.pending: list = []

    @staticmethod
    def fail(path, msg):
        raise _SchemaFail(f"JSON schema error at {path}: {msg}")

    def count(self, schema, key, path, default):
        if key not in schema:
            return default
        v = schema[key]
        if not _is_int(v) or v < 0 or v > INT_MAX:
            self.fail(path, key + " must be a non-negative integer")
        return v

    def bound(self, schema, key, path, round_up):
        v = schema[key]
        if _is_int(v):
            return max(INT64_MIN, min(INT64_MAX, v))
        if not _is_num(v):
            self.fail(path, key + " must be a number")
        if math.isnan(v) or math.isinf(v):
            self.fail(path, key + " must be a finite number")
        return int(math.ceil(v) if round_up else math.floor(v))

    def format_of(self, schema, path):
        if "format" not in schema:
            return None
        f = schema["format"]
        if not isinstance(f, str):
            self.fail(path, "format must be a string")
        if f in ("date", "time", "date-time"):
            return f
        if f == "uuid" or (len(f) == 5 and f.startswith("uuid") and "1" <= f[4] <= "5"):
            return "uuid"
        return None

    def resolve(self, ref, path):
        target = self.root
        for sel in ref[1:].split("/")[1:]:
            if isinstance(target, dict) and sel in target:
                target = target[sel]
            elif isinstance(target, list):
                idx = int(sel) if re.fullmatch(r"\s*\+?\d+", sel) else len(target)
                if idx >= len(target):
                    self.fail(path, f"cannot resolve $ref {ref}, {sel} is out of range")
                target = target[idx]
            else:
                self.fail(path, f"cannot resolve $ref {ref}, {sel} not found")
        return target

    def ref(self, value, path):
        if not isinstance(value, str):
            self.fail(path, "$ref must be a string")
        if not value.startswith("#/"):
            self.fail(path, f"unsupported $ref {value}, only references into the same document "
                            "are supported")
        if value not in self.refs:
            self.refs[value] = None
            self.refs[value] = self.node(self.resolve(value, path), value)
        n = Node("ref", ref=value, target=None)
        self.pending.append(n)
        return n

    def alternatives(self, kind, alts, path):
        if not isinstance(alts, list):
            self.fail(path, "must be an array of schemas")
        if not alts:
            self.fail(path, "must not be empty")
        return Node(kind, children=[self.node(a, f"{path}/{i}") for i, a in enumerate(alts)])

    def object(self, schema, path):
        required = set()
        if isinstance(schema.get("required"), list):
            required = {n for n in schema["required"] if isinstance(n, str)}
        props, additional = [], None
        if "properties" in schema:
            p = schema["properties"]
            if not isinstance(p, dict):
                self.fail(path, "properties must be an object")
            for name, sub in p.items():
                props.append((name, self.node(sub, f"{path}/properties/{name}"), name in required))
        if "additionalProperties" in schema:
            a = schema["additionalProperties"]
            if isinstance(a, bool):
                if a:
                    additional = Node("any")
            elif isinstance(a, dict):
                additional = self.node(a, path + "/additionalProperties")
            else:
                self.fail(path, "additionalProperties must be a boolean or a schema")
        elif "properties" not in schema:
            additional = Node("any")
        return Node("object", properties=props, additional=additional)

    def array(self, schema, path):
        if "items" in schema or "prefixItems" in schema:
            key = "items" if "items" in schema else "prefixItems"
            items = schema[key]
            if isinstance(items, list):
                return Node("tuple", items=[self.node(it, f"{path}/{key}/{i}")
                                            for i, it in enumerate(items)])
            item = self.node(items, f"{path}/{key}")
        else:
            item = Node("any")
        return Node("array", items=item, min_items=self.count(schema, "minItems", path, 0),
                    max_items=self.count(schema, "maxItems", path, -1))

    def string(self, schema, path):
        pattern = ""
        if "pattern" in schema:
            pattern = schema["pattern"]
            if not isinstance(pattern, str):
                self.fail(path, "pattern must be a string")
        return Node("string", pattern=pattern, format=self.format_of(schema, path),
                    min_length=self.count(schema, "minLength", path, 0),
                    max_length=self.count(schema, "maxLength", path, -1))

    def integer(self, schema, path):
        lo, hi = INT64_MIN, INT64_MAX
        if "minimum" in schema:
            lo = self.bound(schema, "minimum", path, True)
        elif "exclusiveMinimum" in schema:
            lo = self.bound(schema, "exclusiveMinimum", path, False) + 1
        if "maximum" in schema:
            hi = self.bound(schema, "maximum", path, False)
        elif "exclusiveMaximum" in schema:
            hi = self.bound(schema, "exclusiveMaximum", path, True) - 1
        return Node("integer", minimum=lo, maximum=hi)

    def node(self, schema, path):
        if not isinstance(schema, dict):
            self.fail(path, "schema must be an object")
        if "$ref" in schema:
            return self.ref(schema["$ref"], path)
        if "oneOf" in schema or "anyOf" in schema:
            key = "oneOf" if "oneOf" in schema else "anyOf"
            return self.alternatives("any_of", schema[key], f"{path}/{key}")
        t = schema.get("type")
        if isinstance(t, list):
            if not t:
                self.fail(path, "type must not be empty")
            return Node("any_of", children=[self.node({**schema, "type": x}, f"{path}/type/{i}")
                                            for i, x in enumerate(t)])
        if "const" in schema:
            return Node("const", value=schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                self.fail(path, "enum must be a non-empty array")
            return Node("enum", values=list(values))
        if t is not None and not isinstance(t, str):
            self.fail(path, "type must be a string or an array of strings")
        t = t or ""
        has_props = "properties" in schema or (
            "additionalProperties" in schema and schema["additionalProperties"] is not True)
        if not t:
            if has_props:
                return self.object(schema, path)
            if "allOf" in schema:
                return self.alternatives("all_of", schema["allOf"], path + "/allOf")
            if "items" in schema or "prefixItems" in schema:
                return self.array(schema, path)
            if ("pattern" in schema or "minLength" in schema or "maxLength" in schema
                    or self.format_of(schema, path) is not None):
                return self.string(schema, path)
            return Node("any")
        if t == "object":
            if not has_props and "allOf" in schema:
                return self.alternatives("all_of", schema["allOf"], path + "/allOf")
            return self.object(schema, path)
        if t == "string":
            if "allOf" in schema:
                return self.alternatives("all_of", schema["allOf"], path + "/allOf")
            return self.string(schema, path)
        if t == "array":
            return self.array(schema, path)
        if t == "integer":
            return self.integer(schema, path)
        if t in ("number", "boolean", "null"):
            return Node(t)
        self.fail(path, "unrecognized type " + t)

    def build(self):
        root = self.node(self.root, "#")
        for n in self.pending:
            n.target = self.refs[n.ref]
        return root


# -- rules ------------------------------------------------------------------------------------
def build_repetition(item_rule, min_items, max_items, separator_rule=""):
    has_max = max_items != INT_MAX
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return item_rule + "?"
    if not separator_rule:
        if min_items == 1 and not has_max:
            return item_rule + "+"
        if min_items == 0 and not has_max:
            return item_rule + "*"
        return item_rule + "{" + str(min_items) + "," + (str(max_items) if has_max else "") + "}"
    result = item_rule + " " + build_repetition(
        "(" + separator_rule + " " + item_rule + ")", 0 if min_items == 0 else min_items - 1,
        max_items - 1 if has_max else max_items)
    if min_items == 0:
        result = "(" + result + ")?"
    return result


def build_min_max_int(min_value, max_value, out, decimals_left=16, top_level=True):
    has_min, has_max = min_value != INT64_MIN, max_value != INT64_MAX

    def digit_range(a, b):
        out.append("[" + (a if a == b else a + "-" + b) + "]")

    def more_digits(lo, hi):
        out.append("[0-9]")
        if lo == hi == 1:
            return
        out.append("{" + str(lo))
        if hi != lo:
            out.append(",")
            if hi != INT_MAX:
                out.append(str(hi))
        out.append("}")

    def uniform_range(a, b):
        i = 0
        while i < len(a) and i < len(b) and a[i] == b[i]:
            i += 1
        if i > 0:
            out.append('"' + a[:i] + '"')
        if i < len(a) and i < len(b):
            if i > 0:
                out.append(" ")
            sub_len = len(a) - i - 1
            if sub_len > 0:
                a_sub, b_sub = a[i + 1:], b[i + 1:]
                zeros, nines = "0" * sub_len, "9" * sub_len
                to_reached = False
                out.append("(")
                if a_sub == zeros:
                    digit_range(a[i], chr(ord(b[i]) - 1))
                    out.append(" ")
                    more_digits(sub_len, sub_len)
                else:
                    out.append("[" + a[i] + "] ")
                    out.append("(")
                    uniform_range(a_sub, nines)
                    out.append(")")
                    if ord(a[i]) < ord(b[i]) - 1:
                        out.append(" | ")
                        if b_sub == nines:
                            digit_range(chr(ord(a[i]) + 1), b[i])
                            to_reached = True
                        else:
                            digit_range(chr(ord(a[i]) + 1), chr(ord(b[i]) - 1))
                        out.append(" ")
                        more_digits(sub_len, sub_len)
                if not to_reached:
                    out.append(" | ")
                    digit_range(b[i], b[i])
                    out.append(" ")
                    uniform_range(zeros, b_sub)
                out.append(")")
            else:
                out.append("[" + a[i] + "-" + b[i] + "]")

    if has_min and has_max:
        if min_value < 0 and max_value < 0:
            out.append('"-" (')
            build_min_max_int(-max_value, -min_value, out, decimals_left, True)
            out.append(")")
            return
        if min_value < 0:
            out.append('"-" (')
            build_min_max_int(0, -min_value, out, decimals_left, True)
            out.append(") | ")
            min_value = 0
        min_s, max_s = str(min_value), str(max_value)
        for digits in range(len(min_s), len(max_s)):
            uniform_range(min_s, "9" * digits)
            min_s = "1" + "0" * digits
            out.append(" | ")
        uniform_range(min_s, max_s)
        return

    less_decimals = max(decimals_left - 1, 1)
    if has_min:
        if min_value < 0:
            out.append('"-" (')
            build_min_max_int(INT64_MIN, -min_value, out, decimals_left, False)
            out.append(") | [0] | [1-9] ")
            more_digits(0, decimals_left - 1)
        elif min_value == 0:
            if top_level:
                out.append("[0] | [1-9] ")
                more_digits(0, less_decimals)
            else:
                more_digits(1, decimals_left)
        elif min_value <= 9:
            c = chr(ord("0") + min_value)
            range_start = "1" if top_level else "0"
            if c > range_start:
                digit_range(range_start, chr(ord(c) - 1))
                out.append(" ")
                more_digits(1, less_decimals)
                out.append(" | ")
            digit_range(c, "9")
            out.append(" ")
            more_digits(0, less_decimals)
        else:
            min_s = str(min_value)
            n, c = len(min_s), min_s[0]
            if c > "1":
                digit_range("1" if top_level else "0", chr(ord(c) - 1))
                out.append(" ")
                more_digits(n, less_decimals)
                out.append(" | ")
            digit_range(c, c)
            out.append(" (")
            build_min_max_int(int(min_s[1:]), INT64_MAX, out, less_decimals, False)
            out.append(")")
            if c < "9":
                out.append(" | ")
                digit_range(chr(ord(c) + 1), "9")
                out.append(" ")
                more_digits(n - 1, less_decimals)
        return
    if has_max:
        if max_value >= 0:
            if top_level:
                out.append('"-" [1-9] ')
                more_digits(0, less_decimals)
                out.append(" | ")
            build_min_max_int(0, max_value, out, decimals_left, True)
        else:
            out.append('"-" (')
            build_min_max_int(-max_value, INT64_MAX, out, decimals_left, False)
            out.append(")")
        return
    raise GrammarError("At least one of min_value or max_value must be set")


class _Unsupported(Exception):
    pass


class _Invalid(Exception):
    pass


class Converter:
    def __init__(self, dotall: bool = False):
        self.dotall = dotall
        self.rules: dict[str, str] = {"space": SPACE_RULE}
        self.refs_being_resolved: set = set()
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def add_rule(self, name: str, rule: str) -> str:
        esc = INVALID_RULE_CHARS_RE.sub("-", name)
        if esc not in self.rules or self.rules[esc] == rule:
            self.rules[esc] = rule
            return esc
        i = 0
        while f"{esc}{i}" in self.rules and self.rules[f"{esc}{i}"] != rule:
            i += 1
        key = f"{esc}{i}"
        self.rules[key] = rule
        return key

    def add_primitive(self, name: str, rule) -> str:
        content, deps = rule
        n = self.add_rule(name, content)
        for dep in deps:
            dep_rule = PRIMITIVE_RULES.get(dep) or STRING_FORMAT_RULES.get(dep)
            if dep_rule is None:
                self.errors.append(f"Rule {dep} not known")
                continue
            if dep not in self.rules:
                self.add_primitive(dep, dep_rule)
        return n

    def union(self, name, alts) -> str:
        return " | ".join(self.visit(a, name + ("alternative-" if not name else "-") + str(i))
                          for i, a in enumerate(alts))

    # -- patterns -------------------------------------------------------------------------
    def visit_pattern(self, pattern: str, name: str) -> str:
        snapshot = dict(self.rules)
        try:
            return self.pattern_to_rule(pattern, name)
        except _Unsupported as e:
            self.rules = snapshot
            self.warnings.append(f"pattern {pattern} is not supported ({e}), accepting any string")
            return self.add_rule(name, self.add_primitive("string", PRIMITIVE_RULES["string"]))
        except _Invalid as e:
            self.rules = snapshot
            self.errors.append(f"Invalid pattern {pattern}: {e}")
            return ""

    def pattern_to_rule(self, pattern: str, name: str) -> str:
        if len(pattern) < 2 or pattern[0] != "^" or pattern[-1] != "$":
            raise _Unsupported("not anchored with '^' and '$'")
        sub = pattern[1:-1]
        sub_rule_ids: dict[str, str] = {}
        length = len(sub)
        st = {"i": 0, "depth": 0}

        def to_rule(ls):
            s, is_lit = ls
            return '"' + s + '"' if is_lit else s

        def transform():
            seq = []

            def get_dot():
                rule = "[\\U00000000-\\U0010FFFF]" if self.dotall else "[^\\x0A\\x0D]"
                return self.add_rule("dot", rule)

            def join_seq():
                ret, literal = [], ""
                for s, is_lit in seq:
                    if is_lit:
                        literal += s
                    else:
                        if literal:
                            ret.append((literal, True))
                            literal = ""
                        ret.append((s, False))
                if literal:
                    ret.append((literal, True))
                return " ".join(to_rule(x) for x in ret), False

            while st["i"] < length:
                i = st["i"]
                c = sub[i]
                if c == ".":
                    seq.append((get_dot(), False))
                    st["i"] += 1
                elif c == "(":
                    st["i"] += 1
                    i = st["i"]
                    if i < length and sub[i] == "?":
                        if i + 1 < length and sub[i + 1] == ":":
                            st["i"] += 2
                        else:
                            raise _Unsupported("unsupported group syntax")
                    st["depth"] += 1
                    if st["depth"] > MAX_PATTERN_DEPTH:
                        raise _Unsupported("pattern nesting too deep")
                    seq.append(("(" + to_rule(transform()) + ")", False))
                elif c == ")":
                    st["i"] += 1
                    if st["depth"] == 0:
                        raise _Invalid("unbalanced parentheses")
                    st["depth"] -= 1
                    return join_seq()
                elif c in "^$":
                    raise _Unsupported("anchor inside the pattern")
                elif c == "[":
                    sq = c
                    i += 1
                    while i < length and sub[i] != "]":
                        if sub[i] == "\\":
                            n = gbnf_escape_length(sub, i)
                            if n == 0:
                                raise _Unsupported("unsupported escape in character class: "
                                                   + sub[i:i + 2])
                            sq += sub[i:i + n]
                            i += n
                        else:
                            sq += sub[i]
                            i += 1
                    if i >= length:
                        raise _Invalid("unterminated character class")
                    st["i"] = i + 1
                    seq.append((sq + "]", False))
                elif c == "|":
                    seq.append(("|", False))
                    st["i"] += 1
                elif c in "*+?":
                    if not seq:
                        raise _Invalid("nothing to repeat")
                    seq[-1] = (to_rule(seq[-1]) + c, False)
                    st["i"] += 1
                elif c == "{":
                    curly = c
                    i += 1
                    while i < length and sub[i] != "}":
                        curly += sub[i]
                        i += 1
                    if i >= length:
                        raise _Unsupported("unterminated curly brackets")
                    st["i"] = i + 1
                    nums = curly[1:].split(",")
                    lo, hi = 0, INT_MAX
                    if len(nums) not in (1, 2):
                        raise _Unsupported("wrong number of values in curly brackets")
                    if len(nums) == 1:
                        lo = hi = _stoi(nums[0])
                    else:
                        if nums[0]:
                            lo = _stoi(nums[0])
                        if nums[1]:
                            hi = _stoi(nums[1])
                    if not seq:
                        raise _Invalid("nothing to repeat")
                    s, is_lit = seq[-1]
                    if not is_lit:
                        if s not in sub_rule_ids:
                            sub_rule_ids[s] = ""
                        if not sub_rule_ids[s]:
                            sub_rule_ids[s] = self.add_rule(f"{name}-{len(sub_rule_ids)}", s)
                        s = sub_rule_ids[s]
                    seq[-1] = (build_repetition('"' + s + '"' if is_lit else s, lo, hi, ""), False)
                else:
                    literal = ""
                    while i < length:
                        if sub[i] == "\\":
                            if i == length - 1:
                                raise _Invalid("trailing backslash")
                            nxt = sub[i + 1]
                            if nxt in ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS:
                                literal += nxt
                                i += 2
                            else:
                                n = gbnf_escape_length(sub, i)
                                if n == 0:
                                    raise _Unsupported("unsupported escape: " + sub[i:i + 2])
                                literal += sub[i:i + n]
                                i += n
                        elif sub[i] == '"':
                            literal += '\\"'
                            i += 1
                        elif sub[i] not in NON_LITERAL_SET and (
                                i == length - 1 or not literal or sub[i + 1] == "."
                                or sub[i + 1] not in NON_LITERAL_SET):
                            literal += sub[i]
                            i += 1
                        else:
                            break
                    if not literal:
                        raise _Unsupported("unsupported character: " + c)
                    st["i"] = i
                    seq.append((literal, True))
            return join_seq()

        rule = to_rule(transform())
        if st["depth"] != 0:
            raise _Invalid("unbalanced parentheses")
        return self.add_rule(name, '"\\"" (' + rule + ') "\\""')

    def not_strings(self, strings) -> str:
        """A JSON string that is none of `strings` (a trie over their code points)."""
        nodes = [[{}, -1]]  # [children by code point, pattern index]
        for k, w in enumerate(strings):
            cur = 0
            for ch in w:
                nxt = nodes[cur][0].get(ord(ch))
                if nxt is None:
                    nodes.append([{}, -1])
                    nxt = nodes[cur][0][ord(ch)] = len(nodes) - 1
                cur = nxt
            if nodes[cur][1] < 0:
                nodes[cur][1] = k
        char_rule = self.add_primitive("char", PRIMITIVE_RULES["char"])
        out = ['["] ( ']

        def visit(idx):
            children = nodes[idx][0]
            rejects, first = "", True
            for cpt in sorted(children):
                child = children[cpt]
                c = chr(cpt)
                rejects += c
                if not first:
                    out.append(" | ")
                first = False
                out.append("[" + c + "]")
                if nodes[child][0]:
                    out.append(" (")
                    visit(child)
                    out.append(")")
                else:
                    out.append(" " + char_rule + "+")
            if children:
                out.append(' | [^"' + rejects + "] " + char_rule + "*")

        visit(0)
        out.append(" )")
        if nodes[0][1] < 0:
            out.append("?")
        out.append(' ["]')
        return "".join(out)

    def resolve_ref(self, node) -> str:
        ref = node.ref
        frag = ref[ref.index("#") + 1:] if "#" in ref else ref
        ref_name = "ref" + re.sub(r"[^a-zA-Z0-9-]+", "-", frag)
        if ref_name not in self.rules and ref not in self.refs_being_resolved:
            if node.target is None:
                self.errors.append("Unresolved $ref " + ref)
                return ""
            self.refs_being_resolved.add(ref)
            ref_name = self.visit(node.target, ref_name)
            self.refs_being_resolved.discard(ref)
        return ref_name

    def object_rule(self, properties, required, name, additional) -> str:
        req, opt, kv, names = [], [], {}, []
        dash = "" if not name else "-"
        for prop_name, prop in properties:
            prop_rule = self.visit(prop, name + dash + prop_name)
            kv[prop_name] = self.add_rule(name + dash + prop_name + "-kv",
                                          format_literal(dump(prop_name)) + ' space ":" space '
                                          + prop_rule)
            (req if prop_name in required else opt).append(prop_name)
            names.append(prop_name)
        if additional is not None:
            sub_name = name + dash + "additional"
            value_rule = self.visit(additional, sub_name + "-value") if additional.kind != "any" \
                else self.add_primitive("value", PRIMITIVE_RULES["value"])
            key_rule = self.add_primitive("string", PRIMITIVE_RULES["string"]) if not names \
                else self.add_rule(sub_name + "-k", self.not_strings(names))
            kv["*"] = self.add_rule(sub_name + "-kv", key_rule + ' ":" space ' + value_rule)
            opt.append("*")
        if not req and not opt:
            return '"{" space "}"'
        rule = '"{" space ' + ' "," space '.join(kv[p] for p in req)
        if opt:
            rule += " ("
            if req:
                rule += ' "," space ( '

            def recursive_refs(ks, first_is_optional):
                if not ks:
                    return ""
                k = ks[0]
                kv_name = kv[k]
                comma_ref = '( "," space ' + kv_name + " )"
                if first_is_optional:
                    res = comma_ref + ("*" if k == "*" else "?")
                else:
                    res = kv_name + (" " + comma_ref + "*" if k == "*" else "")
                if len(ks) > 1:
                    res += " " + self.add_rule(name + dash + k + "-rest",
                                               recursive_refs(ks[1:], True))
                return res

            rule += " | ".join(recursive_refs(opt[i:], False) for i in range(len(opt)))
            if req:
                rule += " )"
            rule += " )?"
        return rule + ' space "}"'

    def visit_primitive(self, rule_name, type_):
        return self.add_primitive("root" if rule_name == "root" else type_, PRIMITIVE_RULES[type_])

    def visit_all_of(self, node, name, rule_name) -> str:
        required, properties, enum_values = set(), [], {}

        def add_component(comp, is_required):
            if comp.kind == "ref":
                if comp.target is not None:
                    add_component(comp.target, is_required)
            elif comp.kind == "object":
                for pname, psch, _ in comp.properties:
                    properties.append((pname, psch))
                    if is_required:
                        required.add(pname)
            elif comp.kind == "enum":
                for v in comp.values:
                    lit = format_literal(dump(v))
                    enum_values[lit] = enum_values.get(lit, 0) + 1

        for child in node.children:
            if child.kind == "any_of":
                for alt in child.children:
                    add_component(alt, False)
            else:
                add_component(child, True)
        if enum_values:
            inter = [k for k in sorted(enum_values) if enum_values[k] == len(node.children)]
            if inter:
                return self.add_rule(rule_name, "(" + " | ".join(inter) + ")")
        return self.add_rule(rule_name, self.object_rule(properties, required, name, None))

    def visit(self, node, name: str) -> str:
        rule_name = name + "-" if name in RESERVED_NAMES else (name or "root")
        sub_name = name + ("-" if name else "")
        k = node.kind
        if k == "ref":
            return self.add_rule(rule_name, self.resolve_ref(node))
        if k == "any_of":
            return self.add_rule(rule_name, self.union(name, node.children))
        if k == "all_of":
            return self.visit_all_of(node, name, rule_name)
        if k == "const":
            return self.add_rule(rule_name, format_literal(dump(node.value)))
        if k == "enum":
            return self.add_rule(rule_name, "(" + " | ".join(format_literal(dump(v))
                                                              for v in node.values) + ")")
        if k == "object":
            if not node.properties and node.additional is not None and \
                    node.additional.kind == "any":
                return self.add_rule(rule_name, self.add_primitive("object",
                                                                   PRIMITIVE_RULES["object"]))
            props = [(n, s) for n, s, _ in node.properties]
            required = {n for n, _, r in node.properties if r}
            return self.add_rule(rule_name, self.object_rule(props, required, name, node.additional))
        if k == "tuple":
            parts = [self.visit(it, f"{sub_name}tuple-{i}") for i, it in enumerate(node.items)]
            return self.add_rule(rule_name, '"[" space ' + ' "," space '.join(parts)
                                 + ' space "]"')
        if k == "array":
            if node.items.kind == "any" and node.min_items == 0 and node.max_items < 0:
                return self.visit_primitive(rule_name, "array")
            item = self.visit(node.items, sub_name + "item")
            hi = INT_MAX if node.max_items < 0 else node.max_items
            return self.add_rule(rule_name, '"[" space ' + build_repetition(
                item, node.min_items, hi, '"," space') + ' space "]"')
        if k == "string":
            if node.pattern:
                return self.visit_pattern(node.pattern, rule_name)
            if node.format == "uuid":
                return self.visit_primitive(rule_name, "uuid")
            if node.format is not None:
                prim = node.format + "-string"
                return self.add_rule(rule_name, self.add_primitive(prim, STRING_FORMAT_RULES[prim]))
            if node.min_length > 0 or node.max_length >= 0:
                char_rule = self.add_primitive("char", PRIMITIVE_RULES["char"])
                hi = INT_MAX if node.max_length < 0 else node.max_length
                return self.add_rule(rule_name, '"\\"" ' + build_repetition(
                    char_rule, node.min_length, hi) + ' "\\""')
            return self.visit_primitive(rule_name, "string")
        if k == "integer":
            if node.minimum == INT64_MIN and node.maximum == INT64_MAX:
                return self.visit_primitive(rule_name, "integer")
            out = ["("]
            build_min_max_int(node.minimum, node.maximum, out)
            out.append(")")
            return self.add_rule(rule_name, "".join(out))
        if k in ("number", "boolean", "null"):
            return self.visit_primitive(rule_name, k)
        return self.add_rule(rule_name, self.add_primitive("value", PRIMITIVE_RULES["value"]))

    def format_grammar(self) -> str:
        return "".join(f"{k} ::= {v}\n" for k, v in sorted(self.rules.items()))


def _stoi(s: str) -> int:
    """std::stoi: leading space, a sign, digits; anything else is 'invalid number'."""
    m = re.match(r"[ \t\n\r\f\v]*([+-]?\d+)", s)
    if not m or not (-(2 ** 31) <= int(m.group(1)) < 2 ** 31):
        raise _Unsupported("invalid number in curly brackets")
    return int(m.group(1))


def convert(schema, dotall: bool = False) -> str:
    """json_schema_to_grammar(schema, force_gbnf=true): the GBNF text; GrammarError with
    llama.cpp's 'JSON schema conversion failed:' message otherwise."""
    try:
        doc = Builder(schema).build()
    except _SchemaFail as e:
        raise GrammarError("JSON schema conversion failed:\n" + str(e)) from None
    except RecursionError:
        raise GrammarError("JSON schema conversion failed:\nschema nested too deeply") from None
    c = Converter(dotall)
    try:
        c.visit(doc, "")
    except RecursionError:
        raise GrammarError("JSON schema conversion failed:\nschema nested too deeply") from None
    if c.errors:
        raise GrammarError("JSON schema conversion failed:\n" + "\n".join(c.errors))
    if c.warnings:
        log.warning("JSON schema conversion was incomplete: %s", "; ".join(c.warnings))
    return c.format_grammar()
