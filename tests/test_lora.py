"""LoRA adapters and control vectors against llama.cpp 0c1e570 (tests/data/lora-llamacpp.npz,
recorded by tests/make_lora_fixture.py with llama-cpp-python's llama_adapter_lora_init /
llama_set_adapters_lora / llama_set_adapter_cvec), on random adapters written by
tests/lora_files.py as convert_lora_to_gguf.py writes them; plus loading errors.

In the llama.cpp numerics the logits must be bit-identical to llama.cpp's at the recorded top-k
ids (a prompt batch and one single-token decode), at scales 0, 0.5, 1, with two adapters and with
a control vector on a layer range."""
import os

import numpy as np
import pytest

import pyllama
from pyllama.adapter import AdapterError, LoraAdapter
from lora_files import cvec_data, write_cvec, write_lora

DATA = os.path.join(os.path.dirname(__file__), "data", "lora-llamacpp.npz")
CASES = {
    "a0": ([("a", 0.0)], [], None),
    "a05": ([("a", 0.5)], [], None),
    "a1": ([("a", 1.0)], [], None),
    "ab": ([("a", 1.0), ("b", 0.5)], [], None),
    "cvec": ([], [(21, 1.0), (22, -0.5)], (3, 10)),
}


@pytest.fixture(scope="module")
def ref():
    return dict(np.load(DATA))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("lora")
    cache = {}

    def get(model, what):
        key = (model, what)
        if key not in cache:
            p = str(d / f"{model}-{what}.gguf")
            cache[key] = (write_cvec(p, model, what) if isinstance(what, int)
                          else write_lora(p, model, what))
        return cache[key]
    return get


_MODELS = {}


def _model(alias):
    if alias not in _MODELS:
        from pyllama.errors import PyllamaError
        from pyllama.models import resolve
        try:
            path = resolve(alias, progress=False)
        except PyllamaError as e:
            pytest.skip(f"bundled model {alias} unavailable: {e}")
        _MODELS[alias] = pyllama.load_model(path)
    return _MODELS[alias]


def _logits(model, ids, nxt, **ctx_kw):
    ctx = pyllama.Context(model, n_ctx=256, n_batch=256, n_ubatch=256, numerics="llama.cpp",
                          flash_attn=False, **ctx_kw)
    pre = ctx.eval(ids, logits_all=True)
    one = ctx.eval([nxt], logits_all=True)
    return ctx, np.concatenate([pre, one])


def _compare(ref, key, rows):
    ids, vals, lse = ref[f"{key}_ids"], ref[f"{key}_vals"], ref[f"{key}_lse"]
    got = np.take_along_axis(rows, ids.astype(np.int64), axis=-1)
    x = rows.astype(np.float64)
    mx = x.max(axis=-1, keepdims=True)
    our_lse = mx[:, 0] + np.log(np.exp(x - mx).sum(axis=-1))
    dlp = np.abs((got - our_lse[:, None]) - (vals - lse[:, None]))
    return got, vals, float(dlp.mean())


@pytest.mark.realmodel
@pytest.mark.parametrize("alias", ["gemma-3-270m", "qwen2.5-coder-0.5b"])
@pytest.mark.parametrize("case", list(CASES))
def test_logits_equal_llamacpp(alias, case, ref, files):
    model = _model(alias)
    loras, cvecs, rng = CASES[case]
    kw = {}
    if loras:
        kw["lora_adapters"] = [(files(alias, w), s) for w, s in loras]
    if cvecs:
        kw["control_vectors"] = [(files(alias, seed), s) for seed, s in cvecs]
        kw["control_vector_layer_range"] = rng
    ids = ref[f"{alias}/ids"]
    nxt = int(ref[f"{alias}/{case}_next"][0])
    _, rows = _logits(model, ids, nxt, **kw)
    assert int(np.argmax(rows[len(ids) - 1])) == nxt
    got, want, mean_dlp = _compare({k[len(alias) + 1:]: v for k, v in ref.items()
                                    if k.startswith(alias + "/")}, case, rows)
    assert np.array_equal(got, want), f"mean |dlogprob| {mean_dlp:.3g}"


