"""Beyond the 92 reference cases: the real vocabularies against Python ports of llama.cpp's own
loops on ~35 KB of licence text and the corpus -- SPM (Gemma) fully independent of the
`tokenizers` library, BPE (Qwen) sharing only the regex pre-split."""
import os

import numpy as np
import pytest

from vocabsupport import DATA, bpe_merge, load_data, merge_symbols
from pyllama.vocab.attrs import USER_DEFINED
from pyllama.vocab.build import bytes_to_unicode

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]


def texts():
    with open(os.path.join(DATA, "GPL-3.txt"), encoding="utf-8") as f:
        gpl = f.read()
    corpus = [c["text"] for c in load_data("tokenize-gemma-3-270m.json")["cases"]]
    return [p for p in gpl.split("\n\n") if p] + corpus


def partition(text, specials):
    """llama.cpp's tokenizer_st_partition: each special text in turn (longest first) split out
    of the remaining raw fragments, every occurrence."""
    frags = [text]
    for s, sid in specials:
        out = []
        for f in frags:
            if isinstance(f, int):
                out.append(f)
                continue
            for j, p in enumerate(f.split(s)):
                if j:
                    out.append(sid)
                if p:
                    out.append(p)
        frags = out
    return frags


@pytest.fixture(scope="module")
def gemma_tables(gemma_vocab):
    v = gemma_vocab
    toks = [v.token_text(i) for i in range(v.n_vocab)]
    ids = dict(zip(toks, range(len(toks))))
    from pyllama.gguf import GGUFReader
    from pyllama.models import resolve
    scores = np.asarray(GGUFReader(resolve("gemma-3-270m")).metadata["tokenizer.ggml.scores"])
    score = {t: float(scores[i]) for t, i in ids.items()}
    user = sorted(((toks[i], int(i)) for i in np.nonzero(v.attr & USER_DEFINED)[0]
                   if not v.is_control(i)), key=lambda s: -len(s[0].encode()))
    return ids, score, user


def test_gemma_spm_matches_llama_cpp_loop(gemma_vocab, gemma_tables):
    ids, score, user = gemma_tables
    bad = 0
    for text in texts():
        want = []
        for f in partition(text, user):
            if isinstance(f, int):
                want.append(f)
                continue
            syms, _ = merge_symbols(f.replace(" ", "\u2581"), score)
            for s in syms:
                want += [ids[s]] if s in ids else [ids[f"<0x{b:02X}>"] for b in s.encode()]
        bad += gemma_vocab.tokenize(text, add_special=False) != want
    assert bad == 0


def test_qwen_bpe_matches_llama_cpp_loop(qwen_vocab):
    from pyllama.gguf import GGUFReader
    from pyllama.models import resolve
    v = qwen_vocab
    md = GGUFReader(resolve("qwen2.5-coder-0.5b")).metadata
    ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(md["tokenizer.ggml.merges"])}
    toks = md["tokenizer.ggml.tokens"].tolist()
    ids = dict(zip(toks, range(len(toks))))
    user = sorted(((toks[i], int(i)) for i in np.nonzero(v.attr & USER_DEFINED)[0]
                   if not v.is_control(i)), key=lambda s: -len(s[0].encode()))
    pre = v._tok.pre_tokenizer                   # the regex split, on raw text
    b2u = bytes_to_unicode()
    bad = 0
    for text in texts():
        want = []
        for f in partition(text, user):
            if isinstance(f, int):
                want.append(f)
                continue
            for word, _ in pre.pre_tokenize_str(f):
                word = "".join(b2u[b] for b in word.encode())
                want += [ids[s] for s in bpe_merge(word, ranks)]
        bad += v.tokenize(text, add_special=False) != want
    assert bad == 0
