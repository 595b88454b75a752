"""What a chat template can do, found by running it: llama.cpp's jinja capability analysis
(common/jinja/caps.cpp, `caps_get`), reported by llama-server's /props as `chat_template_caps`
and deciding defaults such as `parallel_tool_calls`.

llama.cpp renders the template on small probe conversations with usage statistics on: every
value remembers whether the template touched it (a variable or member lookup, a filter, a test,
a loop over it; `tojson` and `string` touch everything inside) and which operations it saw
(`test_is_string`, `selectattr`, `array_access`, ...). Here the probe values are dict, list and
str subclasses that record the same facts, rendered by a copy of the chat environment whose
attribute/item lookups, filters and tests mark them (jinja2 calls all three through the
environment). A string iterated by a for loop is an error, as in llama.cpp's runtime.
"""
from __future__ import annotations

import json

import jinja2
from .chat import ChatEnvironment

MARKER = "STRING_MARKER"
REASONING_PLACEHOLDER = "<REASONING_CONTENT_PLACEHOLDER>"


class _Stats:
    __slots__ = ("used", "ops")

    def __init__(self):
        self.used, self.ops = False, set()


def _stats(v) -> _Stats | None:
    return v._st if isinstance(v, (TStr, TList, TDict)) else None


def _mark(v, op: str | None = None, deep: bool = False) -> None:
    st = _stats(v)
    if st is not None:
        st.used = True
        if op:
            st.ops.add(op)
    if deep:
        if isinstance(v, dict):
            for k, x in dict.items(v):
                _mark(k, deep=True)
                _mark(x, deep=True)
        elif isinstance(v, list):
            for x in list.__iter__(v):
                _mark(x, deep=True)


class TStr(str):
    """A probe string: touched when read as text, compared, measured or tested."""

    def __new__(cls, s):
        o = super().__new__(cls, s)
        o._st = _Stats()
        return o

    def _t(self):
        _mark(self)
        return self

    def __str__(self):
        _mark(self)
        return str.__str__(self)

    def __html__(self):
        return self.__str__()

    def __eq__(self, other):
        _mark(self)
        return str.__eq__(self, other)

    def __ne__(self, other):
        _mark(self)
        return str.__ne__(self, other)

    __hash__ = str.__hash__

    def __len__(self):
        _mark(self)
        return str.__len__(self)

    def __contains__(self, item):
        _mark(self)
        return str.__contains__(self, item)

    def __add__(self, other):
        _mark(self)
        return str.__add__(self, other)

    def __radd__(self, other):
        _mark(self)
        return other + str.__str__(self)

    def __iter__(self):
        # llama.cpp: "Expected iterable or object type in for loop: got String"
        _mark(self, "array_access")
        raise TypeError("a string is not iterable in a for loop")

    def __format__(self, spec):
        _mark(self)
        return str.__format__(self, spec)


class TList(list):
    def __init__(self, items):
        super().__init__(items)
        self._st = _Stats()

    def __iter__(self):
        _mark(self, "array_access")
        return list.__iter__(self)

    def __len__(self):
        _mark(self)
        return list.__len__(self)


class TDict(dict):
    def __init__(self, items):
        super().__init__(items)
        self._st = _Stats()

    def __iter__(self):
        _mark(self, "object_access")
        return dict.__iter__(self)

    def __len__(self):
        _mark(self)
        return dict.__len__(self)

    def __contains__(self, key):
        _mark(self)
        return dict.__contains__(self, key)


def track(v):
    """JSON-like data -> probe values."""
    if isinstance(v, dict):
        return TDict({k: track(x) for k, x in v.items()})
    if isinstance(v, list):
        return TList([track(x) for x in v])
    if isinstance(v, str):
        return TStr(v)
    return v


def _plain(v):
    if isinstance(v, dict):
        return {_plain(k): _plain(x) for k, x in dict.items(v)}
    if isinstance(v, list):
        return [_plain(x) for x in list.__iter__(v)]
    if isinstance(v, str):
        return str.__str__(v)
    return v


class _StatsEnv(ChatEnvironment):
    def getitem(self, obj, argument):
        val = super().getitem(obj, argument)
        self._access(obj, argument, val)
        return val

    def getattr(self, obj, attribute):
        val = super().getattr(obj, attribute)
        self._access(obj, attribute, val)
        return val

    @staticmethod
    def _access(obj, key, val):
        if isinstance(val, jinja2.Undefined):
            return
        if callable(val) and not isinstance(val, (dict, list, str)):
            _mark(obj, str(key))    # a builtin method: the object and the method's name
            return
        _mark(val)
        if isinstance(obj, dict) or isinstance(key, (str, float)) or key is None:
            _mark(obj, "object_access")
        elif isinstance(key, (int, bool)):
            _mark(obj, "array_access")
        else:
            _mark(obj)


def _environment(base: jinja2.Environment) -> _StatsEnv:
    env = _StatsEnv(trim_blocks=base.trim_blocks, lstrip_blocks=base.lstrip_blocks,
                    extensions=list(base.extensions), undefined=base.undefined)
    env.globals.update(base.globals)
    for name, fn in base.filters.items():
        env.filters[name] = _filter(name, fn)
    for name, fn in base.tests.items():
        env.tests[name] = _test(name, fn)
    return env


def _filter(name, fn):
    deep = name in ("tojson", "string")
    pass_env = getattr(fn, "jinja_pass_arg", None)

    def wrapped(*args, **kwargs):
        # a context/environment-passing filter gets it first; the value follows
        i = 1 if pass_env is not None and len(args) > 1 else 0
        if args:
            _mark(args[i], name, deep=deep)
            if deep:     # serialised as plain data: the encoder's walk is no template access
                args = args[:i] + (_plain(args[i]),) + args[i + 1:]
        return fn(*args, **kwargs)

    if pass_env is not None:
        wrapped.jinja_pass_arg = pass_env
    return wrapped


