"""Regenerate tests/data/quant/models-llamacpp.npz (not a test): llama.cpp's logits on a
random-weight llama in each of the types pyllama quantizes exactly as llama.cpp does.

    PYTHONPATH=. python tests/quant/make_quant_model_fixture.py     # pyllama's venv; llama.cpp
                                                                    # runs in $LLAMACPP_ORACLE_PY

The model is tests/quant/test_quant_models.py's `base_model` (tests/tiny.py's writer, llama.cpp's
tensor and metadata names, F32). For each type: llama_model_quantize (pure: every 2D tensor in
the type, through bench/quant_sweep_llamacpp.py), then llama.cpp (AVX2 build, 2 threads, flash
attention off) decodes test_quant_models.TOKENS (a 24-token prompt as one batch, logits for every
position, then 8 single-token decodes). Stored per type: `sha_<T>` the sha256 of every tensor's
data in llama.cpp's file (the test rebuilds the file with pyllama's quantizers and checks them),
`logits_sha_<T>` the sha256 of the float32 logits [32, n_vocab], `lp_<T>` llama.cpp's log-prob
of each next token [31] (float64) and `top_<T>` its argmax per position.
"""
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, ".."), os.path.join(HERE, "..", "..", "bench")]
import quant_models as tq  # noqa: E402

OUT = os.path.join(HERE, "..", "data", "quant", "models-llamacpp.npz")


def tensor_shas(path: str) -> dict:
    import gguf
    rd = gguf.GGUFReader(path)
    return {t.name: hashlib.sha256(np.ascontiguousarray(t.data).tobytes()).hexdigest()
            for t in rd.tensors}


def main() -> None:
    import subprocess
    oracle = os.environ.get("LLAMACPP_ORACLE_PY", "/work/oracle/bin/python")
    work = tempfile.mkdtemp()
    base = tq.base_model(work)
    subprocess.run([oracle, os.path.join(HERE, "..", "..", "bench", "quant_sweep_llamacpp.py"),
                    base, work, ",".join(tq.TYPES), ",".join(map(str, tq.TOKENS)),
                    str(tq.N_PROMPT)], check=True)
    res = {}
    for t in tq.TYPES:
        dst = os.path.join(work, f"{t}.gguf")
        with np.load(os.path.join(work, f"{t}.npz")) as z:
            logits = z["logits"].astype(np.float32)
        res["sha_" + t] = json.dumps(tensor_shas(dst), sort_keys=True)
        res["logits_sha_" + t] = hashlib.sha256(logits.tobytes()).hexdigest()
        res["lp_" + t] = tq.next_logprobs(logits)
        res["top_" + t] = logits.argmax(1).astype(np.int32)
        print(t, "done", flush=True)
    np.savez_compressed(OUT, **res)
    print(OUT, os.path.getsize(OUT), "bytes")


if __name__ == "__main__":
    main()
