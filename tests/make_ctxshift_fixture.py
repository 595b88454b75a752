"""Record llama.cpp 0c1e570's own llama-completion output for the context-shift cases into
tests/data/ctxshift-llamacpp.json (read by tests/tools/test_ctxshift_llamacpp.py).

Usage: python tests/make_ctxshift_fixture.py [/work/llamacpp/build/bin [CASE ...]]
(named cases only: re-record those, keep the others). Greedy (--temp 0), -no-cnv, one thread;
stdout (the prompt and the generated text) is what the test compares, stderr is searched for
the shift / context-full messages.
"""
import json
import os
import subprocess
import sys

PROMPT = ("The history of the city of Rome begins with a small settlement on the banks of the "
          "river Tiber, where shepherds")
HERE = os.path.dirname(os.path.abspath(__file__))


LONG_PROMPT = (
    "The history of the city of Rome begins with a small settlement on the banks of the river "
    "Tiber. Over the centuries the village of shepherds grew into a town, the town into a "
    "republic, and the republic into an empire that ruled the lands around the Mediterranean "
    "Sea. Its roads ran from Britain to Syria, its laws shaped those of many later states, and "
    "its language became the ancestor of Italian, Spanish, French, Portuguese and Romanian. "
    "Yet the city was never finished: each generation tore down, rebuilt and extended what the "
    "previous one had left. Temples became churches, baths became quarries, and the forum, "
    "once the busy centre of public life, lay buried under meters of earth until the "
    "archaeologists of the nineteenth century dug it out again. Visitors today walk through "
    "streets where medieval towers stand beside ancient columns and baroque fountains, and "
    "every square tells a different part of the story. In the following chapters we will "
    "follow that story from the legendary founding by Romulus to the present day, looking at "
    "the people who lived there, the buildings they left behind, and")


def long_prompt() -> str:
    """About 230 Gemma tokens: the first shift comes after a few generated tokens."""
    return LONG_PROMPT


CASES = {
    # the fast default case: two shifts within 140 tokens, a kept prefix of 100 tokens
    "gemma-c256-keep100-long": ("gemma-3-270m", ["-c", "256", "--context-shift", "--keep", "100",
                                                 "-n", "140"], "long"),
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
    only = sys.argv[2:]
    from pyllama.models import resolve
    path = os.path.join(HERE, "data", "ctxshift-llamacpp.json")
    out = {"prompt": PROMPT, "cases": {}}
    if only and os.path.exists(path):
        with open(path) as f:
            out = json.load(f)
    for name, (model, args, *which) in CASES.items():
        if only and name not in only:
            continue
        prompt = long_prompt() if which == ["long"] else PROMPT
        cmd = [os.path.join(bindir, "llama-completion"), "-m", resolve(model), "-p", prompt,
               "--temp", "0", "-no-cnv", "-t", "1", *args]
        r = subprocess.run(cmd, capture_output=True, check=True)
        err = r.stderr.decode("utf-8", "replace")
        out["cases"][name] = {"model": model, "args": args,
                              "stdout": r.stdout.decode("utf-8", "replace"),
                              "messages": [m for m in MESSAGES if m in err]}
        if prompt != PROMPT:
            out["cases"][name]["prompt"] = prompt
        print(name, len(r.stdout), out["cases"][name]["messages"], file=sys.stderr)
    with open(path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
