"""llama-server's built-in agent tools (`--tools`, `--tools-runtime`, `/tools`), as llama.cpp
0c1e570 tools/server/server-tools.cpp: read_file, file_glob_search, grep_search,
exec_shell_command, write_file, edit_file, get_info, plus the tools of the MCP servers
(pyllama/server/mcp.py) as `<server>_<tool>`.

Safety rules, llama.cpp's: no tool is on unless `--tools` names it (`all` for every one, `--agent`
is `--tools all --ui-mcp-proxy`); without tools and MCP servers `/tools` answers 403
"this feature is disabled"; with either of them the default CORS origin becomes `localhost`
unless `--cors-origins` was given (tools/server.py). The tools act with the server's own
rights on the host, with no path restriction (llama.cpp has none: "do not enable in untrusted
environments"), unless a runtime routes them elsewhere: the `x-tool-runtime` header or
`--tools-runtime` (`docker:<image>` / `podman:<image>` spawns a container owned by the server and
removed at exit, `docker-container:<id>` / `podman-container:<id>` attaches to one, `ssh:<target>`
runs on a remote host with key-only batch ssh). An unknown runtime is an error, never a silent
fallback to the host; a container id or ssh target that could be read as an option (leading '-',
other characters than llama.cpp allows) is refused. A model-supplied `cwd`, `runtime` or
`resp_type` parameter is dropped: only the `x-tool-cwd`, `x-tool-runtime` and `x-resp-type`
headers set them.

Differences: regular expressions of grep_search are Python's `re` (llama.cpp: std::regex
ECMAScript), which agree on the common syntax.
"""
from __future__ import annotations

import base64
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time

import msgspec
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from ..log import get_logger
from .embeddings import _json_type   # nlohmann's type names, shared with infill

log = get_logger("server")
_JSON = "application/json; charset=utf-8"

GIT_LS_FILES_MAX_OUTPUT = 8 * 1024 * 1024
LIST_ENTRIES_TIMEOUT = 15
ISOLATE_EXEC_TIMEOUT = 15
ISOLATE_READ_FILE_MAX_SIZE = 64 * 1024 * 1024
READ_FILE_MAX_SIZE = 16 * 1024
READ_FILE_MAX_SIZE_BASE64 = 32 * 1024 * 1024
FILE_SEARCH_MAX_RESULTS = 100
GREP_SEARCH_MAX_RESULTS = 100
EXEC_MAX_OUTPUT_SIZE = 16 * 1024
EXEC_MAX_TIMEOUT = 60
GET_INFO_MAX_OUTPUT = 4096
GET_INFO_TIMEOUT = 5
JUNK_DIR_NAMES = frozenset((".git", ".svn", ".hg", "node_modules", "__pycache__", ".venv", "venv",
                            "dist", "build", "target", ".cache", ".idea", ".vscode"))
TOOL_NAMES = ("read_file", "file_glob_search", "grep_search", "exec_shell_command", "write_file",
              "edit_file", "get_info")


class ToolError(Exception):
    """A failure answered 500 (llama.cpp: std::runtime_error in the handler)."""


class BadRequest(Exception):
    """A malformed body or parameter: 400 (llama.cpp: a JSON access error)."""


class NotFound(Exception):
    """An unknown tool, or stream on a tool without it: 404 (std::invalid_argument)."""


def _jv(params: dict, key: str, default):
    """llama.cpp's json_value: the default when the key is missing, null or of another type."""
    v = params.get(key)
    if v is None:
        return default
    if isinstance(default, bool):
        return v if isinstance(v, bool) else default
    if isinstance(default, int):
        return v if isinstance(v, int) and not isinstance(v, bool) else default
    if isinstance(default, str):
        return v if isinstance(v, str) else default
    return v


def _req(params: dict, key: str, typ=str):
    """params.at(key).get<T>(): missing or mistyped is a JSON error (400)."""
    if key not in params:
        raise BadRequest(f"[json.exception.out_of_range.403] key '{key}' not found")
    v = params[key]
    if typ is str and not isinstance(v, str):
        raise BadRequest(f"[json.exception.type_error.302] type must be string, but is "
                         f"{_json_type(v)}")
    return v


def _lines(text: str) -> list[str]:
    """std::getline over a string: split on '\\n', no empty piece after a final newline."""
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return parts


def _dec(data: bytes) -> str:
    return data.decode("utf-8", errors="surrogateescape")


def _enc(text: str) -> bytes:
    return text.encode("utf-8", errors="surrogateescape")


def _clean(text: str) -> str:
    """Text for a JSON answer: invalid UTF-8 bytes become U+FFFD (safe_json_to_str)."""
    return _enc(text).decode("utf-8", errors="replace")


# ---- glob (common/common.cpp glob_match) ---------------------------------------------------------
def _class_match(c: str, cls: str) -> bool:
    negate = cls[:1] in ("!", "^")
    if negate:
        cls = cls[1:]
    ok, i = False, 0
    while i < len(cls):
        if i + 2 < len(cls) and cls[i + 1] == "-":
            ok = ok or cls[i] <= c <= cls[i + 2]
            i += 3
        else:
            ok = ok or cls[i] == c
            i += 1
    return ok != negate


def glob_match(pat: str, s: str) -> bool:
    """`**` crosses '/', `*` and `?` do not, `[...]` classes ('!'/'^' negate, a leading ']' or
    '-' is literal), an unclosed '[' matches itself."""
    if not pat:
        return not s
    if pat.startswith("**"):
        p = pat[2:]
        for i in range(len(s) + 1):
            if glob_match(p, s[i:]):
                return True
        return False
    if pat[0] == "*":
        p, i = pat[1:], 0
        while i < len(s) and s[i] != "/":
            if glob_match(p, s[i:]):
                return True
            i += 1
        return glob_match(p, s[i:])
    if pat[0] == "?" and s and s[0] != "/":
        return glob_match(pat[1:], s[1:])
    if pat[0] == "[":
        end = 1
        if end < len(pat) and pat[end] in "]-":
            end += 1
        while end < len(pat) and pat[end] != "]":
            end += 1
        if end < len(pat):
            if not s:
                return False
            return _class_match(s[0], pat[1:end]) and glob_match(pat[end + 1:], s[1:])
        return bool(s) and s[0] == "[" and glob_match(pat[1:], s[1:])
    if s and pat[0] == s[0]:
        return glob_match(pat[1:], s[1:])
    return False


