"""llama-perplexity: perplexity of a text (-f) in llama.cpp's chunking, output and ± estimate;
--kl-divergence-base FILE alone saves a `_logits_` base file, with --kl-divergence compares against
one (KLD, Δp and same-top statistics). The maths lives in pyllama.perplexity (llama.cpp tools/perplexity/perplexity.cpp).
"""
from __future__ import annotations

import sys
import time

from ._args import P
from ._common import Output, guard, load_model, log, parse_or_exit, vocab_bos


def run(argv) -> int:
    params = parse_or_exit(P, argv)
    if params.n_ctx <= 0:
        log().error("main: perplexity tool requires '--ctx-size' > 0")
        return 1
    from pyllama.errors import PyllamaError
    try:
        model = load_model(params)
    except PyllamaError as e:
        log().error(f"llama_perplexity: unable to load model ({e})")
        return 1
    out = Output(params)
    if params.kl_divergence:
        return run_kld(params, model, out)
    return run_ppl(params, model, out)


def _context(model, params, n_ctx: int, n_batch: int, n_seq: int):
    import pyllama
    kw = params.context_kwargs(model.hparams.n_ctx_train)
    kw.update(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=min(params.n_ubatch, n_batch),
              n_seq_max=n_seq, numerics=params.numerics_for(model.backend.name))
    return pyllama.Context(model, **kw)


def run_ppl(params, model, out: Output) -> int:
    from pyllama import perplexity as ppl
    lg = log()
    n_ctx = params.n_ctx
    t0 = time.perf_counter()
    lg.info("perplexity: tokenizing the input ..")
    tokens = model.tokenize(params.prompt, add_special=True, parse_special=False)
    lg.info(f"perplexity: tokenization took {1e3 * (time.perf_counter() - t0):g} ms")
    if len(tokens) < 2 * n_ctx:
        lg.error(f"perplexity: you need at least {2 * n_ctx} tokens to evaluate perplexity with "
                 f"a context of {n_ctx}")
        lg.error(f"perplexity: the data file you provided tokenizes to only {len(tokens)} tokens")
        out("\n")
        return 0
    pl = ppl.plan(len(tokens), n_ctx, params.n_batch, params.n_chunks)
    ctx = _context(model, params, pl.n_seq * n_ctx, pl.n_batch, pl.n_seq)
    lg.info(f"perplexity: calculating perplexity over {pl.n_chunk} chunks, n_ctx={n_ctx}, "
            f"batch_size={pl.n_batch}, n_seq={pl.n_seq}")
    writer = _open_writer(params, n_ctx, model.n_vocab, pl.n_chunk, tokens)
    acc = ppl.PplAccumulator()
    t_start = time.perf_counter()
    for res in ppl.perplexity_chunks(ctx, tokens, pl, vocab_bos(model.vocab), writer is not None):
        if res.index == 0:
            _eta(out, time.perf_counter() - t_start, pl.n_chunk / pl.n_seq)
        if writer is not None:
            writer.write(res.log_probs.astype("<u2").tobytes())
        acc.add(res.nll)
        _print_running(out, params, acc, res.index, pl)
    out("\n")
    if writer is not None:
        writer.close()
    _final(acc, lg)
    out("\n")
    return 0


def _open_writer(params, n_ctx, n_vocab, n_chunk, tokens):
    if not params.logits_file:
        return None
    from pyllama import perplexity as ppl
    f = open(params.logits_file, "wb")
    log().info(f"perplexity: saving all logits to {params.logits_file}")
    ppl.write_header(f, n_ctx, n_vocab, n_chunk, tokens)
    return f


def _eta(out: Output, t_pass: float, passes: float) -> None:
    sys.stderr.write(f"perplexity: {t_pass:.2f} seconds per pass - ETA ")
    sys.stderr.flush()
    total = int(t_pass * passes)
    text = ""
    if total >= 3600:
        text += f"{total // 3600} hours "
        total %= 3600
    out(text + f"{total / 60.0:.2f} minutes\n")


