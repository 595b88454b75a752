"""Record llama_state_seq_get_data of an MLA model from llama.cpp 0c1e570 (llama-cpp-python 0.3.36)
into tests/data/state-seq-deepseek2-llamacpp.json (read by tests/test_arch_deepseek2.py).

The random deepseek2 model of tests/archsupport/specs.py (F32, absorbed MLA: K only in the
cache), n_ctx 512, n_seq_max 2 (one stream per sequence), 2 threads, flash attention on and off:
sequence 0 decodes SEQ0 in one batch, then sequence 1 decodes SEQ1 in one batch; the fixture
keeps, per run, the bytes of llama_state_seq_get_data(ctx, buf, 1) (base64 of their gzip).

    /work/oracle/bin/python tests/make_mla_state_seq_fixture.py
"""
import base64
import ctypes
import gzip
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "archsupport"))
import specs  # noqa: E402

SEQ0 = [11, 12, 13, 14, 15, 16, 17, 18, 19, 20]
SEQ1 = [40, 41, 42, 43, 44, 45, 46, 47]
N_CTX, N_SEQ = 512, 2


def record(L, model, fa: int) -> bytes:
    cp = L.llama_context_default_params()
    cp.n_ctx, cp.n_batch, cp.n_ubatch, cp.n_seq_max = N_CTX, N_CTX, N_CTX, N_SEQ
    cp.n_threads = cp.n_threads_batch = 2
    cp.flash_attn_type = fa
    ctx = L.llama_init_from_model(model, cp)
    b = L.llama_batch_init(N_CTX, 0, 1)
    for seq, ids in ((0, SEQ0), (1, SEQ1)):
        b.n_tokens = len(ids)
        for j, t in enumerate(ids):
            b.token[j], b.pos[j], b.n_seq_id[j], b.seq_id[j][0] = t, j, 1, seq
            b.logits[j] = j == len(ids) - 1
        assert L.llama_decode(ctx, b) == 0
    n = L.llama_state_seq_get_size(ctx, 1)
    buf = (ctypes.c_uint8 * n)()
    assert L.llama_state_seq_get_data(ctx, buf, n, 1) == n
    L.llama_batch_free(b)
    L.llama_free(ctx)
    return bytes(buf)


def main() -> None:
    import llama_cpp as L
    L.llama_backend_init()
    out = {"source": "llama.cpp 0c1e570 (llama-cpp-python 0.3.36) llama_state_seq_get_data",
           "model": "tests/archsupport/specs.py deepseek2, F32, seed 0", "n_ctx": N_CTX,
           "n_seq_max": N_SEQ, "seq0": SEQ0, "seq1": SEQ1, "runs": {}}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "deepseek2.gguf")
        specs.write_model(path, "deepseek2")
        model = L.llama_model_load_from_file(path.encode(), L.llama_model_default_params())
        for name, fa in (("fa_on", 1), ("fa_off", 0)):
            data = record(L, model, fa)
            out["runs"][name] = {"flash_attn": bool(fa), "size": len(data),
                                 "seq1_gz_b64": base64.b64encode(
                                     gzip.compress(data, 9, mtime=0)).decode()}
            print(name, len(data), file=sys.stderr)
        L.llama_model_free(model)
    with open(os.path.join(HERE, "data", "state-seq-deepseek2-llamacpp.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