def path_glob_match(pattern: str, rel: str) -> bool:
    """No '/' in the pattern: the basename at any depth; else the whole relative path,
    anchored with '**/' unless it already is."""
    if "/" not in pattern:
        return glob_match(pattern, rel.rsplit("/", 1)[-1])
    if pattern == "**" or pattern.startswith("**/") or pattern.startswith("/"):
        return glob_match(pattern, rel)
    return glob_match("**/" + pattern, rel)


def _depth(rel: str) -> int:
    return 1 + rel.count("/")


# ---- subprocesses --------------------------------------------------------------------------------
class ExecResult:
    __slots__ = ("output", "exit_code", "timed_out")

    def __init__(self, output: str = "", exit_code: int = -1, timed_out: bool = False):
        self.output, self.exit_code, self.timed_out = output, exit_code, timed_out


def run_subprocess(args: list[str], max_output: int, timeout: int, on_chunk=None,
                   combine_stderr: bool = True, cwd: str = "",
                   stdin_data: bytes | None = None) -> ExecResult:
    """server-tools.cpp run_subprocess: stdin written then closed, stdout read raw (kept draining
    past the cap), killed at the timeout or when on_chunk returns False."""
    try:
        proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT if combine_stderr else subprocess.DEVNULL,
                                cwd=cwd or None, start_new_session=True)
    except (OSError, ValueError):
        return ExecResult("failed to spawn process")
    done, timed_out = threading.Event(), threading.Event()

    def watchdog():
        if not done.wait(timeout):
            timed_out.set()
            _kill(proc)
    t = threading.Thread(target=watchdog, daemon=True)
    t.start()
    try:
        if stdin_data:
            proc.stdin.write(stdin_data)
        proc.stdin.close()
    except OSError:
        pass
    out, truncated = bytearray(), False
    fd = proc.stdout.fileno()
    while True:
        try:
            buf = os.read(fd, 4096)
        except OSError:
            break
        if not buf:
            break
        if truncated:
            continue
        if len(out) + len(buf) <= max_output:
            out += buf
            if on_chunk is not None and not on_chunk(_clean(_dec(buf))):
                _kill(proc)
                break
        else:
            rest = max_output - len(out)
            out += buf[:rest]
            if on_chunk is not None and rest > 0:
                on_chunk(_clean(_dec(buf[:rest])))
            truncated = True
    done.set()
    t.join()
    proc.stdout.close()
    code = proc.wait()
    if code < 0:            # killed by a signal: subprocess.h reports EXIT_FAILURE
        code = 1
    text = _dec(bytes(out))
    if truncated:
        text += "\n[output truncated]"
    return ExecResult(text, code, timed_out.is_set())


def _kill(proc) -> None:
    try:
        os.killpg(proc.pid, 9)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass


# ---- tool I/O: the host, or an isolate -----------------------------------------------------------
class HostIO:
    """tools_io_basic: the host file system; `cwd` resolves relative paths and runs commands."""

    def __init__(self, cwd: str = ""):
        self.cwd = cwd

    def resolve(self, path: str) -> str:
        p = path
        if p.startswith("~") and (len(p) == 1 or p[1] in "/\\"):
            home = os.environ.get("HOME", "")
            if home:
                p = home + p[1:]
        if not os.path.isabs(p):
            base = self.cwd or os.getcwd()
            p = os.path.join(base, p)
        return os.path.normpath(p)

    def is_directory(self, path: str) -> bool:
        return os.path.isdir(self.resolve(path))

    def is_regular_file(self, path: str) -> bool:
        return os.path.isfile(self.resolve(path))

    def file_size(self, path: str) -> int | None:
        try:
            return os.stat(self.resolve(path)).st_size
        except OSError:
            return None

    def read_file(self, path: str) -> bytes | None:
        try:
            with open(self.resolve(path), "rb") as f:
                return f.read()
        except OSError:
            return None

    def write_file(self, path: str, content: bytes) -> bool:
        p = self.resolve(path)
        try:
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(content)
            return True
        except OSError:
            return False

    def run(self, args, max_output, timeout, on_chunk=None) -> ExecResult:
        return run_subprocess(args, max_output, timeout, on_chunk, True, self.cwd)

    def list_entries(self, base: str, max_depth: int, kind: str):
        """(entries [(rel, is_dir)], error, truncated); files come from `git ls-files` when
        `base` is in a git work tree, else from a walk that never enters junk directories or
        links."""
        if not os.path.isdir(base):
            return [], "path does not exist or is not a directory", False
        deadline = time.monotonic() + LIST_ENTRIES_TIMEOUT
        if kind == "file":
            res = self.run(["git", "-C", base, "ls-files", "--cached", "--others",
                            "--exclude-standard"], GIT_LS_FILES_MAX_OUTPUT, LIST_ENTRIES_TIMEOUT)
            if res.exit_code == 0 and not res.timed_out:
                out = []
                for line in res.output.split("\n"):
                    line = line.rstrip("\r").replace("\\", "/")
                    if not line or (max_depth > 0 and _depth(line) > max_depth):
                        continue
                    if os.path.isfile(os.path.join(base, line)):
                        out.append((line, False))
                return out, "", False
        out, truncated, stack = [], False, [(base, "", 0)]
        while stack:
            if time.monotonic() >= deadline:
                return out, "", True
            d, rel_dir, depth = stack.pop()
            try:
                it = list(os.scandir(d))
            except PermissionError:
                continue
            except OSError:
                truncated = True
                continue
            for e in it:
                rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
                try:
                    is_dir = e.is_dir()
                except OSError:
                    continue
                if is_dir:
                    if kind in ("dir", "all"):
                        out.append((rel, True))
                    if e.name in JUNK_DIR_NAMES:
                        continue
                    if not e.is_symlink() and (max_depth == 0 or depth + 1 < max_depth):
                        stack.append((e.path, rel, depth + 1))
                elif e.is_file() and kind in ("file", "all"):
                    out.append((rel, False))
        return out, "", truncated


