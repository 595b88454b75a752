"""Record llama.cpp's logits on the random models of tests/archsupport/specs.py (the fixtures
tests/data/arch/<name>-<ftype>.npz that tests/test_archsupport.py compares pyllama against).

Runs under the llama.cpp oracle (llama-cpp-python 0.3.36 = llama.cpp 0c1e570, AVX2 build) and needs
only numpy, gguf and llama_cpp (not pyllama): the F32 model is written with the gguf package,
quantized by llama.cpp itself (llama_model_quantize, no imatrix), and decoded by llama.cpp through its
C API: a prefill of N_PREFILL tokens in one batch with every row's logits, then N_DECODE single-token
decodes (from position 0, or the spec's pos0: a sequence may start anywhere), n_ctx 512, f16 K/V,
flash attention off (with --flash-attn also on: logits_fa), 2 threads. The fixture keeps the
tokens, the first position, the logits,
each tensor's type in the quantized file and the sha256 of its data (so a test can prove it rebuilt
the same model with pyllama's quantizers).

    /work/oracle/bin/python tests/archsupport/record.py [--archs llama,qwen3] [--ftypes Q8_0,Q4_K_M]
        [--out tests/data/arch]

llama-cpp-python's bindings also run over the libllama of a llama.cpp build of the same source
(LLAMA_CPP_LIB_PATH=<build>/bin; AVX2, GGML_NATIVE off): the llama4 fixtures were recorded so, and
that setup reproduced the llama-Q8_0, qwen3moe-Q4_K_M and mixtral-Q4_K_M fixtures bit for bit.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import specs  # noqa: E402

FTYPES = {"F32": 0, "F16": 1, "Q8_0": 7, "Q4_K_M": 15}
N_PREFILL, N_DECODE, N_CTX = 20, 6, 512
SEED = 0


def tokens_for(name: str) -> np.ndarray:
    rng = np.random.default_rng([SEED, len(name), sum(map(ord, name))])
    return rng.integers(0, specs.N_VOCAB, N_PREFILL + N_DECODE).astype(np.int32)


def quantize(L, src: str, dst: str, ftype: str) -> None:
    qp = L.llama_model_quantize_default_params()
    qp.ftype = FTYPES[ftype]
    qp.nthread = 2
    rc = L.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(qp))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({ftype}) failed: {rc}")


def tensor_table(path: str) -> tuple[dict, dict]:
    import gguf
    r = gguf.GGUFReader(path)
    types, hashes = {}, {}
    for t in r.tensors:
        types[t.name] = t.tensor_type.name
        hashes[t.name] = hashlib.sha256(np.ascontiguousarray(t.data).tobytes()).hexdigest()
    return types, hashes


def run_llamacpp(L, path: str, toks: np.ndarray, n_threads: int = 2,
                 flash_attn: int = 0, pos0: int = 0) -> np.ndarray:
    """Logits [N_PREFILL + N_DECODE, n_vocab]: the prefill rows, then one row per decode."""
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    cp = L.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = N_CTX
    cp.n_threads = cp.n_threads_batch = n_threads
    cp.flash_attn_type = flash_attn
    ctx = L.llama_init_from_model(model, cp)
    n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
    out = []
    batch = L.llama_batch_init(N_CTX, 0, 1)

    def decode(ids, p0, all_logits):
        batch.n_tokens = len(ids)
        for i, t in enumerate(ids):
            batch.token[i] = int(t)
            batch.pos[i] = p0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if all_logits or i == len(ids) - 1 else 0
        if L.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        for i in range(len(ids)):
            p = L.llama_get_logits_ith(ctx, i)
            out.append(np.ctypeslib.as_array(p, shape=(n_vocab,)).copy())

    decode(toks[:N_PREFILL], pos0, True)
    for j in range(N_DECODE):
        decode(toks[N_PREFILL + j:N_PREFILL + j + 1], pos0 + N_PREFILL + j, True)
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return np.stack(out).astype(np.float32)


def record(L, name: str, ftype: str, out_dir: str, tmp: str, flash_attn: bool = False) -> str:
    src = os.path.join(tmp, f"{name}-f32.gguf")
    if not os.path.exists(src):
        specs.write_model(src, name)
    path = src
    if ftype != "F32":
        path = os.path.join(tmp, f"{name}-{ftype}.gguf")
        quantize(L, src, path, ftype)
    types, hashes = tensor_table(path)
    toks = tokens_for(name)
    pos0 = int(specs.spec(name).c.get("pos0", 0))
    logits = run_llamacpp(L, path, toks, pos0=pos0)
    extra = {}
    if flash_attn:
        extra["logits_fa"] = run_llamacpp(L, path, toks, flash_attn=1, pos0=pos0)
    dst = os.path.join(out_dir, f"{name}-{ftype}.npz")
    np.savez_compressed(dst, tokens=toks, n_prefill=N_PREFILL, logits=logits, pos0=pos0,
                        table=json.dumps({"types": types, "sha256": hashes, "seed": SEED}),
                        **extra)
    return dst


def _quiet(level, text, user_data):
    pass


_QUIET = None


def main(argv=None):
    global _QUIET
    ap = argparse.ArgumentParser()
    ap.add_argument("--archs", default=",".join(specs.ARCHS))
    ap.add_argument("--ftypes", default="Q8_0,Q4_K_M")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "data", "arch"))
    ap.add_argument("--flash-attn", action="store_true",
                    help="also record the logits with flash attention on (logits_fa)")
    a = ap.parse_args(argv)
    import llama_cpp as L
    L.llama_backend_init()
    _QUIET = L.llama_log_callback(_quiet)
    L.llama_log_set(_QUIET, ctypes.c_void_p(0))
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.archs.split(","):
            for ft in a.ftypes.split(","):
                try:
                    print(record(L, name, ft, a.out, tmp, a.flash_attn), flush=True)
                except Exception as e:          # one arch failing must not stop the sweep
                    print(f"{name} {ft}: FAILED {e}", flush=True)


if __name__ == "__main__":
    main()