def _print_running(out: Output, params, acc, index: int, pl) -> None:
    if params.ppl_output_type == 0:
        out(f"[{index + 1}]{acc.ppl:.4f},")
    else:
        value, av, av2 = acc.running()
        out(f"{(index - index % pl.n_seq) * pl.n_ctx:8d}  {value:.4f}  {av:4f}  {av2:4f}\n")


def _final(acc, lg) -> None:
    value, err = acc.final()
    if err is None:
        lg.error("Unexpected negative standard deviation of log(prob)")
    else:
        lg.info(f"Final estimate: PPL = {value:.4f} +/- {err:.5f}")


# ---- KL divergence --------------------------------------------------------------------------
def run_kld(params, model, out: Output) -> int:
    from pyllama import perplexity as ppl
    lg = log()
    if not params.logits_file:
        lg.error("kl_divergence: you must provide a name of a file containing the log "
                 "probabilities of the base model")
        return 1
    try:
        f = open(params.logits_file, "rb")
    except OSError:
        lg.error(f"kl_divergence: failed to open {params.logits_file}")
        return 1
    with f:
        base = ppl.open_base(f, params.logits_file)
        if base.n_ctx > params.n_ctx:
            lg.error(f"kl_divergence: {params.logits_file} has been computed with {base.n_ctx}, "
                     f"while the current context is {params.n_ctx}. Increase it with -c and retry")
            return 1
        if base.n_vocab != model.n_vocab:
            lg.error(f"kl_divergence: inconsistent vocabulary ({base.n_vocab} vs {model.n_vocab})")
            return 1
        ctx = _context(model, params, params.n_ctx, min(params.n_batch, params.n_ctx), 1)
        t0 = time.perf_counter()

        def on_chunk(i, st):
            if i == 0:
                _eta(out, time.perf_counter() - t0, base.n_chunk)
            out("\n" + KLD_HEADER + "\n")
            out(chunk_line(i, st) + "\n")

        st = ppl.kld_chunks(ctx, base, params.n_batch, vocab_bos(model.vocab), on_chunk)
    out("\n")
    if st.count >= 100:
        out(final_tables(st))
    return 0


KLD_HEADER = ("chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence"
              "              Δp RMS            Same top p")


def _ratio(st):
    from pyllama.perplexity import covariance, mean_and_uncertainty
    lp = mean_and_uncertainty(st.sum_nll, st.sum_nll2, st.count)
    lb = mean_and_uncertainty(st.sum_nll_base, st.sum_nll_base2, st.count)
    cov = covariance(st.sum_nll, st.sum_nll_base, st.sum_nll_nll_base, st.count)
    unc = max(0.0, lp[1] ** 2 + lb[1] ** 2 - 2.0 * cov) ** 0.5
    return lp, lb, cov, lp[0] - lb[0], unc


def chunk_line(i: int, st) -> str:
    import math
    from pyllama.perplexity import mean_and_uncertainty
    lp, _, _, r_val, r_unc = _ratio(st)
    kl = mean_and_uncertainty(st.sum_kld, st.sum_kld2, st.count)
    mse = mean_and_uncertainty(st.sum_p_diff2, st.sum_p_diff4, st.count)
    rms = math.sqrt(mse[0])
    rms_unc = 0.5 / rms * mse[1] if rms > 0 else 0.0
    top = st.n_same_top / st.count
    top_unc = math.sqrt(top * (1 - top) / (st.count - 1)) if st.count > 1 else 0.0
    v = math.exp(lp[0])
    return (f"{i + 1:4d}    {v:9.4f} ± {v * lp[1]:9.4f}    {r_val:10.5f} ± {r_unc:10.5f}"
            f"    {kl[0]:10.5f} ± {kl[1]:10.5f}    {100 * rms:6.3f} ± {100 * rms_unc:6.3f} %"
            f"    {100 * top:6.3f} ± {100 * top_unc:6.3f} %")