def _quote_join(argv: list[str]) -> str:
    return " ".join("'" + a.replace("'", "'\\''") + "'" for a in argv)


class IsolateIO:
    """tools_io_isolate: every operation is a POSIX command in a container or over ssh."""

    def __init__(self, cwd: str = ""):
        self.cwd = cwd

    def build_argv(self, inner: list[str], needs_stdin: bool) -> list[str]:
        raise NotImplementedError

    def resolve(self, path: str) -> str:
        if not self.cwd or path.startswith("/"):
            return path
        return self.cwd + "/" + path

    def _exec(self, inner, max_output, combine_stderr=True) -> ExecResult:
        return run_subprocess(self.build_argv(inner, False), max_output, ISOLATE_EXEC_TIMEOUT,
                              None, combine_stderr)

    def _test(self, flag: str, path: str) -> bool:
        r = self._exec(["sh", "-c", f'[ {flag} "$1" ]', "_", path], 4096)
        return r.exit_code == 0 and not r.timed_out

    def is_directory(self, path: str) -> bool:
        return self._test("-d", self.resolve(path))

    def is_regular_file(self, path: str) -> bool:
        return self._test("-f", self.resolve(path))

    def file_size(self, path: str) -> int | None:
        r = self._exec(["sh", "-c", 'wc -c < "$1"', "_", self.resolve(path)], 64)
        if r.exit_code != 0 or r.timed_out:
            return None
        try:
            return int(r.output.split()[0])
        except (ValueError, IndexError):
            return None

    def read_file(self, path: str) -> bytes | None:
        r = self._exec(["cat", "--", self.resolve(path)], ISOLATE_READ_FILE_MAX_SIZE, False)
        return None if r.exit_code != 0 or r.timed_out else _enc(r.output)

    def write_file(self, path: str, content: bytes) -> bool:
        r = run_subprocess(self.build_argv(["sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"',
                                            "_", self.resolve(path)], True),
                           4096, ISOLATE_EXEC_TIMEOUT, None, True, "", content)
        return r.exit_code == 0 and not r.timed_out

    def run(self, args, max_output, timeout, on_chunk=None) -> ExecResult:
        inner = ["timeout", f"{timeout}s", *args]
        if self.cwd:
            inner = ["sh", "-c", 'cd "$1" || exit 127; shift; exec "$@"', "_", self.cwd, *inner]
        return run_subprocess(self.build_argv(inner, True), max_output, timeout + 5, on_chunk)

    @staticmethod
    def _split(text: str, strip_dot_slash: bool) -> list[str]:
        out = []
        for line in text.split("\n"):
            line = line.rstrip("\r")
            if not line:
                continue
            if strip_dot_slash and line.startswith("./"):
                line = line[2:]
            out.append(line.replace("\\", "/"))
        return out

    def _find(self, base: str, max_depth: int, dirs: bool):
        prune = " -o ".join(f"-name {n}" for n in (".git", ".svn", ".hg", "node_modules",
                                                   "__pycache__", ".venv", "venv", "dist", "build",
                                                   "target", ".cache", ".idea", ".vscode"))
        cmd = 'cd "$1" && find . -mindepth 1'
        if max_depth > 0:
            cmd += f" -maxdepth {max_depth}"
        cmd += f" \\( {prune} \\) -prune"
        cmd += " -print -o -type d -print" if dirs else " -o -type f -print"
        r = self._exec(["sh", "-c", cmd, "_", base], GIT_LS_FILES_MAX_OUTPUT)
        return self._split(r.output, True), r.timed_out

    def list_entries(self, base: str, max_depth: int, kind: str):
        abs_base = self.resolve(base)
        if not self.is_directory(base):
            return [], "path does not exist or is not a directory", False
        if kind == "file":
            r = self._exec(["sh", "-c", 'cd "$1" && git ls-files --cached --others '
                            '--exclude-standard', "_", abs_base], GIT_LS_FILES_MAX_OUTPUT)
            if r.exit_code == 0 and not r.timed_out:
                return [(rel, False) for rel in self._split(r.output, False)
                        if not (max_depth > 0 and _depth(rel) > max_depth)], "", False
        out, truncated = [], False
        if kind in ("dir", "all"):
            rels, t = self._find(abs_base, max_depth, True)
            out += [(r, True) for r in rels]
            truncated |= t
        if kind in ("file", "all"):
            rels, t = self._find(abs_base, max_depth, False)
            out += [(r, False) for r in rels]
            truncated |= t
        return out, "", truncated


class ContainerIO(IsolateIO):
    """An already running docker/podman container, through `<engine> exec [-i] <id>`."""

    def __init__(self, engine: str, container_id: str, cwd: str = ""):
        super().__init__(cwd)
        self.engine, self.container_id = engine, container_id

    def build_argv(self, inner, needs_stdin):
        return [self.engine, "exec", *(["-i"] if needs_stdin else []), self.container_id, *inner]


class SshIO(IsolateIO):
    """A remote POSIX host over ssh (remoting, not isolation): batch mode, key-only, a trusted
    host key; the command travels as one quoted word."""

    def __init__(self, target: str, cwd: str = ""):
        super().__init__(cwd)
        self.target = target

    @staticmethod
    def valid_target(target: str) -> bool:
        return bool(target) and target[0] != "-" and all(
            c.isascii() and (c.isalnum() or c in ".-_@") for c in target)

    def build_argv(self, inner, needs_stdin):
        argv = ["ssh", "-o", "BatchMode=yes", "-o", "PasswordAuthentication=no",
                "-o", "KbdInteractiveAuthentication=no", "-o", "StrictHostKeyChecking=yes"]
        if not needs_stdin:
            argv.append("-n")
        return argv + [self.target, _quote_join(inner)]


def parse_container_spec(spec: str):
    """'<engine>-container:<id>' -> (engine, id, True); '<engine>:<image>' -> (engine, image,
    False); anything else None."""
    for engine in ("docker", "podman"):
        if spec.startswith(engine + "-container:"):
            return engine, spec[len(engine) + 11:], True
        if spec.startswith(engine + ":"):
            return engine, spec[len(engine) + 1:], False
    return None


