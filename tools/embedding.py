"""llama-embedding (examples/embedding/embedding.cpp): embeddings of the prompt's lines.

The prompt (-p / -f) is split at --embd-separator (default newline); each line is tokenized with
special tokens and decoded as its own sequence, several per batch (-np 1: unified KV cache and up
to 256 sequences; n_batch raised to n_ctx), with every token an output. --pooling picks per-token
(none) or pooled (mean, cls, last, rank) vectors, --embd-normalize their normalisation.
stdout: llama.cpp's default listing (first/last values, cosine similarity matrix), or
--embd-output-format json | json+ | array | raw.
"""
from __future__ import annotations

import sys

from ._common import guard, log, parse_or_exit

MAX_SEQ = 256          # llama_max_parallel_sequences() (LLAMA_MAX_SEQ)


def split_lines(text: str, sep: str = "\n") -> list[str]:
    return text.split(sep)


def _fmt(x: float, norm: int, wide: bool) -> str:
    if norm == 0:
        return f"{x:6.0f}" if wide else f"{x:1.0f}"
    return f"{x:9.6f}" if wide else f"{x:1.7f}"


def render(emb, prompts: list[str], pooling: str, norm: int, out_format: str,
           n_cls_out: int = 1) -> str:
    """The text llama.cpp's embedding example prints (LOG) after computing emb [n, n_embd]."""
    from pyllama.embedding import similarity_cos
    lines: list[str] = []
    n, n_embd = emb.shape
    n_prompts = len(prompts)
    if not out_format:
        lines.append("\n")
        if pooling == "none":
            for j in range(n):
                head = "".join(_fmt(v, norm, True) + " " for v in emb[j, :min(3, n_embd)])
                tail = "".join(_fmt(v, norm, True) + " " for v in emb[j, n_embd - 3:])
                lines.append(f"embedding {j}: {head} ... {tail}\n")
        elif pooling == "rank":
            for j in range(n):
                lines.append(f"rerank score {j}: {emb[j, 0]:8.3f}\n")
        else:
            for j in range(n_prompts):
                k = min(16, n_embd) if n_prompts > 1 else n_embd
                lines.append(f"embedding {j}: " +
                             "".join(_fmt(v, norm, True) + " " for v in emb[j, :k]) + "\n")
            if n_prompts > 1:
                lines.append("\ncosine similarity matrix:\n\n")
                lines.append("".join(f"{p[:6]:>6} " for p in prompts) + "\n")
                for i in range(n_prompts):
                    row = "".join(f"{similarity_cos(emb[i], emb[j]):6.2f} "
                                  for j in range(n_prompts))
                    lines.append(row + prompts[i][:10] + "\n")
    if out_format in ("json", "json+", "array"):
        obj = out_format != "array"
        parts = []
        for j in range(n):
            vec = "[" + ",".join(_fmt(v, norm, False) for v in emb[j]) + "]"
            parts.append(f"    {{\n      \"object\": \"embedding\",\n      \"index\": {j},\n"
                         f"      \"embedding\": {vec}\n    }}" if obj else vec)
        text = ("{\n  \"object\": \"list\",\n  \"data\": [\n" if obj else "[")
        text += (",\n" if obj else ",").join(parts)
        text += "\n  ]" if obj else "]\n"
        if out_format == "json+" and n_prompts > 1:
            rows = ["    [" + ", ".join(f"{similarity_cos(emb[i], emb[j]):6.2f}"
                                        for j in range(n)) + " ]" for i in range(n)]
            text += ",\n  \"cosineSimilarity\": [\n" + ",\n".join(rows) + "\n  ]"
        if obj:
            text += "\n}\n"
        lines.append(text)
    elif out_format == "raw":
        cols = min(n_embd, n_cls_out) if pooling == "rank" else n_embd
        for j in range(n):
            lines.append(" ".join(_fmt(v, norm, False) for v in emb[j, :cols]) + "\n")
    lines.append("\n")
    return "".join(lines)


