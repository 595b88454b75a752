"""The Python cost of a decode step, load-independent: instructions per token (valgrind's callgrind)
of one-token decodes on a tiny random model whose kernels cost next to nothing, so what is counted
is the interpreter, numpy and the wrappers between the kernels (the "glue").

The model is tests/tiny.py's random-weight architecture with the layer count of a bundled model
(gemma3 with 18 layers: Gemma 3 270M's; qwen2 with 24: Qwen2.5 0.5B's). Each configuration is run
twice under callgrind, with 5 and with 45 decodes after the same prompt; (I(45) - I(5)) / 40 is the
per-token count, free of start-up. `--replay 0,1` compares PYLLAMA_REPLAY off and on; `--tree DIR`
(repeatable) compares builds (git worktrees with built extensions). Needs valgrind.

    PYTHONPATH=. python bench/decode_glue.py [--arch gemma3:18,qwen2:24] [--replay 0,1]
        [--numerics llama.cpp,invariant] [--tree .] [--out bench/results/decode-glue.md]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WORKER = r'''
import sys
import numpy as np
import pyllama
from pyllama.batch import Batch
path, numerics, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = pyllama.load_model(path, n_threads=1)
ctx = pyllama.Context(model, n_ctx=512, n_batch=64, n_ubatch=64, n_threads=1, numerics=numerics,
                      flash_attn=numerics == "llama.cpp")
for i in range(n):
    ctx.decode(Batch(np.asarray([10 + i % 200], np.int32), pos=np.asarray([i], np.int32),
                     seq_ids=[0], logits=np.ones(1, bool)))
    ctx.get_logits_ith(-1)
'''


def instructions(tree: str, path: str, numerics: str, n: int, replay: str) -> int:
    out = tempfile.mktemp(prefix="decode_glue.", suffix=".cg")
    env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{os.path.join(tree, 'tests')}",
               PYLLAMA_REPLAY=replay)
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                    "-c", WORKER, path, numerics, str(n)], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tempfile.gettempdir())
    try:
        with open(out) as f:
            for line in f:
                m = re.match(r"(?:summary|totals):\s+(\d+)", line)
                if m:
                    return int(m.group(1))
    finally:
        os.unlink(out)
    raise RuntimeError("no callgrind total")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="gemma3:18,qwen2:24")
    ap.add_argument("--replay", default="0,1")
    ap.add_argument("--numerics", default="llama.cpp,invariant")
    ap.add_argument("--tree", action="append", help="pyllama tree(s) to compare (default: this)")
    ap.add_argument("--out")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        print("valgrind not found", file=sys.stderr)
        return 1
    trees = args.tree or [ROOT]
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from tiny import write_tiny_gguf
    tmp = tempfile.mkdtemp(prefix="decode_glue.")
    rows = []
    for spec in args.arch.split(","):
        arch, layers = spec.split(":")
        path = write_tiny_gguf(os.path.join(tmp, f"{arch}{layers}.gguf"), arch,
                               overrides={"block_count": int(layers)})
        for numerics in args.numerics.split(","):
            for tree in trees:
                for replay in args.replay.split(","):
                    a = instructions(tree, path, numerics, 5, replay)
                    b = instructions(tree, path, numerics, 45, replay)
                    rows.append((f"{arch} x{layers}", numerics, tree, replay, (b - a) / 40))
                    print(f"{rows[-1][0]} {numerics} {tree} replay={replay}: "
                          f"{rows[-1][4] / 1e6:.2f} M instructions/token", flush=True)
    shutil.rmtree(tmp, ignore_errors=True)
    lines = ["| model | numerics | tree | PYLLAMA_REPLAY | M instructions / token |",
             "|---|---|---|---|---|"]
    lines += [f"| {m} | {nu} | {os.path.basename(os.path.abspath(t))} | {r} | {v / 1e6:.2f} |"
              for m, nu, t, r, v in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write("# Decode glue: instructions per one-token decode on tiny models (callgrind)\n\n"
                    "`" + " ".join(["python", "bench/decode_glue.py"] + sys.argv[1:]) + "`\n\n"
                    + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