def valid_container_id(cid: str) -> bool:
    return bool(cid) and cid[0].isascii() and cid[0].isalnum() and all(
        c.isascii() and (c.isalnum() or c in ".-_") for c in cid)


def make_io(params: dict):
    """make_tools_io: the host, or the runtime the request names (never a silent fallback)."""
    cwd, runtime = _jv(params, "cwd", ""), _jv(params, "runtime", "")
    if not runtime:
        return HostIO(cwd)
    spec = parse_container_spec(runtime)
    if spec is not None:
        engine, arg, attach = spec
        if not attach:
            raise ToolError(f"tool runtime must name a running container: {runtime}")
        if not valid_container_id(arg):
            raise ToolError(f"invalid container id: {arg}")
        return ContainerIO(engine, arg, cwd)
    if runtime.startswith("ssh:"):
        target = runtime[4:]
        if not SshIO.valid_target(target):
            raise ToolError(f"invalid ssh target: {target}")
        return SshIO(target, cwd)
    raise ToolError(f"unknown tool runtime: {runtime}")


# ---- the tools -----------------------------------------------------------------------------------
def _fn(name: str, description: str, properties: dict, required: list[str] | None = None) -> dict:
    params = {"type": "object", "properties": properties}
    if required is not None:
        params["required"] = required
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": params}}


def _p(typ: str, desc: str) -> dict:
    return {"type": typ, "description": desc}


class Tool:
    name = display_name = ""
    permission_write = support_stream = uses_cwd = False
    kind = "server"

    def definition(self) -> dict:
        raise NotImplementedError

    def invoke(self, params: dict, stream=None):
        raise NotImplementedError

    def to_json(self) -> dict:
        return {"display_name": self.display_name, "tool": self.name, "type": self.kind,
                "permissions": {"write": self.permission_write}, "uses_cwd": self.uses_cwd,
                "definition": self.definition()}


class ReadFile(Tool):
    name, display_name, uses_cwd = "read_file", "Read file", True

    def definition(self):
        return _fn(self.name, "Read the contents of a file. Optionally specify a 1-based line "
                   "range. If append_loc is true, each line is prefixed with its line number "
                   "(e.g. \"1\u2192...\").", {
                       "path": _p("string", "Path to the file"),
                       "start_line": _p("integer", "First line to read, 1-based (default: 1)"),
                       "end_line": _p("integer", "Last line to read, 1-based inclusive "
                                      "(default: end of file)"),
                       "append_loc": _p("boolean", "Prefix each line with its line number")},
                   ["path"])

    def invoke(self, params, stream=None):
        path = _req(params, "path")
        start, end = _jv(params, "start_line", 1), _jv(params, "end_line", -1)
        append_loc = _jv(params, "append_loc", False)
        as_b64 = _jv(params, "resp_type", "") == "base64"
        io = make_io(params)
        size = io.file_size(path)
        if size is None:
            return {"error": f"cannot stat file: {path}"}
        if as_b64:
            if size > READ_FILE_MAX_SIZE_BASE64:
                return {"error": f"file too large ({size} bytes, max {READ_FILE_MAX_SIZE_BASE64})"}
            data = io.read_file(path)
            if data is None:
                return {"error": f"failed to open file: {path}"}
            return {"base64": base64.b64encode(data).decode("ascii"), "size_bytes": len(data)}
        if size > READ_FILE_MAX_SIZE and end == -1:
            return {"error": f"file too large ({size} bytes, max {READ_FILE_MAX_SIZE}). Use "
                             "start_line/end_line to read a portion."}
        data = io.read_file(path)
        if data is None:
            return {"error": f"failed to open file: {path}"}
        result, n = bytearray(), 0
        for line in data.split(b"\n")[:-1] if data.endswith(b"\n") else data.split(b"\n"):
            n += 1
            if n < start:
                continue
            if end != -1 and n > end:
                break
            out = (str(n).encode() + "\u2192".encode() if append_loc else b"") + line + b"\n"
            if len(result) + len(out) > READ_FILE_MAX_SIZE:
                result += b"[output truncated]"
                break
            result += out
        if not data:
            result = bytearray()
        return {"plain_text_response": _clean(_dec(bytes(result)))}


class FileGlobSearch(Tool):
    name, display_name, uses_cwd = "file_glob_search", "File search", True

    def definition(self):
        return _fn(self.name,
                   "Recursively search for files matching a glob pattern under a directory. "
                   "Automatically skips files ignored by .gitignore (when the directory is inside "
                   "a git repo) and common junk directories (.git, node_modules, build, dist, "
                   "etc.) otherwise. A pattern with no '/' (e.g. \"*.cpp\") matches the file's "
                   "basename at any depth. A pattern containing '/' matches the full relative "
                   "path; unless already anchored with \"**/\" or a leading '/', it is "
                   "automatically prefixed with \"**/\". Use type=\"dir\" or \"all\" to also list "
                   "directories; directory entries are suffixed with '/' in the output. Note: "
                   "directory listings do not apply .gitignore filtering.", {
                       "path": _p("string", "Base directory to search in"),
                       "include": _p("string", "Glob pattern for files to include (e.g. "
                                     "\"*.cpp\" or \"src/**/*.cpp\"). Default: **"),
                       "exclude": _p("string", "Glob pattern for files to exclude"),
                       "type": _p("string", "Entry type to return: \"file\" (default), \"dir\" "
                                  "or \"all\""),
                       "max_depth": _p("integer", "Maximum depth to descend into subdirectories "
                                       "(default: 0 = unlimited; 1 = direct children only)"),
                       "limit": _p("integer", f"Maximum number of results to return, capped at "
                                   f"{FILE_SEARCH_MAX_RESULTS} (default "
                                   f"{FILE_SEARCH_MAX_RESULTS})")}, ["path"])

    def invoke(self, params, stream=None):
        io = make_io(params)
        path = _req(params, "path")
        base = io.resolve(path)
        include, exclude = _jv(params, "include", "**"), _jv(params, "exclude", "")
        typ = _jv(params, "type", "file")
        max_depth = max(0, _jv(params, "max_depth", 0))
        limit_req = _jv(params, "limit", FILE_SEARCH_MAX_RESULTS)
        if limit_req < 1:
            return {"error": f"invalid limit: {limit_req} (expected 1 or more)"}
        limit = min(limit_req, FILE_SEARCH_MAX_RESULTS)
        if typ not in ("file", "dir", "all"):
            return {"error": f"invalid type: {typ} (expected \"file\", \"dir\" or \"all\")"}
        entries, err, truncated = io.list_entries(base, max_depth, typ)
        if err:
            return {"error": f"{err}: {path}"}
        matches = [(rel, d) for rel, d in entries if path_glob_match(include, rel)
                   and not (exclude and path_glob_match(exclude, rel))]
        shown = matches[:limit]
        text = "".join(f"{rel}{'/' if d else ''}\n" for rel, d in shown)
        text += f"\n---\nTotal matches: {len(matches)}\n"
        if len(matches) > len(shown):
            text += (f"[{len(shown)} results limit reached ({len(matches)} total matches). "
                     "Refine the glob pattern to narrow the search.]\n")
        if truncated:
            text += "[results truncated: time budget or unreadable directory]\n"
        return {"plain_text_response": _clean(text),
                "entries": [{"path": _clean(rel), "type": "dir" if d else "file"}
                            for rel, d in shown], "base": _clean(base)}


