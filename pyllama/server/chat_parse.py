"""Generated chat text -> an assistant message (content, reasoning_content, tool_calls), whole or
as a stream of diffs, for every chat-shaped API (OpenAI chat, Anthropic Messages, Responses).

Reasoning (llama.cpp's common_reasoning_format and chat parser): with `reasoning_format`
"deepseek" or "auto" a `<think>...</think>` block at the start of the output goes to
reasoning_content ("deepseek-legacy": also kept, tags included, in content; "none": everything
stays in content). When the rendered prompt already ends inside an open `<think>` (thinking
forced open by the template), the output starts in the reasoning. A block still open when the
generation stops is reasoning. Extraction applies to templates that have thinking blocks (their
source mentions `<think>`), as llama.cpp's template analysis only sets reasoning markers then.

Tool calls: chat.parse_tool_calls (Hermes / Qwen `<tool_call>`), tool_calls.parse for the other
families (re-parsed whole on every delta, only what extends the sent text is sent); in a stream, text that may start a call is held back and the calls are sent at
the end (one diff per call with the whole arguments string).
"""
from __future__ import annotations

from dataclasses import dataclass, field

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
REASONING_FORMATS = ("none", "auto", "deepseek", "deepseek-legacy")


@dataclass
class ChatMsg:
    content: str = ""
    reasoning_content: str = ""
    tool_calls: list = field(default_factory=list)


def thinking_template(template) -> bool:
    """Does the chat template have thinking blocks (llama.cpp finds reasoning markers)?
    `<think>` blocks, Mistral's `[THINK]`, gpt-oss's analysis channel."""
    src = getattr(template, "source", None) or ""
    return THINK_CLOSE in src or "[/THINK]" in src or "<|channel|>" in src


def forced_open(prompt: str) -> bool:
    """The rendered prompt ends inside an open think block (e.g. `<think>\\n`)."""
    tail = prompt.rstrip()
    return tail.endswith(THINK_OPEN)


def _hold(text: str, tag: str) -> int:
    """Length of the text suffix that is a proper prefix of tag."""
    for k in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class MsgStream:
    """Incremental parser of one generation: push(delta) -> diffs, finish() -> (diffs, msg).
    A diff is {"reasoning_content": str} or {"content": str} or
    {"tool_call": (index, call)} where call is an OpenAI tool call dict."""

    def __init__(self, tools: bool = False, reasoning: str = "none", open_think: bool = False,
                 parse_calls=None, family: str = "hermes", spec=None):
        from .chat import ToolCallStream, parse_tool_calls
        self.family, self.open_think, self.spec = family, open_think, spec
        self.sent_content = self.sent_reasoning = ""
        self.reasoning = reasoning if reasoning in REASONING_FORMATS else "none"
        self.extract = self.reasoning != "none"
        self.legacy = self.reasoning == "deepseek-legacy"
        self.text = ""
        self.state = "think" if (self.extract and open_think) else "start"
        self.n_done = 0                # chars of self.text consumed by the think parser
        self.reasoning_text = ""
        self.tools = tools
        self.calls = ToolCallStream() if tools else None
        self.parse_calls = parse_calls or parse_tool_calls
        self.content = ""

    # -- think blocks -----------------------------------------------------------------------
    def push(self, delta: str) -> list[dict]:
        self.text += delta
        if self.family != "hermes":
            return self._reparse(final=False)[0]
        return self._advance(final=False)

    # -- the other families: re-parse the whole text, send what extends the sent parts ----------
    def _reparse(self, final: bool):
        from . import tool_calls as T
        text, thoughts = self.text, ""
        if self.family in (T.DEEPSEEK, T.LLAMA3):       # <think> blocks, then the calls
            open_think = self.open_think
            k = text.find(T.DS_CALLS[0])
            if open_think and k >= 0 and THINK_CLOSE not in text[:k]:
                thoughts, text, open_think = text[:k], text[k:], False   # calls end the block
            sub = MsgStream(False, self.reasoning, open_think)
            sub.push(text)
            if final:
                sub.finish()
            thoughts, text = thoughts + sub.reasoning_text, sub.content
        content, r2, calls = T.parse(text, self.family, self.tools, self.reasoning,
                                     partial=not final, spec=self.spec)
        thoughts += r2
        out = []
        for key, new, sent in (("reasoning_content", thoughts, "sent_reasoning"),
                               ("content", content, "sent_content")):
            old = getattr(self, sent)
            if new.startswith(old) and len(new) > len(old):
                out.append({key: new[len(old):]})
                setattr(self, sent, new)
        return out, ChatMsg(content=content, reasoning_content=thoughts.strip(),
                            tool_calls=calls if final else [])

    def _advance(self, final: bool) -> list[dict]:
        out: list[dict] = []
        while self.n_done < len(self.text):
            rest = self.text[self.n_done:]
            if self.state == "start":
                if not self.extract:
                    self.state = "content"
                    continue
                stripped = rest.lstrip()
                if stripped.startswith(THINK_OPEN):
                    lead = len(rest) - len(stripped)
                    if self.legacy:
                        self._content(out, rest[:lead + len(THINK_OPEN)])
                    self.n_done += lead + len(THINK_OPEN)
                    self.state = "think"
                    continue
                if not final and THINK_OPEN.startswith(stripped):
                    break              # may still become "<think>"
                self.state = "content"
                continue
            if self.state == "think":
                i = rest.find(THINK_CLOSE)
                if i >= 0:
                    self._reason(out, rest[:i])
                    if self.legacy:
                        self._content(out, THINK_CLOSE)
                    self.n_done += i + len(THINK_CLOSE)
                    self.state = "after"
                    continue
                keep = 0 if final else _hold(rest, THINK_CLOSE)
                self._reason(out, rest[:len(rest) - keep])
                self.n_done += len(rest) - keep
                break
            if self.state == "after":          # whitespace after </think> is dropped
                stripped = rest.lstrip()
                if not stripped and not final:
                    break
                self.n_done += len(rest) - len(stripped)
                self.state = "content"
                continue
            self._content(out, rest)
            self.n_done = len(self.text)
        return out

    def _reason(self, out: list, text: str) -> None:
        if text:
            self.reasoning_text += text
            out.append({"reasoning_content": text})
            if self.legacy:
                self._content(out, text)

    def _content(self, out: list, text: str) -> None:
        self.content += text
        if self.calls is not None:
            text = self.calls.push(text)
        if text:
            out.append({"content": text})

    # -- the end --------------------------------------------------------------------------
    def finish(self) -> tuple[list[dict], ChatMsg]:
        if self.family != "hermes":
            out, msg = self._reparse(final=True)
            out += [{"tool_call": (i, c)} for i, c in enumerate(msg.tool_calls)]
            return out, msg
        out = self._advance(final=True)
        calls = []
        content = self.content
        if self.calls is not None:
            rest, calls = self.calls.finish()
            if rest:
                out.append({"content": rest})
            if calls:
                content, _ = self.parse_calls(self.content)
        for i, c in enumerate(calls):
            out.append({"tool_call": (i, c)})
        return out, ChatMsg(content=content, reasoning_content=self.reasoning_text.strip(),
                            tool_calls=calls)


