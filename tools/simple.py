"""llama-simple (examples/simple/simple.cpp): greedy continuation of a prompt, own tiny parser.

    llama-simple -m model.gguf [-n n_predict] [-ngl n_gpu_layers] [prompt words...]
The first argument that is not one of these starts the prompt (default "Hello my name is").
stdout: prompt pieces + generated pieces + newline; stderr: speed and perf lines (llama.cpp examples/simple/simple.cpp).
"""
from __future__ import annotations

import os
import sys
import time

from ._common import check_full_offload, cuda_usable, guard, log, print_perf


def usage(argv0: str) -> str:
    return (f"\nexample usage:\n\n    {argv0} -m model.gguf [-n n_predict] [-ngl n_gpu_layers] "
            f"[prompt]\n\n")


class UsageError(Exception):
    pass


def parse(argv: list[str]) -> tuple[str | None, int, int, str]:
    """(model, n_predict, n_gpu_layers, prompt) with simple.cpp's rules (std::stoi values)."""
    from ._convert import ConvertError, stoi
    model, n_predict, ngl, i = None, 32, 99, 0
    try:
        while i < len(argv):
            a = argv[i]
            if a in ("-m", "-n", "-ngl"):
                if i + 1 >= len(argv):
                    raise UsageError()
                v = argv[i + 1]
                if a == "-m":
                    model = v
                elif a == "-n":
                    n_predict = stoi(v)
                else:
                    ngl = stoi(v)
                i += 2
            else:
                break
    except ConvertError:
        raise UsageError() from None
    prompt = " ".join(argv[i:]) if i < len(argv) else "Hello my name is"
    return model, n_predict, ngl, prompt


def run(argv) -> int:
    argv0 = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "llama-simple"
    try:
        model_path, n_predict, ngl, prompt = parse(argv)
    except UsageError:
        sys.stdout.write(usage(argv0))
        return 1
    import pyllama
    from pyllama import models
    from pyllama.errors import PyllamaError
    t0 = time.perf_counter()
    try:
        path = models.resolve(model_path)
        backend = "cuda" if ngl != 0 and cuda_usable() else "cpu"
        if backend == "cuda":
            check_full_offload(ngl, path)
        model = pyllama.load_model(path, backend=backend)
    except PyllamaError as e:
        log().error(f"main: error: unable to load model ({e})")
        return 1
    t_load = time.perf_counter() - t0
    return generate_greedy(model, prompt, n_predict, t_load)


def generate_greedy(model, prompt: str, n_predict: int, t_load: float) -> int:
    import pyllama
    from pyllama.sampling import SamplerChain, SamplerParams
    from ._session import stream
    ids = model.tokenize(prompt, add_special=True, parse_special=True)
    if not ids:
        log().error("main: error: failed to tokenize the prompt")
        return 1
    n_ctx = max(len(ids) + n_predict - 1, len(ids) + 1)
    # llama-simple is llama.cpp's reference loop: its arithmetic on the CPU (docs/numerics.md)
    numerics = "llama.cpp" if model.backend.name in ("cpu", "ref") else "invariant"
    ctx = pyllama.Context(model, n_ctx=n_ctx, n_batch=len(ids), n_ubatch=len(ids),
                          numerics=numerics, flash_attn=True)     # llama.cpp's -fa auto
    sampler = SamplerChain(SamplerParams(temp=0.0, samplers=["temperature"]), model.n_vocab,
                           eog_ids=tuple(model.vocab.eog_ids))
    out = sys.stdout.buffer
    out.write(b"".join(model.token_to_piece(t, True) for t in ids))
    out.flush()

    def on_piece(piece: bytes) -> None:
        out.write(piece)
        out.flush()
    t = time.perf_counter()
    st = stream(ctx, model, ids, sampler, n_predict, on_piece, special=True)
    dt = time.perf_counter() - t
    n_decode = len(st.tokens) - (1 if st.stop == "eog" else 0)
    out.write(b"\n")
    out.flush()
    lg = log()
    lg.info(f"main: decoded {n_decode} tokens in {dt:.2f} s, speed: "
            f"{n_decode / dt if dt > 0 else 0.0:.2f} t/s")
    lg.info("")
    print_perf(lg, t_load, st.n_prompt, st.t_prompt, st.n_eval, st.t_eval)
    lg.info("")
    return 0


def main(argv=None) -> int:
    from ._common import setup_logging
    from ._params import Params
    setup_logging(Params(log_timestamps=False, log_prefix=False))
    return guard(run, sys.argv[1:] if argv is None else argv)