class GrepSearch(Tool):
    name, display_name, uses_cwd = "grep_search", "Grep search", True

    def definition(self):
        return _fn(self.name,
                   "Search for a pattern in files under a path. Returns matching lines with file "
                   "paths (and, unless searching a single file, paths relative to the given "
                   "directory). Automatically skips files ignored by .gitignore (when the "
                   "directory is inside a git repo) and common junk directories (.git, "
                   "node_modules, build, dist, etc.) otherwise. include/exclude: a pattern with "
                   "no '/' matches the basename at any depth; a pattern containing '/' matches "
                   "the full relative path (auto-anchored with \"**/\" unless already anchored).", {
                       "path": _p("string", "File or directory to search in"),
                       "pattern": _p("string", "Pattern to search for (regular expression unless "
                                     "literal is true)"),
                       "include": _p("string", "Glob pattern to filter files (default: **)"),
                       "exclude": _p("string", "Glob pattern to exclude files"),
                       "return_line_numbers": _p("boolean", "If true, include line numbers in "
                                                 "results"),
                       "literal": _p("boolean", "Treat pattern as a literal string instead of a "
                                     "regular expression (default: false)"),
                       "ignore_case": _p("boolean", "Case-insensitive search (default: false)"),
                       "context_lines": _p("integer", "Number of lines of context to show before "
                                           "and after each match (default: 0)")},
                   ["path", "pattern"])

    def invoke(self, params, stream=None):
        import re
        path, pat = _req(params, "path"), _req(params, "pattern")
        include, exclude = _jv(params, "include", "**"), _jv(params, "exclude", "")
        show_lineno = _jv(params, "return_line_numbers", False)
        literal, icase = _jv(params, "literal", False), _jv(params, "ignore_case", False)
        ctx = max(0, _jv(params, "context_lines", 0))
        src = "".join("\\" + c if c in "\\^$.|?*+()[]{}" else c for c in pat) if literal else pat
        try:
            rx = re.compile(src, re.IGNORECASE if icase else 0)
        except re.error as e:
            return {"error": f"invalid regex: {e}"}
        io = make_io(params)
        files = []
        abs_path = io.resolve(path)
        if io.is_regular_file(abs_path):
            files.append((abs_path, path))
        elif io.is_directory(abs_path):
            entries, err, _ = io.list_entries(abs_path, 0, "file")
            if err:
                return {"error": f"{err}: {path}"}
            for rel, _d in entries:
                if path_glob_match(include, rel) and not (exclude and
                                                          path_glob_match(exclude, rel)):
                    files.append((os.path.join(abs_path, rel) if isinstance(io, HostIO)
                                  else abs_path.rstrip("/") + "/" + rel, rel))
        else:
            return {"error": f"path does not exist: {path}"}
        out, total, limited = [], 0, False
        show_num = show_lineno or ctx > 0
        for fpath, shown_path in files:
            if limited:
                break
            data = io.read_file(fpath)
            if data is None:
                continue
            lines = _lines(_dec(data))
            for i, line in enumerate(lines):
                if total >= GREP_SEARCH_MAX_RESULTS:
                    limited = True
                    break
                if not rx.search(line):
                    continue
                lo = max(0, i - ctx) if ctx > 0 else i
                hi = min(len(lines) - 1, i + ctx) if ctx > 0 else i
                for j in range(lo, hi + 1):
                    sep = ":" if j == i else "-"
                    out.append(f"{shown_path}{sep}{f'{j + 1}{sep}' if show_num else ''}"
                               f"{lines[j]}\n")
                if ctx > 0:
                    out.append("--\n")
                total += 1
        text = "".join(out) + f"\n---\nTotal matches: {total}\n"
        if limited:
            text += (f"[{GREP_SEARCH_MAX_RESULTS} matches limit reached. Narrow the "
                     "path/pattern/include to see more.]\n")
        return {"plain_text_response": _clean(text)}


class ExecShellCommand(Tool):
    name, display_name = "exec_shell_command", "Execute shell command"
    uses_cwd = permission_write = support_stream = True

    def definition(self):
        return _fn(self.name, "Execute a shell command and return its output (stdout and stderr "
                   "combined).", {
                       "command": _p("string", "Shell command to execute"),
                       "timeout": _p("integer", f"Timeout in seconds (default 10, max "
                                     f"{EXEC_MAX_TIMEOUT})"),
                       "max_output_size": _p("integer", f"Maximum output size in bytes (default "
                                             f"{EXEC_MAX_OUTPUT_SIZE})")}, ["command"])

    def invoke(self, params, stream=None):
        command = _req(params, "command")
        timeout = min(_jv(params, "timeout", 10), EXEC_MAX_TIMEOUT)
        max_output = min(_jv(params, "max_output_size", EXEC_MAX_OUTPUT_SIZE),
                         EXEC_MAX_OUTPUT_SIZE)
        max_output = max_output if max_output >= 0 else EXEC_MAX_OUTPUT_SIZE
        args = ["sh", "-c", command]
        io = make_io(params)
        if stream is not None:
            def chunk(text):
                stream.push(text)
                return stream.alive()
            res = io.run(args, max_output, timeout, chunk)
            if not stream.alive():
                return None
            tail = f"\n[exit code: {res.exit_code}]"
            if res.timed_out:
                tail += " [exit due to timed out]"
            stream.push(tail)
            return None
        res = io.run(args, max_output, timeout)
        text = res.output + f"\n[exit code: {res.exit_code}]"
        if res.timed_out:
            text += " [exit due to timed out]"
        return {"plain_text_response": _clean(text)}


