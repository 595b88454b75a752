"""Record what llama-cpp-python 0.3.36 itself returns for the calls tests/llamacpp_python checks
pyllama's `Llama` against: tests/data/llamacpp_python/<model>.json.

Run with the oracle venv (llama-cpp-python built by scripts/build_llamacpp.sh), from the repo root:

    /work/oracle/bin/python tests/llamacpp_python/record_fixtures.py

The bundled models are read from $LLAMA_CACHE (default ~/.cache/pyllama), where pyllama.models
assembles them. Completion ids and timestamps are left out (they differ on every call).
"""
import json
import os
import sys

from llama_cpp import Llama, LlamaRAMCache
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

sys.path.insert(0, os.path.dirname(__file__))
from cases import CASES, MODELS, factory, scrub  # noqa: E402

OUT = os.path.join(os.path.dirname(__file__), "..", "data", "llamacpp_python")


def record(alias: str) -> dict:
    path = MODELS[alias]
    llm = factory(Llama, path)
    out = {"info": {}, "cases": {}}
    base = llm()
    out["info"] = {
        "n_vocab": base.n_vocab(), "n_ctx": base.n_ctx(), "token_bos": base.token_bos(),
        "token_eos": base.token_eos(), "token_nl": base.token_nl(),
        "chat_format": base.chat_format,
        "metadata_keys": sorted(base.metadata),
        "metadata": {k: v for k, v in base.metadata.items() if len(v) < 200},
    }
    for name, case in CASES.items():
        print(alias, name, file=sys.stderr)
        out["cases"][name] = scrub(case(llm, Llama, LlamaPromptLookupDecoding, LlamaRAMCache))
    return out


def main():
    os.makedirs(OUT, exist_ok=True)
    for alias in (sys.argv[1:] or list(MODELS)):
        data = record(alias)
        with open(os.path.join(OUT, f"{alias}.json"), "w") as f:
            json.dump(data, f, indent=1, ensure_ascii=False)
            f.write("\n")


if __name__ == "__main__":
    main()
