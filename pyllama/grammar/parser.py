"""GBNF text -> rules, with llama.cpp's language and error wording (src/llama-grammar.cpp,
llama_grammar_parser).

A rule is a list of (type, value) elements ending in END; alternatives are separated by ALT.
Element types are llama.cpp's llama_gretype values. Character classes are a CHAR (or CHAR_NOT)
followed by CHAR_ALT / CHAR_RNG_UPPER elements; `.` is CHAR_ANY. Groups and repetitions become
generated rules named `<rule>_<id>`, with llama.cpp's numbering, so a grammar prints the same.
Errors are GrammarError with llama.cpp's message (which quotes the rest of the text from the
failing position) and the character offset in `.position`.
"""
from pyllama.grammar.errors import GrammarError

END, ALT, RULE_REF, CHAR, CHAR_NOT, CHAR_RNG_UPPER, CHAR_ALT, CHAR_ANY, TOKEN, TOKEN_NOT = range(10)
MAX_REPETITION_THRESHOLD = 2000
NO_MAX = -1
_MAX_NESTING = 200  # groups inside groups: Python recursion depth; llama.cpp recurses in C


class _Fail(Exception):
    def __init__(self, message: str, pos: int):
        super().__init__(message)
        self.pos = pos


def _is_word(c: str) -> bool:
    return ("a" <= c <= "z") or ("A" <= c <= "Z") or c == "-" or ("0" <= c <= "9")


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