def final_tables(st) -> str:
    import math
    from pyllama.perplexity import mean_and_uncertainty, median, percentile
    kv, pdv = sorted(st.kld_values), sorted(st.p_diff_values)
    lp, lb, cov, r_val, r_unc = _ratio(st)
    pv, bv = math.exp(lp[0]), math.exp(lb[0])
    pu, bu = pv * lp[1], bv * lb[1]
    cor = cov / (lp[1] * lb[1]) if lp[1] * lb[1] else 0.0
    lines = ["====== Perplexity statistics ======",
             f"Mean PPL(Q)                   : {pv:10.6f} ± {pu:10.6f}",
             f"Mean PPL(base)                : {bv:10.6f} ± {bu:10.6f}",
             f"Cor(ln(PPL(Q)), ln(PPL(base))): {100 * cor:6.2f}%",
             f"Mean ln(PPL(Q)/PPL(base))     : {r_val:10.6f} ± {r_unc:10.6f}",
             f"Mean PPL(Q)/PPL(base)         : {math.exp(r_val):10.6f} ± "
             f"{math.exp(r_val) * r_unc:10.6f}",
             f"Mean PPL(Q)-PPL(base)         : {pv - bv:10.6f} ± "
             f"{max(0.0, pu * pu + bu * bu - 2 * pv * bv * cov) ** 0.5:10.6f}", "",
             "====== KL divergence statistics ======"]
    kl = mean_and_uncertainty(st.sum_kld, st.sum_kld2, st.count)
    lines.append(f"Mean    KLD: {kl[0]:10.6f} ± {kl[1]:10.6f}")
    lines.append(f"Maximum KLD: {kv[-1]:10.6f}")
    for frac, label in ((0.999, "99.9%"), (0.99, "99.0%"), (0.95, "95.0%"), (0.90, "90.0%")):
        lines.append(f"{label}   KLD: {percentile(kv, frac):10.6f}")
    lines.append(f"Median  KLD: {median(kv):10.6f}")
    for frac, label in ((0.10, "10.0%"), (0.05, " 5.0%"), (0.01, " 1.0%"), (0.001, " 0.1%")):
        lines.append(f"{label}   KLD: {percentile(kv, frac):10.6f}")
    lines += [f"Minimum KLD: {kv[0]:10.6f}", ""] + _token_prob_lines(st, pdv)
    return "\n".join(lines) + "\n"


def _token_prob_lines(st, pdv) -> list[str]:
    import math
    from pyllama.perplexity import mean_and_uncertainty, median, percentile
    pd = mean_and_uncertainty(st.sum_p_diff, st.sum_p_diff2, st.count)
    lines = ["====== Token probability statistics ======",
             f"Mean    Δp: {100 * pd[0]:6.3f} ± {100 * pd[1]:5.3f} %",
             f"Maximum Δp: {100 * pdv[-1]:6.3f}%"]
    for frac, label in ((0.999, "99.9%"), (0.99, "99.0%"), (0.95, "95.0%"), (0.90, "90.0%"),
                        (0.75, "75.0%")):
        lines.append(f"{label}   Δp: {100 * percentile(pdv, frac):6.3f}%")
    lines.append(f"Median  Δp: {100 * median(pdv):6.3f}%")
    for frac, label in ((0.25, "25.0%"), (0.10, "10.0%"), (0.05, " 5.0%"), (0.01, " 1.0%"),
                        (0.001, " 0.1%")):
        lines.append(f"{label}   Δp: {100 * percentile(pdv, frac):6.3f}%")
    lines.append(f"Minimum Δp: {100 * pdv[0]:6.3f}%")
    mse = mean_and_uncertainty(st.sum_p_diff2, st.sum_p_diff4, st.count)
    rms = math.sqrt(mse[0])
    lines.append(f"RMS Δp    : {100 * rms:6.3f} ± {100 * (0.5 / rms * mse[1] if rms else 0):5.3f} %")
    top = st.n_same_top / st.count
    lines.append(f"Same top p: {100 * top:6.3f} ± "
                 f"{100 * math.sqrt(top * (1 - top) / (st.count - 1)):5.3f} %")
    return lines


def main(argv=None) -> int:
    return guard(run, sys.argv[1:] if argv is None else argv, prefix="llama_perplexity: error")