@pytest.mark.realmodel
def test_attach_scale_detach(files):
    """The API call attaches, rescales and detaches adapters on a live context: scale 0 and
    detached give the base logits bit for bit; the scale changes the logits."""
    model = _model("gemma-3-270m")
    ids = model.tokenize("Hello there, general", add_special=True)
    ctx = pyllama.Context(model, n_ctx=64, numerics="llama.cpp")
    base = ctx.eval(ids)
    a = LoraAdapter(model, files("gemma-3-270m", "a"))
    results = []
    for scales in ([1.0], [0.0], [0.5], None):
        ctx.memory.clear()
        if scales is None:
            ctx.set_adapters_lora()
        else:
            ctx.set_adapters_lora([a], scales)
        results.append(ctx.eval(ids))
    assert not np.array_equal(results[0], base)
    assert np.array_equal(results[1], base) and np.array_equal(results[3], base)
    assert not np.array_equal(results[2], results[0])


@pytest.mark.realmodel
def test_mismatch_and_corrupt_files(files, tmp_path):
    gemma, qwen = _model("gemma-3-270m"), _model("qwen2.5-coder-0.5b")
    with pytest.raises(AdapterError, match="model arch and LoRA arch mismatch"):
        LoraAdapter(qwen, files("gemma-3-270m", "a"))
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(open(files("gemma-3-270m", "b"), "rb").read()[:5000])
    with pytest.raises(AdapterError, match="failed to load LoRA adapter"):
        LoraAdapter(gemma, str(bad))
    with pytest.raises(AdapterError, match="expect general.type to be 'adapter'"):
        LoraAdapter(gemma, gemma.path)
    # a control vector for another model's n_embd
    with pytest.raises(AdapterError, match="control vector n_embd does not match model"):
        pyllama.Context(gemma, n_ctx=32, control_vectors=[(files("qwen2.5-coder-0.5b", 21), 1.0)])
    with pytest.raises(AdapterError, match="failed to load control vector file"):
        pyllama.Context(gemma, n_ctx=32, control_vectors=[(str(bad), 1.0)])


def test_wrong_shape_adapter(tiny_model_path, tmp_path):
    """An adapter whose shapes do not fit the model: llama.cpp's message."""
    import gguf
    model = pyllama.load_model(tiny_model_path("llama"))
    p = str(tmp_path / "wrong.gguf")
    w = gguf.GGUFWriter(p, "llama")
    w.add_type(gguf.GGUFType.ADAPTER)
    w.add_string(gguf.Keys.Adapter.TYPE, "lora")
    w.add_tensor("blk.0.attn_q.weight.lora_a", np.zeros((4, 32), np.float32))
    w.add_tensor("blk.0.attn_q.weight.lora_b", np.zeros((64, 4), np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    with pytest.raises(AdapterError, match="has incorrect shape"):
        LoraAdapter(model, p)


def test_cvec_data_matches_writer(tmp_path):
    """load_control_vectors sums the files as common_control_vector_load (the data the oracle
    script passed to llama_set_adapter_cvec)."""
    items = [(21, 1.0), (22, -0.5)]
    paths = [(write_cvec(str(tmp_path / f"{s}.gguf"), "gemma-3-270m", s), k) for s, k in items]
    n_embd, data = pyllama.load_control_vectors(paths)
    assert n_embd == 640
    assert np.array_equal(data, cvec_data("gemma-3-270m", items))


@pytest.mark.realmodel
def test_llama_cpp_python_lora_path(files):
    """llama-cpp-python's Llama(lora_path=, lora_scale=): the adapter applied at that scale
    (the same logits as the Context API)."""
    from pyllama import llama_cpp
    path = files("gemma-3-270m", "a")
    llm = llama_cpp.Llama("gemma-3-270m", lora_path=path, lora_scale=0.5, n_ctx=64,
                          logits_all=True, verbose=False, numerics="llama.cpp")
    ids = llm.tokenize(b"Hello there, general")
    llm.eval(ids)
    got = np.asarray(llm.scores[len(ids) - 1], np.float32)
    ctx = pyllama.Context(_model("gemma-3-270m"), n_ctx=64, numerics="llama.cpp",
                          lora_adapters=[(path, 0.5)])
    assert np.array_equal(got, ctx.eval(ids)[0])
