"""Record llama.cpp's own `llama-completion --grammar-file` output for the cases of
llamacpp-tokens.json: tests/data/grammar/llamacpp-completion.json.

    python tests/grammar/make_llamacpp_completion.py [/path/to/llama-completion]

(default /work/llamacpp/build/bin/llama-completion, llama.cpp 0c1e570 built from the sdist of
llama-cpp-python 0.3.36). Each case runs the executable as a user would: the same prompt, grammar
file, -n, --temp, --seed and a 512-token context with one thread, the default sampler chain and
-fa auto; the generated text (stdout with --no-display-prompt, less the "\n\n" printed at exit) is
stored, and whether it ended on end of generation (llama-completion prints " [end of text]"). The models are the bundled
ones under ~/.cache/pyllama.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "grammar")
TOKENS = os.path.join(DATA, "llamacpp-tokens.json")
OUT = os.path.join(DATA, "llamacpp-completion.json")
MODELS = {"gemma-3-270m": "gemma-3-270m-q4_k_m.gguf",
          "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct.gguf"}
EOT = " [end of text]\n"       # completion.cpp: printed on end of generation, then "\n\n" at exit


def split_output(raw: str) -> tuple[str, bool]:
    """(generated text, ended on end of generation) from llama-completion's stdout."""
    if raw.endswith("\n\n"):
        raw = raw[:-2]
    eog = raw.endswith(EOT)
    return (raw[:-len(EOT)] if eog else raw), eog


def run(exe: str, model: str, prompt: str, gbnf_path: str, n: int, temp: float, seed: int):
    r = subprocess.run([exe, "-m", model, "-p", prompt, "-n", str(n), "--temp", repr(temp),
                        "--seed", str(seed), "--grammar-file", gbnf_path, "-c", "512",
                        "-b", "512", "-ub", "512", "-t", "1", "-no-cnv", "--no-display-prompt",
                        "--no-warmup"], capture_output=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.decode(errors="replace")[-2000:])
    return split_output(r.stdout.decode("utf-8"))


def main(argv):
    exe = argv[1] if len(argv) > 1 else "/work/llamacpp/build/bin/llama-completion"
    rec = json.load(open(TOKENS))
    cache = os.path.expanduser("~/.cache/pyllama")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True)
    out = {"source": f"llama.cpp's llama-completion ({(version.stdout + version.stderr).strip()})",
           "n_predict": rec["n_predict"], "cases": []}
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in rec["grammars"].items():
            with open(os.path.join(tmp, name + ".gbnf"), "w", encoding="utf-8") as f:
                f.write(text)
        for c in rec["cases"]:
            got, eog = run(exe, os.path.join(cache, MODELS[c["model"]]), c["prompt"],
                           os.path.join(tmp, c["grammar"] + ".gbnf"), rec["n_predict"],
                           c["temp"], c["seed"])
            out["cases"].append({k: c[k] for k in ("model", "grammar", "mode", "temp", "seed",
                                                   "prompt")} | {"text": got, "eog": eog})
            print(c["model"], c["grammar"], c["mode"], repr(got[:60]), flush=True)
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main(sys.argv)
