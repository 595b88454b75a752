"""Against llama.cpp's own executable: the text `llama-completion --grammar-file` printed for
each grammar case (recorded by make_llamacpp_completion.py into llamacpp-completion.json).

- the tokens of llamacpp-tokens.json (llama-completion's loop rebuilt on llama.cpp's library,
  which test_llamacpp_tokens.py checks pyllama's sampler against token for token) are exactly
  what the executable printed: their pieces give its text, and it stopped where they end;
- (slow) pyllama's own `llama-completion` with the same flags prints the same text.
"""
import json
import os
import subprocess
import sys

import pytest

import pyllama

pytestmark = pytest.mark.realmodel
HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "grammar")
TOK = json.load(open(os.path.join(DATA, "llamacpp-tokens.json")))
COMP = json.load(open(os.path.join(DATA, "llamacpp-completion.json")))
KEY = ("model", "grammar", "mode")
CASES = [(c, next(t for t in TOK["cases"] if all(t[k] == c[k] for k in KEY)))
         for c in COMP["cases"]]
IDS = ["-".join(c[k] for k in KEY) for c, _ in CASES]
_MODELS = {}


def _model(alias):
    if alias not in _MODELS:
        from pyllama.models import resolve
        try:
            _MODELS[alias] = pyllama.load_model(resolve(alias, progress=False))
        except pyllama.PyllamaError as e:
            pytest.skip(f"bundled model {alias} unavailable: {e}")
    return _MODELS[alias]


@pytest.mark.parametrize("comp,tok", CASES, ids=IDS)
def test_recorded_tokens_are_llama_completions_output(comp, tok):
    model = _model(comp["model"])
    eog = set(model.vocab.eog_ids)
    toks = tok["tokens"]
    ended = bool(toks) and toks[-1] in eog
    body = toks[:-1] if ended else toks
    text = b"".join(model.token_to_piece(t, False) for t in body).decode("utf-8", "replace")
    assert text == comp["text"]
    assert ended == comp["eog"]


@pytest.mark.slow
@pytest.mark.parametrize("comp,tok", CASES, ids=IDS)
def test_pyllama_completion_prints_llama_completions_text(comp, tok, tmp_path):
    from pyllama.models import resolve
    gf = tmp_path / "g.gbnf"
    gf.write_text(TOK["grammars"][comp["grammar"]], encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "pyllama", "completion", "-m",
                        resolve(comp["model"], progress=False), "-p", comp["prompt"], "-n",
                        str(COMP["n_predict"]), "--temp", repr(comp["temp"]), "--seed",
                        str(comp["seed"]), "--grammar-file", str(gf), "-c", "512", "-b", "512",
                        "-ub", "512", "-t", "1", "-no-cnv", "--no-display-prompt",
                        "--no-warmup"], capture_output=True, timeout=900,
                       cwd=os.path.join(HERE, "..", ".."))
    assert r.returncode == 0, r.stderr.decode(errors="replace")[-2000:]
    sys.path.insert(0, HERE)
    from make_llamacpp_completion import split_output
    assert split_output(r.stdout.decode("utf-8")) == (comp["text"], comp["eog"])
