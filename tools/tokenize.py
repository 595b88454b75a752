"""llama-tokenize: print the token ids (and pieces) of a prompt. Loads only the vocabulary.

Output (stdout, llama.cpp tools/tokenize/tokenize.cpp): one `%6d -> '<piece>'` line per token, or `[id, id, ...]` with --ids, then
`Total number of tokens: N` with --show-count. -f reads the file verbatim (trailing newline kept).
"""
from __future__ import annotations

import sys

from ._args import T
from ._common import guard, parse_or_exit, resolve_model

EXTRA_USAGE = ""


def read_prompt(params) -> str:
    """--stdin wins over -f / -p; -f is re-read verbatim; escapes apply when -e (the default)."""
    from ._convert import process_escapes
    if params.use_stdin:
        text = sys.stdin.buffer.read().decode("utf-8", errors="replace")
        return process_escapes(text) if params.escape else text
    if params.prompt_file:
        with open(params.prompt_file, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        return process_escapes(text) if params.escape else text
    return params.prompt


def format_tokens(ids, piece, ids_only: bool, show_count: bool) -> bytes:
    if ids_only:
        out = ("[" + ", ".join(str(i) for i in ids) + "]\n").encode()
    else:
        out = b"".join(b"%6d -> '" % i + piece(i) + b"'\n" for i in ids)
    if show_count:
        out += f"Total number of tokens: {len(ids)}\n".encode()
    return out


_VOCABS: dict = {}


def load_vocab(path: str):
    """The vocabulary of a GGUF (kept per path and mtime for in-process callers)."""
    import os
    from pyllama.gguf import GGUFReader
    from pyllama.vocab import Vocab
    key = (os.path.abspath(path), os.stat(path).st_mtime_ns)
    if key not in _VOCABS:
        _VOCABS[key] = Vocab.from_gguf(GGUFReader(path))
    return _VOCABS[key]


def run(argv) -> int:
    params = parse_or_exit(T, argv, EXTRA_USAGE)
    if not (params.use_stdin or params.prompt_file or "prompt" in params.set_fields):
        print("error: must specify one of: --stdin, --file or --prompt", file=sys.stderr)
        return 1
    text = read_prompt(params)
    path = resolve_model(params)
    try:
        vocab = load_vocab(path)
    except Exception as e:  # noqa: BLE001 - any load failure is llama.cpp's one message
        print(f"error: could not load model from file '{path}'.", file=sys.stderr)
        if params.verbosity > 3:
            print(f"({type(e).__name__}: {e})", file=sys.stderr)
        return 1
    ids = vocab.tokenize(text, not params.no_bos, params.parse_special)
    out = format_tokens(ids, lambda i: vocab.token_to_piece(i, True), params.ids_only,
                        params.show_count)
    sys.stdout.buffer.write(out)
    sys.stdout.flush()
    return 0


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)
