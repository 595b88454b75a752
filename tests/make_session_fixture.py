"""Record a prompt-cache (session) file written by llama.cpp 0c1e570's own llama-completion into
tests/data/session-gemma-llamacpp.bin.gz, with the text it printed when writing it and when
reading it back, and the token list and sha256 of the --prompt-cache-all file of the same run,
in tests/data/session-gemma-llamacpp.json (read by tests/test_session_llamacpp.py).

Usage: python tests/make_session_fixture.py [/work/llamacpp/build/bin]
Gemma 3 270M, -c 256, greedy, -no-cnv, one thread, flash attention auto (on for the CPU), f16 K/V.
"""
import gzip
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PROMPT = "The capital of France is"
ARGS = ["--temp", "0", "-no-cnv", "-c", "256", "-n", "8"]
MESSAGES = ("session file does not exist, will create.",
            "loaded a session with prompt size of",
            "session file has exact match for prompt!",
            "replayed last token from session",
            "saved session before last token to")


def run(bindir, model, session, *extra):
    cmd = [os.path.join(bindir, "llama-completion"), "-m", model, "-p", PROMPT, "-t", "1",
           *ARGS, "--prompt-cache", session, *extra]
    r = subprocess.run(cmd, capture_output=True, check=True)
    err = r.stderr.decode("utf-8", "replace")
    return {"stdout": r.stdout.decode("utf-8", "replace"),
            "messages": [m for m in MESSAGES if m in err]}


def main() -> None:
    bindir = sys.argv[1] if len(sys.argv) > 1 else "/work/llamacpp/build/bin"
    from pyllama.models import resolve
    model = resolve("gemma-3-270m")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "session.bin")
        save = run(bindir, model, path)
        with open(path, "rb") as f:
            data = f.read()
        load = run(bindir, model, path, "--prompt-cache-ro")
        path_all = os.path.join(d, "all.bin")
        save_all = run(bindir, model, path_all, "--prompt-cache-all")
        with open(path_all, "rb") as f:
            data_all = f.read()
    n_all = struct.unpack_from("<I", data_all, 8)[0]
    save_all.update(path=path_all, size=len(data_all), sha256=hashlib.sha256(data_all).hexdigest(),
                    tokens=list(struct.unpack_from(f"<{n_all}i", data_all, 12)))
    with open(os.path.join(HERE, "data", "session-gemma-llamacpp.bin.gz"), "wb") as f:
        f.write(gzip.compress(data, 9, mtime=0))
    out = {"source": "llama.cpp 0c1e570 llama-completion --prompt-cache", "model": "gemma-3-270m",
           "prompt": PROMPT, "args": ARGS, "size": len(data), "save": save, "load": load,
           "save_all": save_all}
    with open(os.path.join(HERE, "data", "session-gemma-llamacpp.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(len(data), save["messages"], load["messages"], file=sys.stderr)


if __name__ == "__main__":
    main()