class Parser:
    """One parse of a GBNF text. `token_id(text) -> id or None` resolves `<token>` references
    (llama.cpp tokenizes them with special tokens and requires exactly one token); without it
    only `<[id]>` references parse."""

    def __init__(self, src: str, token_id=None):
        self.src = src + "\0"  # llama.cpp parses a NUL-terminated C string
        self.token_id = token_id
        self.symbol_ids: dict[str, int] = {}
        self.rules: list[list | None] = []
        self.depth = 0
        self.ref_pos: dict[int, int] = {}  # first reference of each symbol (for errors)

    # -- helpers ------------------------------------------------------------------------------
    def _at(self, pos: int) -> str:
        return self.src[pos:-1]

    def fail(self, message: str, pos: int):
        raise _Fail(message, pos)

    def space(self, pos: int, newline_ok: bool) -> int:
        s = self.src
        while s[pos] in " \t#" or (newline_ok and s[pos] in "\r\n"):
            if s[pos] == "#":
                while s[pos] != "\0" and s[pos] not in "\r\n":
                    pos += 1
            else:
                pos += 1
        return pos

    def name(self, pos: int) -> int:
        end = pos
        while _is_word(self.src[end]):
            end += 1
        if end == pos:
            self.fail("expecting name at " + self._at(pos), pos)
        return end

    def integer(self, pos: int) -> int:
        end = pos
        while _is_digit(self.src[end]):
            end += 1
        if end == pos:
            self.fail("expecting integer at " + self._at(pos), pos)
        return end

    def hexval(self, pos: int, size: int) -> tuple[int, int]:
        value, p = 0, pos
        while p < pos + size and self.src[p] != "\0":
            c = self.src[p]
            if c in "0123456789abcdefABCDEF":
                value = value * 16 + int(c, 16)
            else:
                break
            p += 1
        if p != pos + size:
            self.fail(f"expecting {size} hex chars at " + self._at(pos), pos)
        return value, p

    def char(self, pos: int) -> tuple[int, int]:
        s = self.src
        if s[pos] == "\\":
            e = s[pos + 1]
            if e == "x":
                return self.hexval(pos + 2, 2)
            if e == "u":
                return self.hexval(pos + 2, 4)
            if e == "U":
                return self.hexval(pos + 2, 8)
            simple = {"t": 9, "r": 13, "n": 10, "\\": 92, '"': 34, "[": 91, "]": 93, "-": 45}
            if e in simple:
                return simple[e], pos + 2
            self.fail("unknown escape at " + self._at(pos), pos)
        if s[pos] != "\0":
            return ord(s[pos]), pos + 1
        self.fail("unexpected end of input", pos)

    def token(self, pos: int) -> tuple[int, int]:
        s, start = self.src, pos
        if s[pos] != "<":
            self.fail("expecting '<' at " + self._at(pos), pos)
        pos += 1
        if s[pos] == "[":
            pos += 1
            end = self.integer(pos)
            tid = int(s[pos:end])
            if tid > 0xFFFFFFFF:
                self.fail("parsed token id is too big at " + self._at(pos), pos)
            pos = end
            if s[pos] != "]":
                self.fail("expecting ']' at " + self._at(pos), pos)
            pos += 1
            if s[pos] != ">":
                self.fail("expecting '>' at " + self._at(pos), pos)
            return tid, pos + 1
        if self.token_id is None:
            self.fail("no vocab to parse token at " + self._at(start), start)
        while s[pos] != "\0" and s[pos] != ">":
            pos += 1
        if s[pos] != ">":
            self.fail("expecting '>' at " + self._at(pos), pos)
        pos += 1
        tid = self.token_id(s[start:pos])
        if tid is None:
            self.fail(f"invalid token '{s[start:pos]}'", start)
        return int(tid), pos

    def symbol(self, name: str) -> int:
        return self.symbol_ids.setdefault(name, len(self.symbol_ids))

    def generate_symbol(self, base: str) -> int:
        nid = len(self.symbol_ids)
        self.symbol_ids[f"{base}_{nid}"] = nid
        return nid

    def add_rule(self, rid: int, rule: list) -> None:
        while len(self.rules) <= rid:
            self.rules.append(None)
        self.rules[rid] = rule

    # -- grammar ------------------------------------------------------------------------------
    def alternates(self, pos: int, rule_name: str, rid: int, nested: bool) -> int:
        rule: list = []
        pos = self.sequence(pos, rule_name, rule, nested)
        while self.src[pos] == "|":
            rule.append((ALT, 0))
            pos = self.space(pos + 1, True)
            pos = self.sequence(pos, rule_name, rule, nested)
        rule.append((END, 0))
        self.add_rule(rid, rule)
        return pos

    def sequence(self, pos: int, rule_name: str, rule: list, nested: bool) -> int:
        s = self.src
        last_sym_start = len(rule)
        n_prev_rules = 1

        def repeat(min_times: int, max_times: int, at: int) -> None:
            nonlocal n_prev_rules
            no_max = max_times == NO_MAX
            if last_sym_start == len(rule):
                self.fail("expecting preceding item to */+/?/{ at " + self._at(at), at)
            prev = rule[last_sym_start:]
            total = 1
            if not no_max and max_times > 0:
                total = max_times
            elif min_times > 0:
                total = min_times
            if n_prev_rules * total > MAX_REPETITION_THRESHOLD:
                self.fail("number of rules that are going to be repeated multiplied by the new "
                          "repetition exceeds sane defaults, please reduce the number of "
                          "repetitions or rule complexity", at)
            if min_times == 0:
                del rule[last_sym_start:]
            else:
                for _ in range(1, min_times):
                    rule.extend(prev)
            last_rec = 0
            n_opt = 1 if no_max else max_times - min_times
            for i in range(n_opt):
                rec = list(prev)
                rec_id = self.generate_symbol(rule_name)
                if i > 0 or no_max:
                    rec.append((RULE_REF, rec_id if no_max else last_rec))
                rec += [(ALT, 0), (END, 0)]
                self.add_rule(rec_id, rec)
                last_rec = rec_id
            if n_opt > 0:
                rule.append((RULE_REF, last_rec))
            n_prev_rules *= total

        while s[pos] != "\0":
            c = s[pos]
            if c == '"':
                pos += 1
                last_sym_start, n_prev_rules = len(rule), 1
                while s[pos] != '"':
                    if s[pos] == "\0":
                        self.fail("unexpected end of input", pos)
                    ch, pos = self.char(pos)
                    rule.append((CHAR, ch))
                pos = self.space(pos + 1, nested)
            elif c == "[":
                pos += 1
                start_type = CHAR
                if s[pos] == "^":
                    pos += 1
                    start_type = CHAR_NOT
                last_sym_start, n_prev_rules = len(rule), 1
                while s[pos] != "]":
                    if s[pos] == "\0":
                        self.fail("unexpected end of input", pos)
                    ch, pos = self.char(pos)
                    rule.append((CHAR_ALT if last_sym_start < len(rule) else start_type, ch))
                    if s[pos] == "-" and s[pos + 1] != "]":
                        if s[pos + 1] == "\0":
                            self.fail("unexpected end of input", pos + 1)
                        ch, pos = self.char(pos + 1)
                        rule.append((CHAR_RNG_UPPER, ch))
                pos = self.space(pos + 1, nested)
            elif c in "<!":
                kind = TOKEN
                if c == "!":
                    kind = TOKEN_NOT
                    pos += 1
                tid, pos = self.token(pos)
                last_sym_start, n_prev_rules = len(rule), 1
                rule.append((kind, tid))
                pos = self.space(pos, nested)
            elif _is_word(c):
                end = self.name(pos)
                ref = self.symbol(s[pos:end])
                self.ref_pos.setdefault(ref, pos)
                pos = self.space(end, nested)
                last_sym_start, n_prev_rules = len(rule), 1
                rule.append((RULE_REF, ref))
            elif c == "(":
                open_at = pos
                pos = self.space(pos + 1, True)
                n_before = len(self.symbol_ids)
                sub = self.generate_symbol(rule_name)
                self.depth += 1
                if self.depth > _MAX_NESTING:
                    self.fail(f"groups nested deeper than {_MAX_NESTING} at " + self._at(open_at),
                              open_at)
                pos = self.alternates(pos, rule_name, sub, True)
                self.depth -= 1
                n_prev_rules = max(1, len(self.symbol_ids) - n_before)
                last_sym_start = len(rule)
                rule.append((RULE_REF, sub))
                if s[pos] != ")":
                    self.fail("expecting ')' at " + self._at(pos), pos)
                pos = self.space(pos + 1, nested)
            elif c == ".":
                last_sym_start, n_prev_rules = len(rule), 1
                rule.append((CHAR_ANY, 0))
                pos = self.space(pos + 1, nested)
            elif c in "*+?":
                at = pos
                pos = self.space(pos + 1, nested)
                repeat(*{"*": (0, NO_MAX), "+": (1, NO_MAX), "?": (0, 1)}[c], at)
            elif c == "{":
                at = pos
                pos = self.space(pos + 1, nested)
                if not _is_digit(s[pos]):
                    self.fail("expecting an int at " + self._at(pos), pos)
                end = self.integer(pos)
                min_times = int(s[pos:end])
                pos = self.space(end, nested)
                max_times = NO_MAX
                if s[pos] == "}":
                    max_times = min_times
                    pos = self.space(pos + 1, nested)
                elif s[pos] == ",":
                    pos = self.space(pos + 1, nested)
                    if _is_digit(s[pos]):
                        end = self.integer(pos)
                        max_times = int(s[pos:end])
                        pos = self.space(end, nested)
                    if s[pos] != "}":
                        self.fail("expecting '}' at " + self._at(pos), pos)
                    pos = self.space(pos + 1, nested)
                else:
                    self.fail("expecting ',' at " + self._at(pos), pos)
                if min_times > MAX_REPETITION_THRESHOLD:
                    self.fail("number of repetitions exceeds sane defaults, please reduce the "
                              "number of repetitions", at)
                if max_times != NO_MAX and max_times > MAX_REPETITION_THRESHOLD:
                    max_times = NO_MAX  # llama.cpp: an upper bound above the limit means no bound
                if max_times != NO_MAX and max_times < min_times:
                    # llama.cpp computes max - min in unsigned arithmetic and exhausts memory
                    self.fail(f"repetition {{{min_times},{max_times}}}: maximum below minimum "
                              "at " + self._at(at), at)
                repeat(min_times, max_times, at)
            else:
                break
        return pos

    def rule(self, pos: int) -> int:
        s = self.src
        end = self.name(pos)
        name = s[pos:end]
        p = self.space(end, False)
        rid = self.symbol(name)
        if s[p:p + 3] != "::=":
            self.fail("expecting ::= at " + self._at(p), p)
        p = self.space(p + 3, True)
        p = self.alternates(p, name, rid, False)
        if s[p] == "\r":
            p += 2 if s[p + 1] == "\n" else 1
        elif s[p] == "\n":
            p += 1
        elif s[p] != "\0":
            self.fail("expecting newline or end at " + self._at(p), p)
        return self.space(p, True)

    def parse(self) -> None:
        pos = self.space(0, True)
        while self.src[pos] != "\0":
            pos = self.rule(pos)
        for rule in self.rules:
            if rule is None:
                self.fail("Undefined rule", 0)
            for kind, value in rule:
                if kind == RULE_REF and (value >= len(self.rules) or self.rules[value] is None):
                    name = next(k for k, v in self.symbol_ids.items() if v == value)
                    self.fail(f"Undefined rule identifier '{name}'", self.ref_pos.get(value, 0))