class WriteFile(Tool):
    name, display_name = "write_file", "Write file"
    uses_cwd = permission_write = True

    def definition(self):
        return _fn(self.name, "Write content to a file, creating it (including parent "
                   "directories) if it does not exist. May use with edit_file for more complex "
                   "edits.", {"path": _p("string", "Path of the file to write"),
                              "content": _p("string", "Content to write")}, ["path", "content"])

    def invoke(self, params, stream=None):
        path, content = _req(params, "path"), _enc(_req(params, "content"))
        if not make_io(params).write_file(path, content):
            return {"error": f"failed to write file: {path}"}
        return {"result": "file written successfully", "path": path, "bytes": len(content)}


_FUZZY = ([(chr(c), "'") for c in (0x2018, 0x2019, 0x201A, 0x201B)]
          + [(chr(c), '"') for c in (0x201C, 0x201D, 0x201E, 0x201F)]
          + [(chr(c), "-") for c in range(0x2010, 0x2016)] + [("\u2212", "-"), ("\u00a0", " ")]
          + [(chr(c), " ") for c in range(0x2002, 0x200B)]
          + [("\u202f", " "), ("\u205f", " "), ("\u3000", " ")])


def _fuzzy_line(line: str) -> str:
    s = line.rstrip(" \t\r")
    for a, b in _FUZZY:
        s = s.replace(a, b)
    return s


def _fuzzy(text: str) -> str:
    """Trailing blanks stripped and typographic quotes, dashes and spaces made ASCII, per line
    (the line count and positions are kept)."""
    return "\n".join(_fuzzy_line(ln) for ln in text.split("\n"))


def _count(content: str, needle: str) -> int:
    if not needle:
        return 0
    n = pos = 0
    while (pos := content.find(needle, pos)) != -1:
        n += 1
        pos += len(needle)
    return n


def _split_keep(text: str) -> list[str]:
    out, start = [], 0
    while start < len(text):
        nl = text.find("\n", start)
        if nl == -1:
            out.append(text[start:])
            break
        out.append(text[start:nl + 1])
        start = nl + 1
    return out


def _apply(content: str, reps: list, offset: int) -> str:
    for _i, idx, length, new in reversed(reps):
        local = idx - offset
        content = content[:local] + new + content[local + length:]
    return content


def _apply_keeping_lines(original: str, base: str, reps: list) -> str:
    orig_lines = _split_keep(original)
    spans, off = [], 0
    for ln in _split_keep(base):
        spans.append((off, off + len(ln)))
        off += len(ln)
    groups = []
    for rep in reps:
        _i, idx, length, _new = rep
        start_line = next((i for i, (a, b) in enumerate(spans) if a <= idx < b), 0)
        end_line = start_line
        while end_line < len(spans) and spans[end_line][1] < idx + length:
            end_line += 1
        end_line += 1
        if groups and start_line < groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], end_line)
            groups[-1][2].append(rep)
        else:
            groups.append([start_line, end_line, [rep]])
    out, k = [], 0
    for s, e, group in groups:
        out += orig_lines[k:s]
        a, b = spans[s][0], spans[e - 1][1]
        out.append(_apply(base[a:b], group, a))
        k = e
    out += orig_lines[k:]
    return "".join(out)


class EditFile(Tool):
    name, display_name = "edit_file", "Edit file"
    uses_cwd = permission_write = True

    def definition(self):
        item = {"type": "object", "properties": {
            "old_text": _p("string", "Exact text to find; must be unique in the file and must not "
                           "overlap with other edits"),
            "new_text": _p("string", "Text to replace old_text with")},
            "required": ["old_text", "new_text"]}
        return _fn(self.name, "Edit a file using exact text replacement. Each edits[].old_text "
                   "must be unique in the file and is matched against the original content, not "
                   "incrementally. Merge nearby changes into one edit instead of overlapping "
                   "edits. Use write_file to replace the whole file.", {
                       "path": _p("string", "Path to the file to edit"),
                       "edits": {"type": "array", "description": "One or more exact text "
                                 "replacements to apply", "items": item}}, ["path", "edits"])

    def invoke(self, params, stream=None):
        path = _req(params, "path")
        if "edits" not in params:
            raise BadRequest("[json.exception.out_of_range.403] key 'edits' not found")
        edits_json = params["edits"]
        if not isinstance(edits_json, list) or not edits_json:
            return {"error": "\"edits\" must be a non-empty array"}
        edits = []
        for e in edits_json:
            if not isinstance(e, dict):
                raise BadRequest("[json.exception.type_error.304] cannot use at() with "
                                 + _json_type(e))
            old, new = _req(e, "old_text"), _req(e, "new_text")
            if not old:
                return {"error": f"edits[{len(edits)}].old_text must not be empty"}
            edits.append((old, new))
        io = make_io(params)
        data = io.read_file(path)
        if data is None:
            return {"error": f"failed to open file: {path}"}
        original = _dec(data)
        any_fuzzy = False
        for i, (old, _new) in enumerate(edits):
            if old in original:
                continue
            if _fuzzy(old) not in _fuzzy(original):
                return {"error": f"could not find edits[{i}].old_text in {path}, it must match "
                                 "the file's current content exactly"}
            any_fuzzy = True
        base = _fuzzy(original) if any_fuzzy else original
        matched = []
        for i, (old, new) in enumerate(edits):
            needle = _fuzzy(old) if any_fuzzy else old
            n = _count(_fuzzy(original), _fuzzy(old))
            if n > 1:
                return {"error": f"found {n} occurrences of edits[{i}].old_text in {path}, it "
                                 "must be unique"}
            matched.append((i, base.find(needle), len(needle), new))
        matched.sort(key=lambda m: m[1])
        for a, b in zip(matched, matched[1:]):
            if a[1] + a[2] > b[1]:
                return {"error": f"edits[{a[0]}] and edits[{b[0]}] overlap in {path}; merge them "
                                 "into one edit or target disjoint regions"}
        new_content = (_apply_keeping_lines(original, base, matched) if any_fuzzy
                       else _apply(base, matched, 0))
        if new_content == original:
            return {"error": "no changes made: the replacement(s) produced identical content"}
        if not io.write_file(path, _enc(new_content)):
            return {"error": f"failed to write file: {path}"}
        return {"result": "file edited successfully", "path": path, "edits_applied": len(matched)}


