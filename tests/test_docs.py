"""The docs a user gets: the README links docs/architecture.md (whose layer table
tests/test_layering.py checks), and no file of the project cites a document a user does not have."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# design documents that live outside the repository (and the old way of citing them)
FOREIGN = re.compile(r"\.\./shared|shared/(design|reference)|ARCHITECTURE(\.md| decision)|"
                     r"LLAMACPP_INTERNALS|LLAMACPP_INTERFACE|STACK_NOTES|STYLE_STUDY|PEERS\.md|"
                     r"\b[Dd]ecisions? \d+\b|§\d")
SCANNED = ("README.md", "setup.py", "pyproject.toml", "pyllama", "tools", "tests", "docs", "bench",
           "cuda", "scripts")
SUFFIXES = (".py", ".pyx", ".h", ".cu", ".cuh", ".md", ".toml", ".json", ".sh", ".txt", ".html",
            ".js", ".css")


def project_files():
    for top in SCANNED:
        path = os.path.join(ROOT, top)
        if os.path.isfile(path):
            yield path
            continue
        for dirpath, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "build")]
            for f in files:
                if f.endswith(SUFFIXES) and f != "GPL-3.txt":
                    yield os.path.join(dirpath, f)


def test_no_citation_of_documents_users_do_not_have():
    me = os.path.abspath(__file__)
    bad = []
    for path in project_files():
        if os.path.abspath(path) == me:
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                if FOREIGN.search(line):
                    bad.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()[:100]}")
    assert not bad, "\n".join(bad)


def test_readme_links_the_architecture_page():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert "docs/architecture.md" in readme
    assert not os.path.exists(os.path.join(ROOT, "docs", "architecture-notes.md"))
