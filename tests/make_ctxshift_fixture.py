"""Record llama.cpp 0c1e570's own llama-completion output for the context-shift cases into
tests/data/ctxshift-llamacpp.json (read by tests/tools/test_ctxshift_llamacpp.py).

Usage: python tests/make_ctxshift_fixture.py [/work/llamacpp/build/bin]
Greedy (--temp 0), -no-cnv, one thread; stdout (the prompt and the generated text) is what the
test compares, stderr is searched for the shift / context-full messages.
"""
import json
import os
import subprocess
import sys

PROMPT = ("The history of the city of Rome begins with a small settlement on the banks of the "
          "river Tiber, where shepherds")
CASES = {
    "gemma-c256-shift": ("gemma-3-270m", ["-c", "256", "--context-shift", "--keep", "16",
                                          "-n", "600"]),
    "gemma-c256-noshift": ("gemma-3-270m", ["-c", "256", "-n", "600"]),
    "gemma-c4096-shift": ("gemma-3-270m", ["-c", "4096", "--context-shift", "-n", "8"]),
    "qwen-c512-shift": ("qwen2.5-coder-0.5b", ["-c", "512", "--context-shift", "--keep", "16",
                                               "-n", "1200"]),
}
MESSAGES = ("KV cache shifting is not supported for this context, disabling KV cache shifting",
            "context full and context shift is disabled => stopping")


def main() -> None:
    bindir = sys.argv[1] if len(sys.argv) > 1 else "/work/llamacpp/build/bin"
    from pyllama.models import resolve
    out = {"prompt": PROMPT, "cases": {}}
    for name, (model, args) in CASES.items():
        cmd = [os.path.join(bindir, "llama-completion"), "-m", resolve(model), "-p", PROMPT,
               "--temp", "0", "-no-cnv", "-t", "1", *args]
        r = subprocess.run(cmd, capture_output=True, check=True)
        err = r.stderr.decode("utf-8", "replace")
        out["cases"][name] = {"model": model, "args": args,
                              "stdout": r.stdout.decode("utf-8", "replace"),
                              "messages": [m for m in MESSAGES if m in err]}
        print(name, len(r.stdout), out["cases"][name]["messages"], file=sys.stderr)
    path = os.path.join(os.path.dirname(__file__), "data", "ctxshift-llamacpp.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
