"""The /tools requests of tests/server/test_tools_builtin.py, shared with the script that records
llama.cpp's answers (scripts/record_llamacpp_tools.py -> tests/data/llamacpp_tools_builtin.json).

Every case runs on a fresh copy of one small directory tree (TREE) under a temporary directory;
`{ROOT}` in a request stands for that directory and is put back in the answers, so that the
fixture does not depend on where it was recorded. A case is (name, request body, headers, files
to read back afterwards)."""
from __future__ import annotations

import os

TREE = {
    "README.md": "alpha\n",
    "notes.txt": "one\ntwo\nthree\nfour\nfive\n",
    "src/main.cpp": "int main() {\n    return 0; // TODO\n}\n",
    "src/util.cpp": "// TODO: util\nint add(int a, int b) { return a + b; }\n",
    "src/deep/x.h": "#pragma once\n",
    "build/artifact.txt": "TODO built\n",
    "node_modules/pkg/index.js": "TODO js\n",
    "dup.txt": "dup\ndup\n",
    "smart.txt": "say \u201chello\u201d   \nend\n",
    "noeol.txt": "last line",
}


def make_tree(root: str) -> None:
    for rel, text in TREE.items():
        p = os.path.join(root, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(text)


def _t(tool, **params):
    return {"tool": tool, "params": params}


CASES = [
    ("read_whole", _t("read_file", path="{ROOT}/notes.txt"), {}, []),
    ("read_range_loc", _t("read_file", path="{ROOT}/notes.txt", start_line=2, end_line=4,
                          append_loc=True), {}, []),
    ("read_noeol", _t("read_file", path="{ROOT}/noeol.txt"), {}, []),
    ("read_missing", _t("read_file", path="{ROOT}/nope.txt"), {}, []),
    ("read_base64", _t("read_file", path="{ROOT}/README.md"), {"x-resp-type": "base64"}, []),
    ("read_relative_cwd", _t("read_file", path="src/main.cpp", cwd="/not/used"),
     {"x-tool-cwd": "{ROOT}"}, []),
    ("read_no_path", _t("read_file"), {}, []),
    ("glob_default", _t("file_glob_search", path="{ROOT}"), {}, []),
    ("glob_include", _t("file_glob_search", path="{ROOT}", include="*.cpp"), {}, []),
    ("glob_include_slash", _t("file_glob_search", path="{ROOT}", include="src/*.cpp"), {}, []),
    ("glob_exclude", _t("file_glob_search", path="{ROOT}", exclude="*.txt"), {}, []),
    ("glob_dirs", _t("file_glob_search", path="{ROOT}", type="dir"), {}, []),
    ("glob_all_depth1", _t("file_glob_search", path="{ROOT}", type="all", max_depth=1), {}, []),
    ("glob_limit", _t("file_glob_search", path="{ROOT}", limit=2), {}, []),
    ("glob_bad_limit", _t("file_glob_search", path="{ROOT}", limit=0), {}, []),
    ("glob_bad_type", _t("file_glob_search", path="{ROOT}", type="bogus"), {}, []),
    ("glob_not_dir", _t("file_glob_search", path="{ROOT}/README.md"), {}, []),
    ("grep_dir", _t("grep_search", path="{ROOT}", pattern="TODO"), {}, []),
    ("grep_lineno_ctx", _t("grep_search", path="{ROOT}/notes.txt", pattern="thr",
                           context_lines=1), {}, []),
    ("grep_literal_icase", _t("grep_search", path="{ROOT}", pattern="INT ADD(",
                              literal=True, ignore_case=True, return_line_numbers=True), {}, []),
    ("grep_include", _t("grep_search", path="{ROOT}", pattern="TODO", include="*.cpp",
                        exclude="util*"), {}, []),
    ("grep_bad_regex", _t("grep_search", path="{ROOT}", pattern="("), {}, []),
    ("grep_missing", _t("grep_search", path="{ROOT}/missing", pattern="x"), {}, []),
    ("write_new", _t("write_file", path="{ROOT}/new/dir/out.txt", content="hi\n"), {},
     ["new/dir/out.txt"]),
    ("edit_two", {"tool": "edit_file", "params": {"path": "{ROOT}/notes.txt", "edits": [
        {"old_text": "two", "new_text": "TWO"}, {"old_text": "five\n", "new_text": "5\n6\n"}]}},
     {}, ["notes.txt"]),
    ("edit_dup", {"tool": "edit_file", "params": {"path": "{ROOT}/dup.txt", "edits": [
        {"old_text": "dup", "new_text": "x"}]}}, {}, ["dup.txt"]),
    ("edit_overlap", {"tool": "edit_file", "params": {"path": "{ROOT}/notes.txt", "edits": [
        {"old_text": "one\ntwo", "new_text": "a"}, {"old_text": "two", "new_text": "b"}]}},
     {}, ["notes.txt"]),
    ("edit_fuzzy", {"tool": "edit_file", "params": {"path": "{ROOT}/smart.txt", "edits": [
        {"old_text": "say \"hello\"\nend", "new_text": "say bye\nend"}]}}, {}, ["smart.txt"]),
    ("edit_not_found", {"tool": "edit_file", "params": {"path": "{ROOT}/notes.txt", "edits": [
        {"old_text": "zzz", "new_text": "y"}]}}, {}, []),
    ("edit_same", {"tool": "edit_file", "params": {"path": "{ROOT}/notes.txt", "edits": [
        {"old_text": "one", "new_text": "one"}]}}, {}, []),
    ("edit_empty_list", {"tool": "edit_file", "params": {"path": "{ROOT}/notes.txt",
                                                         "edits": []}}, {}, []),
    ("exec_echo", _t("exec_shell_command", command="echo hello; echo err >&2; exit 3"), {}, []),
    ("exec_cwd", _t("exec_shell_command", command="cat README.md"), {"x-tool-cwd": "{ROOT}"},
     []),
    ("exec_truncate", _t("exec_shell_command", command="printf 'abcdefghij'",
                         max_output_size=4), {}, []),
    ("exec_timeout", _t("exec_shell_command", command="echo start; sleep 5", timeout=1), {}, []),
    ("unknown_tool", _t("nope"), {}, []),
    ("stream_unsupported", {"tool": "read_file", "params": {"path": "x"}, "stream": True}, {},
     []),
    ("runtime_unknown", _t("exec_shell_command", command="echo hi"),
     {"x-tool-runtime": "fake:x"}, []),
    ("runtime_ssh_option", _t("exec_shell_command", command="echo hi"),
     {"x-tool-runtime": "ssh:-oProxyCommand=touch /tmp/pwned"}, []),
    ("runtime_container_option", _t("exec_shell_command", command="echo hi"),
     {"x-tool-runtime": "docker-container:--privileged"}, []),
    ("runtime_spawn_form", _t("exec_shell_command", command="echo hi"),
     {"x-tool-runtime": "docker:busybox"}, []),
    ("no_tool_field", {"params": {}}, {}, []),
]


def substitute(obj, root: str):
    """{ROOT} -> root in every string of a request."""
    if isinstance(obj, str):
        return obj.replace("{ROOT}", root)
    if isinstance(obj, list):
        return [substitute(v, root) for v in obj]
    if isinstance(obj, dict):
        return {k: substitute(v, root) for k, v in obj.items()}
    return obj


def normalize(obj, root: str):
    """root -> {ROOT} in every string of an answer; the exit-code tail of an exec stays."""
    if isinstance(obj, str):
        return obj.replace(root, "{ROOT}")
    if isinstance(obj, list):
        return [normalize(v, root) for v in obj]
    if isinstance(obj, dict):
        return {k: normalize(v, root) for k, v in obj.items()}
    return obj


def sort_listing(answer):
    """file_glob_search and grep_search list in walk order, which depends on the directory order
    of the file system: the lines before the summary are compared sorted (and `entries` by
    path)."""
    if not isinstance(answer, dict):
        return answer
    text = answer.get("plain_text_response")
    if isinstance(text, str) and "\n---\nTotal matches: " in text:
        head, sep, tail = text.partition("\n---\n")
        answer = {**answer, "plain_text_response": "\n".join(sorted(head.split("\n"))) + sep
                  + tail}
    if "entries" in answer:
        answer = {**answer, "entries": sorted(answer["entries"], key=lambda e: e["path"])}
    return answer