def parse_message(text: str, tools: bool = False, reasoning: str = "none",
                  open_think: bool = False, family: str = "hermes", spec=None) -> ChatMsg:
    """The whole message of a finished generation; `spec`: tool_calls.call_spec of the
    request (the families whose parser depends on the request's tools)."""
    s = MsgStream(tools, reasoning, open_think, family=family, spec=spec)
    s.push(text)
    return s.finish()[1]


class ReasoningBudget:
    """llama.cpp's reasoning-budget sampler (common/reasoning-budget.cpp) on token ids: after
    the start tag, count thinking tokens; when `budget` of them have been generated (and the
    last piece completes its UTF-8 sequence), force the end-tag tokens one by one; a new start
    tag re-arms it. `accept(tok)` follows every prompt and generated token, `forced()` is the
    token the next step must produce (None: sample normally)."""

    def __init__(self, start: list[int], end: list[int], budget: int, piece=None):
        self.start, self.end = list(start), list(end)
        self.forced_tokens = list(end)
        self.budget = budget if budget >= 0 else 2**31 - 1
        self.piece = piece or (lambda t: b"")
        self.state, self.remaining, self.pos = "idle", self.budget, 0
        self._s = self._e = 0          # matched prefix lengths of the start / end tags

    @staticmethod
    def _advance(tag: list[int], k: int, tok: int) -> tuple[int, bool]:
        """One step of a single-pattern matcher: (new matched length, complete match)."""
        while True:
            if k < len(tag) and tag[k] == tok:
                k += 1
                break
            if k == 0:
                break
            k = next((j for j in range(k - 1, 0, -1) if tag[:j] == tag[k - j:k]), 0)
        if k == len(tag):
            return 0, True
        return k, False

    def _arm(self) -> None:
        self.state, self.remaining = "counting", self.budget
        self._e = 0
        if self.remaining <= 0:
            self.state, self.pos = "forcing", 0

    def accept(self, tok: int) -> None:
        if self.state in ("idle", "done"):
            self._s, hit = self._advance(self.start, self._s, tok)
            if hit:
                self._arm()
            return
        if self.state == "forcing":
            self._e, _ = self._advance(self.end, self._e, tok)
            self.pos += 1
            if self.pos >= len(self.forced_tokens):
                self.state = "done"
            return
        self._e, hit = self._advance(self.end, self._e, tok)
        if hit:
            self.state = "done"
            return
        complete = _utf8_complete(self.piece(tok))
        if self.state == "waiting_utf8":
            if complete:
                self.state, self.pos, self._e = "forcing", 0, 0
        else:
            self.remaining -= 1
            if self.remaining <= 0:
                self.state = "forcing" if complete else "waiting_utf8"
                self.pos, self._e = 0, 0

    def force(self) -> bool:
        """common_reasoning_budget_force: end the thinking now (reasoning control)."""
        if self.state in ("counting", "waiting_utf8"):
            self.state, self.pos, self._e = "forcing", 0, 0
            return True
        return False

    def fresh(self) -> "ReasoningBudget":
        """A copy in the initial state (one per task)."""
        return ReasoningBudget(self.start, self.end, self.budget, self.piece)

    def forced(self) -> int | None:
        if self.state == "forcing" and self.pos < len(self.forced_tokens):
            return self.forced_tokens[self.pos]
        return None


def _utf8_complete(b: bytes) -> bool:
    """common_utf8_is_complete: the bytes do not end inside a multi-byte sequence."""
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError as e:
        return e.reason != "unexpected end of data"