def parse(src: str, token_id=None) -> tuple[list[list], dict[str, int]]:
    """(rules, symbol_ids) of a GBNF text; GrammarError with llama.cpp's message otherwise."""
    p = Parser(src, token_id)
    try:
        p.parse()
    except _Fail as e:
        raise GrammarError(str(e), e.pos, src) from None
    if not p.rules:
        raise GrammarError("empty grammar", 0, src)
    return p.rules, p.symbol_ids


def left_recursion(rules: list[list]) -> int | None:
    """llama_grammar_detect_left_recursion over every rule: the index of the first rule found
    left-recursive, or None. Iterative (the C version recurses), same visiting order."""
    n = len(rules)
    visited, in_progress, may_be_empty = [False] * n, [False] * n, [False] * n

    def empty_check(i):
        rule, at_start = rules[i], True
        for kind, _ in rule:
            if kind in (END, ALT):
                if at_start:
                    may_be_empty[i] = True
                    break
                at_start = True
            else:
                at_start = False

    for root in range(n):
        if visited[root]:
            continue
        # frames: [rule index, element index, recurse_into_nonterminal]
        in_progress[root] = True
        empty_check(root)
        frames = [[root, 0, True]]
        while frames:
            f = frames[-1]
            ri, rule = f[0], rules[f[0]]
            if f[1] >= len(rule):
                in_progress[ri] = False
                visited[ri] = True
                frames.pop()
                if frames:  # the parent continues after its RULE_REF to ri
                    parent = frames[-1]
                    if not may_be_empty[ri]:
                        parent[2] = False
                    parent[1] += 1
                continue
            kind, value = rule[f[1]]
            if kind == RULE_REF and f[2]:
                if in_progress[value]:
                    return root  # llama.cpp reports the outer loop's rule index
                in_progress[value] = True
                empty_check(value)
                frames.append([value, 0, True])
                continue
            f[2] = kind in (END, ALT)
            f[1] += 1
    return None

