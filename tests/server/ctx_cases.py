"""Requests shared by tests/make_server_ctx_fixture.py (llama.cpp's llama-server records them) and
tests/server/test_server_ctx_llamacpp.py (pyllama's llama-server must answer the same): cache
reuse (--cache-reuse) and context shift (--context-shift), Qwen 2.5 Coder 0.5B, greedy.

Prompts are token lists built from the texts below (Qwen adds no BOS), so both servers see the
same ids whatever their tokenizers do at the joins."""

A = ("You are a careful assistant who answers questions about the history of science. The "
     "following notes describe the early development of astronomy, from the first star "
     "catalogues of Babylon to the telescopes of the seventeenth century, and the people who "
     "made them: Hipparchus, Ptolemy, Copernicus, Tycho Brahe, Kepler and Galileo. Each note is "
     "short and factual.")
B = (" Note one: the Babylonians kept records of the positions of planets on clay tablets for "
     "centuries.")
C = (" Note two: Hipparchus measured the precession of the equinoxes and compiled a catalogue "
     "of about eight hundred and fifty stars, giving each a brightness class that survives in "
     "the magnitudes astronomers still use.")
D = " Question: who catalogued the stars first?\nAnswer:"
E = " Question: what did Hipparchus measure?\nAnswer:"

# the llama.cpp server test's SHORT_TEXT (tools/server/tests/unit/test_ctx_shift.py), three times
LOREM = ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
         "incididunt ut labore et dolore magna aliqua.\nUt enim ad minim veniam, quis nostrud "
         "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat.\nDuis aute irure "
         "dolor in reprehenderit in voluptate velit esse cillum dolore eu fugiat nulla pariatur.")

# server flags (pyllama adds --numerics llama.cpp); -t 2 -fa on in both
REUSE_FLAGS = ["-np", "1", "-c", "1024", "--cache-reuse", "8"]
SHIFT_FLAGS = ["-np", "2", "-c", "512", "--context-shift"]
NOSHIFT_FLAGS = ["-np", "2", "-c", "512"]       # slot context 256 (llama.cpp's test's setup)


def prompts(tokenize) -> dict:
    """tokenize(text, first: bool) -> ids."""
    a, b, c, d, e = (tokenize(t, i == 0) for i, t in enumerate((A, B, C, D, E)))
    lorem = tokenize(" ".join([LOREM] * 3), True)
    lorem5 = tokenize(" ".join([LOREM] * 5), True)
    return {"abc": a + b + c, "acd": a + c + d, "ace": a + c + e, "lorem": lorem,
            "lorem5": lorem5,
            "short": tokenize("Hi how are you", True), "n_chunk": len(c), "n_a": len(a)}


def reuse_requests(p: dict) -> list:
    """(name, body) in order on one server: the cached chunk C moves back over B; then the same
    move with a per-request n_cache_reuse larger than the chunk (no reuse)."""
    base = {"temperature": 0, "n_predict": 16, "return_tokens": True}
    return [("abc", {**base, "prompt": p["abc"]}),
            ("acd", {**base, "prompt": p["acd"]}),
            ("abc2", {**base, "prompt": p["abc"]}),
            ("ace_no_reuse", {**base, "prompt": p["ace"], "n_cache_reuse": 1000})]


def shift_requests(p: dict) -> list:
    """llama.cpp's test_ctx_shift_enabled: a prompt near the 256-token slot context and 96
    generated tokens, which only fit by shifting."""
    return [("lorem_96", {"prompt": p["lorem"], "n_predict": 96, "temperature": 0,
                          "ignore_eos": True, "return_tokens": True})]


def noshift_requests(p: dict) -> list:
    """llama.cpp's test_ctx_shift_disabled_*: stop at the 256-token slot context ("length"),
    refuse a prompt longer than it."""
    return [("short_64", {"prompt": p["short"], "n_predict": 64, "temperature": 0,
                          "ignore_eos": True, "return_tokens": True}),
            ("short_all", {"prompt": p["short"], "n_predict": -1, "temperature": 0,
                           "ignore_eos": True, "return_tokens": True}),
            ("long", {"prompt": p["lorem5"], "n_predict": 64, "temperature": 0})]


def summary(status: int, body: dict) -> dict:
    """What is compared between the two servers."""
    if status != 200:
        return {"status": status, "type": body["error"]["type"],
                "message": body["error"]["message"]}
    t = body["timings"]
    return {"status": 200, "tokens": body["tokens"], "content": body["content"],
            "cache_n": t["cache_n"], "prompt_n": t["prompt_n"], "predicted_n": t["predicted_n"],
            "tokens_cached": body["tokens_cached"], "truncated": body["truncated"],
            "stop_type": body["stop_type"]}