def _test(name, fn):
    def wrapped(value, *args, **kwargs):
        _mark(value, "test_is_" + name)
        return fn(value, *args, **kwargs)
    return wrapped


def _run(tmpl, messages, tools=None, extra=None):
    """(success, messages, tools, rendered text, context values) of one probe render."""
    ctx = {"messages": track(messages), "tools": track(tools or []), "bos_token": "",
           "eos_token": "", "add_generation_prompt": True}
    for k, v in (extra or {}).items():
        ctx[k] = v
    try:
        out = tmpl.render(**ctx)
        return True, ctx["messages"], ctx["tools"], out, ctx
    except Exception:  # noqa: BLE001 - a probe that fails is a capability it lacks
        return False, ctx["messages"], ctx["tools"], "", ctx


def _used(v) -> bool:
    st = _stats(v)
    return bool(st and st.used)


def _has(v, op) -> bool:
    st = _stats(v)
    return bool(st and op in st.ops)


_TOOLS = [{"name": "tool", "type": "function", "function": {
    "name": "tool1", "description": "Tool description",
    "parameters": {"type": "object", "properties": {"arg": {"type": "string",
                                                            "description": "Arg description"}},
                   "required": ["arg"]}}}]


def _call_conversation(args, n_calls=1):
    calls = [{"id": f"call0000{i + 1}", "type": "function",
              "function": {"name": "tool1", "arguments": args}} for i in range(n_calls)]
    return [{"role": "user", "content": "User message"},
            {"role": "assistant", "content": "", "tool_calls": calls},
            {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
            {"role": "assistant", "content": "The tool response was 'tool response'"},
            {"role": "user", "content": "User message"}]


def template_caps(template) -> dict[str, bool]:
    """caps_get(prog).to_map() for a pyllama.vocab.chat.ChatTemplate (keys sorted, as the
    std::map prints them)."""
    src = _environment(template._template.environment).from_string(template.source)
    c = dict(supports_tools=True, supports_tool_calls=True, supports_system_role=True,
             supports_parallel_tool_calls=True, supports_preserve_reasoning=False,
             supports_reasoning_effort=False, supports_string_content=True,
             supports_typed_content=False, supports_object_arguments=False)

    # typed content
    ok, msgs, _, out, _ = _run(src, [{"role": "user", "content": MARKER}])
    content = msgs[0]["content"]
    checks_for_string = _has(content, "test_is_string")
    as_array = _has(content, "selectattr") or _has(content, "array_access")
    if as_array:
        c["supports_typed_content"] = True
    if not ok or (as_array and MARKER not in out):
        c["supports_string_content"] = False
    if checks_for_string:
        ok, msgs, _, _, _ = _run(src, [{"role": "user", "content": []}])
        content = msgs[0]["content"]
        if ok and (_has(content, "selectattr") or _has(content, "array_access")):
            c["supports_typed_content"] = True

    # system role
    _, msgs, _, _, _ = _run(src, [{"role": "system", "content": "System message"},
                                       {"role": "user", "content": "User message"}])
    if not _used(msgs[0]["content"]):
        c["supports_system_role"] = False

    # one tool call, object arguments
    ok, msgs, tools, _, _ = _run(src, _call_conversation({"arg": "value"}), _TOOLS)
    if ok:
        if not _used(tools[0]["function"]["name"]):
            c["supports_tools"] = False
        calls = msgs[1]["tool_calls"]
        if not _used(calls):
            c["supports_tool_calls"] = False
        elif _used(calls[0]["function"]["arguments"]["arg"]):
            c["supports_object_arguments"] = True

    if not c["supports_object_arguments"]:
        ok, msgs, tools, _, _ = _run(src, _call_conversation('{"arg": "value"}'), _TOOLS)
        if not ok:
            c["supports_tool_calls"] = c["supports_tools"] = False
        else:
            if not _used(tools[0]["function"]["name"]):
                c["supports_tools"] = False
            if not _used(msgs[1]["tool_calls"]):
                c["supports_tool_calls"] = False

    # parallel tool calls
    args = {"arg": "value"} if c["supports_object_arguments"] else json.dumps({"arg": "value"})
    ok, msgs, _, _, _ = _run(src, _call_conversation(args, 2), _TOOLS)
    if not ok or not _used(msgs[1]["tool_calls"][1]["function"]):
        c["supports_parallel_tool_calls"] = False

    # preserved reasoning deeper in the history
    on = {"enable_thinking": True, "preserve_thinking": True, "clear_thinking": False,
          "truncate_history_thinking": False, "drop_thinking": False}
    _, _, _, out, _ = _run(src, [
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "Assistant message",
         "reasoning_content": REASONING_PLACEHOLDER},
        {"role": "user", "content": "User message"},
        {"role": "assistant", "content": "Assistant message",
         "reasoning_content": "Reasoning content"},
        {"role": "user", "content": "User message"}], None, on)
    if REASONING_PLACEHOLDER in out:
        c["supports_preserve_reasoning"] = True

    # reasoning effort
    effort = TStr("low")     # one value bound to both names, as caps_apply_reasoning_effort
    _run(src, [{"role": "user", "content": "User message"}], None,
         {"enable_thinking": True, "reasoning_effort": effort, "reasoning_strength": effort})
    c["supports_reasoning_effort"] = _used(effort)
    return dict(sorted(c.items()))