class GetInfo(Tool):
    name, display_name, uses_cwd = "get_info", "Get Runtime Info", True

    def definition(self):
        return {"type": "function", "function": {
            "name": self.name, "description": "Returns runtime info: the OS name/version and the "
            "current working directory", "parameters": {"type": "object", "properties": {}}}}

    def invoke(self, params, stream=None):
        io = make_io(params)
        res = io.run(["uname", "-a"], GET_INFO_MAX_OUTPUT, GET_INFO_TIMEOUT)
        os_info = res.output.strip() if res.exit_code == 0 and not res.timed_out else "unknown"
        cwd = _jv(params, "cwd", "")
        if not cwd:
            if not _jv(params, "runtime", ""):
                cwd = os.getcwd()
            else:
                pwd = io.run(["pwd"], GET_INFO_MAX_OUTPUT, GET_INFO_TIMEOUT)
                cwd = pwd.output.strip() if pwd.exit_code == 0 and not pwd.timed_out else "unknown"
        return {"os": _clean(os_info), "cwd": _clean(cwd)}


class McpTool(Tool):
    """One tool of an MCP server (pyllama/server/mcp.py), named `<server>_<tool>`."""
    kind = "mcp"

    def __init__(self, tool_def: dict, manager):
        self.server_name, self.tool_name = tool_def["server_name"], tool_def["name"]
        self.name = self.display_name = f"{self.server_name}_{self.tool_name}"
        self.description = tool_def.get("description", "")
        self.input_schema = tool_def.get("input_schema")
        self.manager = manager

    def definition(self):
        schema = self.input_schema if isinstance(self.input_schema, dict) else {}
        return {"type": "function", "function": {"name": self.name,
                                                 "description": self.description,
                                                 "parameters": schema}}

    def invoke(self, params, stream=None):
        return self.manager.call_tool(self.server_name, self.tool_name, params)


def all_tools() -> list[Tool]:
    return [ReadFile(), FileGlobSearch(), GrepSearch(), ExecShellCommand(), WriteFile(),
            EditFile(), GetInfo()]