def run(argv) -> int:
    import numpy as np

    import pyllama
    from pyllama.embedding import normalize

    from ._common import load_model, pick_backend
    params = parse_or_exit("embedding", argv)
    logger = log()
    if params.n_parallel == 1:
        logger.info("main: n_parallel == 1 -> unified KV cache is enabled")
        params.kv_unified, params.n_parallel = True, MAX_SEQ
    model = load_model(params)
    ckw = params.context_kwargs(getattr(model.hparams, "n_ctx_train", None))
    if ckw["n_batch"] < ckw["n_ctx"]:
        logger.warning(f"main: setting batch size to {ckw['n_ctx']}")
        ckw["n_batch"] = ckw["n_ctx"]
    ckw["n_ubatch"] = min(ckw["n_ubatch"], ckw["n_batch"])
    ctx = pyllama.Context(model, embeddings=True, pooling=params.pooling or None,
                          numerics=params.numerics_for(pick_backend(params)), **ckw)
    vocab, pooling, n_batch = model.vocab, ctx.pooling, ckw["n_batch"]
    prompts = split_lines(params.prompt, params.embd_sep)
    inputs = []
    for p in prompts:
        if pooling == "rank" and params.cls_sep in p:
            pairs = split_lines(p, params.cls_sep)
            sep = ""
            if getattr(vocab, "add_eos", False) and vocab.eos >= 0:
                sep += model.token_to_piece(vocab.eos, True).decode("utf-8", "replace")
            p = sep.join(pairs)
        toks = model.tokenize(p, add_special=True, parse_special=True)
        if len(toks) > n_batch:
            logger.error(f"main: number of tokens in input line ({len(toks)}) exceeds batch "
                         f"size ({n_batch}), increase batch size and re-run")
            return 1
        inputs.append(toks)
    for toks in inputs:
        if not toks or toks[-1] not in (vocab.sep, vocab.eos):
            logger.warning("main: last token in the prompt is not SEP or EOS")
            logger.warning("main: 'tokenizer.ggml.add_eos_token' should be set to 'true' in the "
                           "GGUF header")
    if params.verbose_prompt:
        for i, toks in enumerate(inputs):
            logger.info(f"main: prompt {i}: '{prompts[i]}'")
            logger.info(f"main: number of tokens in prompt = {len(toks)}")
            for t in toks:
                piece = model.token_to_piece(t, True).decode("utf-8", "replace")
                sys.stdout.write(f"{t:6d} -> '{piece}'\n")
            sys.stdout.write("\n\n")
    n_embd = model.hparams.n_embd
    if pooling == "rank":
        n_embd = 1
    rows: list[np.ndarray] = []
    batch: list[tuple[int, list[int]]] = []

    def flush():
        if not batch:
            return
        ctx.memory.clear()
        toks = [t for _, seq in batch for t in seq]
        pos = [i for _, seq in batch for i in range(len(seq))]
        seqs = [s for s, seq in batch for _ in seq]
        logger.info(f"batch_decode: n_tokens = {len(toks)}, n_seq = {len(batch)}")
        if ctx.decode(pyllama.Batch(toks, pos=pos, seq_ids=seqs)) < 0:
            logger.error("batch_decode : failed to process")
        if pooling == "none":
            rows.extend(normalize(ctx.get_embeddings_ith(i), params.embd_normalize)
                        for i in range(len(toks)))
        else:
            for s, _ in batch:      # rank: the raw score (llama.cpp normalises n_embd values
                v = ctx.get_embeddings_seq(s)    # of an n_cls_out buffer there)
                rows.append(v[:n_embd] if pooling == "rank"
                            else normalize(v, params.embd_normalize))
        batch.clear()

    for toks in inputs:
        if sum(len(t) for _, t in batch) + len(toks) > n_batch or len(batch) >= MAX_SEQ:
            flush()
        batch.append((len(batch), toks))
    flush()
    emb = np.stack(rows) if rows else np.zeros((0, n_embd), np.float32)
    sys.stdout.write(render(emb, prompts, pooling, params.embd_normalize, params.embd_out))
    sys.stdout.flush()
    return 0


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
