"""The layer table of docs/architecture.md, checked with ast: a module imports only from its own layer
or below; architecture files see no backend implementation; only backend/cuda imports pycuda;
sampling needs nothing but numpy; private compiled modules stay inside their package."""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (module prefix, layer); the longest matching prefix wins
LAYERS = [
    ("pyllama.tools", 9), ("pyllama.__main__", 9), ("pyllama.synthetic", 9),
    ("pyllama.server", 8), ("pyllama.llama_cpp", 8),
    ("pyllama.speculative", 7), ("pyllama.generate", 7), ("pyllama.perplexity", 7),
    ("pyllama.embedding", 7), ("pyllama.scoring", 7),
    ("pyllama.sampling", 6), ("pyllama.grammar", 6),
    ("pyllama.model", 5), ("pyllama.context", 5), ("pyllama.replay", 5), ("pyllama.adapter", 5),
    ("pyllama.arch", 4), ("pyllama.graph", 4),
    ("pyllama.batch", 3), ("pyllama.kv", 3),
    ("pyllama.backend", 2),
    ("pyllama.quant", 1), ("pyllama.vocab", 1), ("pyllama.hparams", 1),
    ("pyllama.gguf", 0), ("pyllama.errors", 0), ("pyllama.log", 0), ("pyllama.models", 0),
    ("pyllama._cuda", 0), ("pyllama.omp", 0),
]


def layer_of(mod: str):
    best = None
    for prefix, layer in LAYERS:
        if (mod == prefix or mod.startswith(prefix + ".")) and (best is None or
                                                                len(prefix) > len(best[0])):
            best = (prefix, layer)
    return None if best is None else best[1]


def modules():
    for base, pkg in (("pyllama", "pyllama"), ("tools", "pyllama.tools")):
        top = os.path.join(ROOT, base)
        for dirpath, _, files in os.walk(top):
            for f in files:
                if not (f.endswith(".py") or f.endswith(".pyx")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), top)
                parts = rel[:-4 if f.endswith(".pyx") else -3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                    is_pkg = True
                else:
                    is_pkg = False
                name = ".".join([pkg] + parts)
                yield name, os.path.join(dirpath, f), is_pkg


def imports_of(name: str, path: str, is_pkg: bool):
    if path.endswith(".pyx"):
        return []  # Cython sources import only C/numpy
    tree = ast.parse(open(path, encoding="utf-8").read())
    pkg = name if is_pkg else name.rsplit(".", 1)[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
                if node.module is None:
                    out += [f"{mod}.{a.name}" for a in node.names]
                else:
                    out.append(mod)
            else:
                out.append(node.module)
    return out


ALL = list(modules())


@pytest.mark.parametrize("name,path,is_pkg", ALL, ids=[m[0] for m in ALL])
def test_layering(name, path, is_pkg):
    mine = layer_of(name)
    if name == "pyllama":
        return  # the package root re-exports lazily
    assert mine is not None, f"{name} is not in the layer table (docs/architecture.md)"
    for imp in imports_of(name, path, is_pkg):
        if imp.startswith("pycuda"):
            assert name.startswith("pyllama.backend.cuda"), f"{name} imports pycuda"
        if name.startswith("pyllama.sampling"):
            assert imp.split(".")[0] in ("numpy", "pyllama", "math", "dataclasses", "typing",
                                         "__future__", "random", "copy", "collections", "re",
                                         "enum", "functools", "itertools", "bisect", "heapq") \
                and (not imp.startswith("pyllama") or imp.startswith("pyllama.sampling")
                     or imp.startswith("pyllama.grammar")), \
                f"sampling imports {imp}"
        if not imp.startswith("pyllama"):
            continue
        if imp == "pyllama":
            assert mine >= 7, f"{name} imports the package root"
            continue
        theirs = layer_of(imp)
        assert theirs is not None, f"{name} imports {imp}, which is not in the layer table"
        assert theirs <= mine, f"{name} (L{mine}) imports {imp} (L{theirs})"
        if name.startswith("pyllama.arch"):
            assert not imp.startswith("pyllama.backend") or imp == "pyllama.backend.base", \
                f"architecture code {name} imports a backend implementation {imp}"
        last = imp.rsplit(".", 1)[-1]
        if last.startswith("_") and not last.startswith("__"):
            owner = imp.rsplit(".", 1)[0]
            assert name.startswith(owner), f"{name} imports private module {imp}"


@pytest.mark.parametrize("prefix", sorted({p.split(".")[1] for p, _ in LAYERS}))
def test_architecture_page_names_every_layer_module(prefix):
    """docs/architecture.md's layer table is this table: a new module goes into both."""
    page = open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8").read()
    assert prefix in page, f"docs/architecture.md's layer table does not mention {prefix}"