# ---- --tools-runtime -----------------------------------------------------------------------------
class ContainerRuntime:
    """`--tools-runtime <engine>:<image>`: `<engine> run --rm -i --cidfile F <image> sh` kept
    alive by its open stdin, respawned when it died, stopped (stdin closed; --rm removes it) at
    server exit."""

    def __init__(self, engine: str, image: str):
        if not image:
            raise ToolError(f"--tools-runtime {engine}:<image> requires an image name")
        self.engine, self.image, self.proc, self.cid = engine, image, None, ""
        self.lock = threading.Lock()
        self._spawn()

    def _spawn(self) -> None:
        if shutil.which(self.engine) is None:
            raise ToolError(f"failed to spawn {self.engine} container for tools runtime "
                            f"(image: {self.image})")
        cidfile = os.path.join(tempfile.gettempdir(),
                               f"llama-tools-runtime-cid-{os.getpid()}-{threading.get_ident()}.tmp")
        try:
            os.remove(cidfile)
        except OSError:
            pass
        try:
            self.proc = subprocess.Popen([self.engine, "run", "--rm", "-i", "--cidfile", cidfile,
                                          self.image, "sh"], stdin=subprocess.PIPE,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except OSError:
            raise ToolError(f"failed to spawn {self.engine} container for tools runtime "
                            f"(image: {self.image})") from None
        cid = ""
        for _ in range(100):
            try:
                with open(cidfile) as f:
                    cid = f.readline().strip()
            except OSError:
                cid = ""
            if cid:
                break
            time.sleep(0.1)
        try:
            os.remove(cidfile)
        except OSError:
            pass
        if not cid:
            self.proc.kill()
            raise ToolError(f"timed out waiting for {self.engine} container to start "
                            f"(image: {self.image})")
        self.cid = cid

    def spec(self) -> str:
        with self.lock:
            if self.proc.poll() is not None:
                log.warning(f"srv  {self.engine} tools runtime container \"{self.cid}\" died, "
                            "respawning")
                self._spawn()
            return f"{self.engine}-container:{self.cid}"

    def close(self) -> None:
        if self.proc is not None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


class StaticRuntime:
    def __init__(self, spec: str):
        make_io({"runtime": spec})          # reject a bad spec at start-up
        self._spec = spec

    def spec(self) -> str:
        return self._spec

    def close(self) -> None:
        pass


def make_runtime(spec: str):
    parsed = parse_container_spec(spec)
    if parsed is not None and not parsed[2]:
        return ContainerRuntime(parsed[0], parsed[1])
    return StaticRuntime(spec)


# ---- /tools --------------------------------------------------------------------------------------
class _Stream:
    def __init__(self, q: queue.Queue, alive):
        self.q, self.alive = q, alive

    def push(self, chunk: str) -> None:
        if chunk:
            self.q.put({"chunk": chunk})


def _error_body(message: str, code: int) -> dict:
    """format_error_response: the bare {code, message, type} object, as server-tools.cpp sends."""
    return {"code": code, "message": message,
            "type": "invalid_request_error" if code == 400 else "server_error"}


def _json(obj, status: int = 200) -> Response:
    return Response(msgspec.json.encode(obj), status_code=status, media_type=_JSON)


class Tools:
    """The enabled tools and the /tools handlers (server_tools::setup)."""

    def __init__(self, enabled: list[str], mcp=None, runtime_spec: str = ""):
        self.runtime = make_runtime(runtime_spec) if runtime_spec else None
        self.tools: list[Tool] = []
        if enabled:
            known = all_tools()
            names = [t.name for t in known]
            for n in enabled:
                if n != "all" and n not in names:
                    raise ToolError(f"unknown tool \"{n}\". available tools: {', '.join(names)}")
            self.tools = [t for t in known if t.name in enabled or "all" in enabled]
        if mcp is not None and not mcp.empty():
            seen = {t.name for t in self.tools}
            added = 0
            for d in mcp.list_tools():
                name = f"{d['server_name']}_{d['name']}"
                if name in seen:
                    log.warning(f"srv  MCP tool \"{name}\" from server \"{d['server_name']}\" "
                                "collides with an existing tool, skipping")
                    continue
                seen.add(name)
                self.tools.append(McpTool(d, mcp))
                added += 1
            if added:
                log.info(f"srv  Added {added} MCP tools")

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.close()

    def find(self, name: str, stream: bool) -> Tool:
        for t in self.tools:
            if t.name == name:
                if stream and not t.support_stream:
                    raise NotFound(f"tool \"{name}\" does not support stream = true")
                return t
        raise NotFound(f"unknown tool \"{name}\"")

    async def handle_get(self, request: Request):
        from starlette.concurrency import run_in_threadpool
        try:
            return _json(await run_in_threadpool(lambda: [t.to_json() for t in self.tools]))
        except Exception as e:     # noqa: BLE001 - llama.cpp answers any failure 500
            return _json(_error_body(str(e), 500), 500)

    def _params(self, body, headers) -> tuple[Tool, dict, bool]:
        if not isinstance(body, dict):
            raise BadRequest("[json.exception.type_error.304] cannot use at() with "
                             + _json_type(body))
        name = _req(body, "tool")
        params = body.get("params", {})
        params = dict(params) if isinstance(params, dict) else {}
        stream = body.get("stream", False) is True
        for key, header in (("cwd", "x-tool-cwd"), ("runtime", "x-tool-runtime"),
                            ("resp_type", "x-resp-type")):
            params.pop(key, None)
            value = headers.get(header, "")
            if value:
                params[key] = value
            elif key == "runtime" and self.runtime is not None:
                params[key] = self.runtime.spec()
        return self.find(name, stream), params, stream

    async def handle_post(self, request: Request):
        from starlette.concurrency import run_in_threadpool
        try:
            raw = await request.body()
            try:
                body = msgspec.json.decode(raw)
            except msgspec.DecodeError as e:
                raise BadRequest(f"[json.exception.parse_error.101] {e}") from None
            tool, params, stream = await run_in_threadpool(self._params, body, request.headers)
            if stream:
                return self._stream(tool, params, request)
            result = await run_in_threadpool(tool.invoke, params, None)
            return _json(result)
        except BadRequest as e:
            return _json(_error_body(str(e), 400), 400)
        except NotFound as e:     # cpp-httplib replaces a 404 body with its own
            log.info(f"srv  operator(): {e}")
            return _json({"error": {"code": 404, "message": "File Not Found",
                                    "type": "not_found_error"}}, 404)
        except Exception as e:     # noqa: BLE001 - ToolError and anything else: 500
            log.error(f"srv  operator(): got exception: {e}")
            return _json(_error_body(str(e), 500), 500)

    def _stream(self, tool: Tool, params: dict, request: Request):
        """`data: {"chunk": ...}` events then `data: {"done": true[, "error"]}`; the tool stops
        (its process is killed) when the client goes away."""
        import asyncio
        q: queue.Queue = queue.Queue()
        gone = threading.Event()
        st = _Stream(q, lambda: not gone.is_set())

        def work():
            done = {"done": True}
            try:
                tool.invoke(params, st)
            except Exception as e:     # noqa: BLE001
                done["error"] = str(e) or "An unknown error occurred"
            q.put(done)
        threading.Thread(target=work, daemon=True).start()

        async def events():
            loop = asyncio.get_running_loop()
            try:
                while True:
                    ev = await loop.run_in_executor(None, q.get)
                    yield b"data: " + msgspec.json.encode(ev) + b"\n\n"
                    if ev.get("done"):
                        return
            finally:
                gone.set()
        return StreamingResponse(events(), media_type="text/event-stream")


async def disabled(request: Request):
    """/tools without --tools or MCP servers (server.cpp res_403)."""
    return _json({"error": {"message": "this feature is disabled", "type": "feature_disabled"}},
                 403)


def setup(cfg):
    """server.cpp: the MCP servers start, then the tools (built-in and MCP) are set up; either
    failing ends the start with one error line. Returns (Tools or None, MCP manager or None)."""
    mcp = None
    if cfg.mcp_servers_config or cfg.mcp_servers_json:
        from .mcp import McpManager
        try:
            mcp = McpManager.start(cfg.mcp_servers_config, cfg.mcp_servers_json)
        except Exception as e:     # noqa: BLE001
            raise SystemExit(f"error: MCP starting failed: {e}") from None
    if not cfg.server_tools and (mcp is None or mcp.empty()):
        return None, mcp
    try:
        tools = Tools(cfg.server_tools, mcp, cfg.server_tools_runtime)
    except Exception as e:         # noqa: BLE001
        if mcp is not None:
            mcp.shutdown()
        raise SystemExit(f"error: tools setup failed: {e}") from None
    names = (["server tools (experimental)"] if cfg.server_tools else []) + \
        (["tools runtime (experimental)"] if cfg.server_tools_runtime else []) + \
        (["MCP servers (experimental)"] if mcp is not None and not mcp.empty() else [])
    log.warning(f"srv  experimental features enabled: {', '.join(names)}")
    return tools, mcp


def routes(tools):
    """GET/POST /tools: the handlers, or 403 when nothing is enabled."""
    from starlette.routing import Route
    if tools is None:
        return [Route("/tools", disabled, methods=["GET", "POST"])]
    return [Route("/tools", tools.handle_get, methods=["GET"]),
            Route("/tools", tools.handle_post, methods=["POST"])]
