"""Record tests/data/vocab-models-llamacpp.json.gz: llama.cpp's own tokenizer test cases.

llama.cpp ships vocab-only GGUFs with expected tokenizations (models/ggml-vocab-*.gguf and
.gguf.inp / .gguf.out, read by tests/test-tokenizer-0.cpp: inputs separated by
"\\n__ggml_vocab_test__\\n", one line of space-separated ids per input; tokenized with
add_special=false, parse_special=false). This stores, per model, the cases and the part of the
vocab they can reach, so the default test runs without the multi-MB files:
- every token that is not NORMAL (control, user-defined, byte, unknown, unused) and every token
  whose text llama.cpp looks up by name (EOT/EOG/FIM texts), with its id;
- every NORMAL token whose text is a substring of some input in the token's alphabet (byte-level
  characters for BPE, U+2581 for spaces for SPM); the other ids keep a placeholder text that no
  input contains (a pruned token can never be produced: BPE and SPM only build tokens from
  substrings of the input);
- every merge whose result is such a substring (the others never apply), in rank order;
- the SPM scores of the kept tokens.
The relative order of kept merges, all ids and all other metadata are unchanged, so the result
of every case is the one the full vocab gives (the slow test checks that on the full files).

    python tests/make_vocab_models_fixture.py [LLAMA_CPP_DIR]
"""
import glob
import gzip
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

DEFAULT_DIR = os.path.expanduser("~/.cache/pyllama-oracle/llama_cpp_python-0.3.36/vendor/llama.cpp")
OUT = os.path.join(HERE, "data", "vocab-models-llamacpp.json.gz")
SEP = "\n__ggml_vocab_test__\n"
PLACEHOLDER = "\x01"     # pruned token i gets text "\x01<i>"; no input contains \x01


def read_cases(path: str) -> list[tuple[str, list[int]]]:
    """test-tokenizer-0.cpp's read_tests (inputs kept in file order, duplicates kept)."""
    with open(path + ".inp", "rb") as f:
        raw = f.read().decode("utf-8", "surrogateescape")
    with open(path + ".out", "rb") as f:
        outs = f.read().decode().split("\n")
    if outs and outs[-1] == "":
        outs.pop()
    inps, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(SEP, pos)
        if nxt < 0:
            inps.append(raw[pos:])
            break
        inps.append(raw[pos:nxt])
        pos = nxt + len(SEP)
    assert len(inps) == len(outs), path
    return [(s, [int(t) for t in o.strip().split()]) for s, o in zip(inps, outs)]


def _meta(md: dict) -> dict:
    keep = {}
    for k, v in md.items():
        if k.startswith("tokenizer.ggml.") and k not in (
                "tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.scores",
                "tokenizer.ggml.token_type"):
            keep[k] = v if isinstance(v, (bool, int, float, str)) else list(v)
    return keep


def named_texts() -> set[str]:
    from pyllama.vocab import attrs
    out = set(attrs.EOT_TEXTS) | set(attrs.EOM_TEXTS) | set(attrs.EOG_TEXTS)
    out |= set(attrs.ALWAYS_SHOWN)
    for v in attrs.FIM_TEXTS.values():
        out |= set(v)
    return out


def alphabet_forms(model: str, texts: list[str]) -> str:
    from pyllama.vocab.build import SPACE, bytes_to_unicode
    if model == "gpt2":
        b2u = bytes_to_unicode()
        forms = ["".join(b2u[b] for b in t.encode("utf-8", "surrogateescape")) for t in texts]
    else:
        forms = [SPACE + t.replace(" ", SPACE) for t in texts]
    return "\0".join(forms)


def prune(md: dict, texts: list[str]) -> dict:
    """The stored vocab of one model (see module doc)."""
    model = md["tokenizer.ggml.model"]
    tokens = [str(t) for t in md["tokenizer.ggml.tokens"]]
    types = [int(t) for t in md.get("tokenizer.ggml.token_type", [1] * len(tokens))]
    hay = alphabet_forms(model, texts)
    assert PLACEHOLDER not in hay
    named = named_texts()
    kept = {i: t for i, t in enumerate(tokens)
            if types[i] != 1 or t in named or (t and t in hay)}
    rec = {"model": model, "meta": _meta(md), "n_tokens": len(tokens),
           "tokens": [[i, t] for i, t in kept.items()],
           "types": [[i, ty] for i, ty in enumerate(types) if ty != 1]}
    if "tokenizer.ggml.merges" in md:
        rec["merges"] = [m for m in (str(x) for x in md["tokenizer.ggml.merges"])
                         if m.replace(" ", "", 1) in hay]
    if "tokenizer.ggml.scores" in md:
        sc = md["tokenizer.ggml.scores"]
        rec["scores"] = [[i, float(sc[i])] for i in kept]
    return rec


def metadata(rec: dict) -> dict:
    """The GGUF metadata dict of a stored vocab (what Vocab.from_gguf reads)."""
    import numpy as np
    n = rec["n_tokens"]
    tokens = [f"{PLACEHOLDER}{i}" for i in range(n)]
    for i, t in rec["tokens"]:
        tokens[i] = t
    types = np.ones(n, dtype=np.int32)
    for i, ty in rec["types"]:
        types[i] = ty
    md = dict(rec["meta"])
    md.update({"tokenizer.ggml.model": rec["model"], "tokenizer.ggml.tokens": tokens,
               "tokenizer.ggml.token_type": types})
    if "merges" in rec:
        md["tokenizer.ggml.merges"] = rec["merges"]
    if "scores" in rec:
        sc = np.zeros(n, dtype=np.float32)
        for i, s in rec["scores"]:
            sc[i] = s
        md["tokenizer.ggml.scores"] = sc
    return md


def main(root: str = DEFAULT_DIR) -> None:
    from pyllama.gguf import GGUFReader
    models = {}
    for path in sorted(glob.glob(os.path.join(root, "models", "ggml-vocab-*.gguf"))):
        if not os.path.exists(path + ".inp"):
            continue
        name = os.path.basename(path)[len("ggml-vocab-"):-len(".gguf")]
        cases = read_cases(path)
        md = GGUFReader(path).metadata
        if md["tokenizer.ggml.model"] in ("gpt2", "llama"):
            rec = prune(md, [c[0] for c in cases])
        else:   # a tokenizer type pyllama refuses: only the cases and the type
            rec = {"model": md["tokenizer.ggml.model"], "meta": {}}
        rec["pre"] = md.get("tokenizer.ggml.pre")
        rec["cases"] = cases
        models[name] = rec
        print(f"{name}: {rec['model']} {rec['pre']} {len(cases)} cases, "
              f"{len(rec.get('tokens', []))} tokens, {len(rec.get('merges', []))} merges kept")
    data = json.dumps({"source": "llama.cpp 0c1e570 models/ggml-vocab-*.gguf(.inp/.out)",
                       "models": models}, ensure_ascii=False).encode("utf-8", "surrogateescape")
    with gzip.GzipFile(OUT, "wb", mtime=0) as f:
        f.write(data)
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main(*sys.argv[1:])
