"""llama-perplexity: perplexity of a text (-f) in llama.cpp's chunking, output and ± estimate;
--kl-divergence-base FILE alone saves a `_logits_` base file, with --kl-divergence compares against
one (KLD, Δp and same-top statistics); --ppl-stride N is the strided perplexity; --hellaswag,
--winogrande and --multiple-choice score task files. The maths lives in pyllama.perplexity and
pyllama.scoring (llama.cpp tools/perplexity/perplexity.cpp); this module prints llama.cpp's lines.
Where llama.cpp logs an error about its input and returns exit status 0, this tool prints the same
line and exits 1.
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
    scoring = params.hellaswag or params.winogrande or params.multiple_choice
    # llama_perplexity's main: 4+ sequences in a unified cache for the tasks, else n_batch/n_ctx
    n_seq = max(4, params.n_parallel) if scoring else max(1, params.n_batch // params.n_ctx)
    n_ctx = n_seq * params.n_ctx
    if params.ppl_stride > 0:
        log().info(f"Will perform strided perplexity calculation -> adjusting context size from "
                   f"{n_ctx} to {n_ctx + params.ppl_stride // 2}")
        n_ctx += params.ppl_stride // 2
    from pyllama.errors import PyllamaError
    try:
        model = load_model(params)
    except PyllamaError as e:
        log().error(f"llama_perplexity: unable to load model ({e})")
        return 1
    out = Output(params)
    if scoring:
        from pyllama.scoring import TaskError
        ctx = _context(model, params, n_ctx, min(params.n_batch, n_ctx), n_seq, kv_unified=True)
        run = (run_hellaswag if params.hellaswag else run_winogrande if params.winogrande
               else run_multiple_choice)
        try:
            rc = run(params, model, ctx, out)
        except TaskError as e:
            log().error(str(e))
            out("\n")
            return 1
        out("\n")
        return rc
    if params.kl_divergence:
        return run_kld(params, model, out)
    if params.ppl_stride > 0:
        return run_strided(params, model, out, n_ctx, n_seq)
    return run_ppl(params, model, out)


def _context(model, params, n_ctx: int, n_batch: int, n_seq: int, kv_unified=None):
    import pyllama
    kw = params.context_kwargs(model.hparams.n_ctx_train)
    kw.update(n_ctx=n_ctx, n_batch=n_batch, n_ubatch=min(params.n_ubatch, n_batch),
              n_seq_max=n_seq, numerics=params.numerics_for(model.backend.name))
    if kv_unified is not None:
        kw["kv_unified"] = kv_unified
    return pyllama.Context(model, **kw)


def _tokenizer(model):
    return lambda text: model.tokenize(text, add_special=True, parse_special=False)


def cfloat(v, spec: str) -> str:
    """printf's %<spec> of a float: Python's digits, glibc's spelling of nan/inf and their sign."""
    import math
    v = float(v)
    if math.isnan(v) or math.isinf(v):
        word = ("-" if math.copysign(1.0, v) < 0 else "") + ("nan" if math.isnan(v) else "inf")
        width = spec.split(".")[0]
        return f"{word:>{width}}" if width else word
    return format(v, spec)


# ---- the scoring tasks ------------------------------------------------------------------------
def run_hellaswag(params, model, ctx, out: Output) -> int:
    from pyllama import scoring as sc
    lg = log()
    lines = sc.hellaswag_lines(params.prompt)
    n_all = len(lines) // 6
    lg.info(f"hellaswag_score : loaded {n_all} tasks from prompt.")
    lg.info(f"================================= is_spm = {int(model.vocab.kind == 'spm')}")
    n_tasks = params.hellaswag_tasks % (1 << 64)          # size_t
    lg.info(f"hellaswag_score : selecting {min(n_tasks, n_all)} randomized tasks.")
    tasks = sc.hellaswag_select(lines, n_tasks, _tokenizer(model))
    lg.info("hellaswag_score : calculating hellaswag score over selected tasks.")
    out("\ntask\tacc_norm\t95% confidence interval\n")
    for r in sc.hellaswag_score(ctx, tasks, ctx.n_batch):
        out(f"{r.index}\t{cfloat(r.acc_norm * 100.0, '3.8f')}%\t[{cfloat(r.lo * 100.0, '3.4f')}%, "
            f"{cfloat(r.hi * 100.0, '3.4f')}%]\n")
    out("\n")
    return 0


def run_winogrande(params, model, ctx, out: Output) -> int:
    from pyllama import scoring as sc
    lg = log()
    rows, errors = sc.winogrande_rows(params.prompt)
    for e in errors:
        lg.error(e)
    if not rows:
        raise sc.TaskError("winogrande_score: no tasks")
    lg.info(f"winogrande_score : loaded {len(rows)} tasks from prompt.")
    n_tasks = params.winogrande_tasks % (1 << 64)
    if 0 < n_tasks < len(rows):
        lg.info(f"winogrande_score : selecting {n_tasks} random tasks")
    rows = sc.winogrande_select(rows, n_tasks)
    lg.info("winogrande_score : tokenizing selected tasks")
    tasks = sc.winogrande_tasks(rows, _tokenizer(model))
    lg.info("winogrande_score : calculating winogrande score over selected tasks.")
    n_done = n_correct = 0
    for r in sc.winogrande_score(ctx, tasks, ctx.n_batch):
        n_done += 1
        n_correct += r.result == r.answer
        out(f"{r.index}\t{cfloat(r.accuracy, '.4f')}\t{cfloat(r.score1, '10.6f')}  "
            f"{cfloat(r.score2, '10.6f')}  {r.result}  {r.answer}\n")
    out("\n")
    if n_done >= 100:
        p, sigma = sc.winogrande_final(n_correct, n_done)
        lg.info(f"Final Winogrande score({n_done} tasks): {cfloat(p, '.4f')} +/- "
                f"{cfloat(sigma, '.4f')}")
    return 0


def _raw_prompt(params) -> bytes:
    """The prompt's bytes (a binary task file is not text): -bf's file as it is, -f's without its
    last newline (common/arg.cpp read_file), else the prompt text."""
    if params.prompt_file and not params.escape:
        with open(params.prompt_file, "rb") as f:
            data = f.read()
        if not params.prompt_is_binary and data.endswith(b"\n"):
            data = data[:-1]
        return data
    return params.prompt.encode("utf-8", "surrogateescape")


def run_multiple_choice(params, model, ctx, out: Output) -> int:
    from pyllama import scoring as sc
    lg = log()
    n_tasks = params.multiple_choice_tasks % (1 << 64)

    def on_start(n_task):
        if n_tasks == 0 or n_tasks >= n_task:
            _err_part("multiple_choice_score: reading tasks")
        else:
            lg.info(f"multiple_choice_score: selecting {n_tasks} random tasks from {n_task} "
                    f"tasks available")

    n_task, raw = sc.mc_read(
        _raw_prompt(params), n_tasks, on_dot=lambda: out("."), on_start=on_start,
        on_count=lambda n: lg.info(f"multiple_choice_score: there are {n} tasks in prompt"))
    if n_tasks == 0 or n_tasks >= n_task:
        out("done\n")
    _err_part("multiple_choice_score: preparing task data")
    if len(raw) > 500:
        out("...")
    tasks = sc.mc_prepare(raw, _tokenizer(model), on_dot=lambda: out("."))
    out("done\n")
    lg.info(f"multiple_choice_score : calculating TruthfulQA score over {len(tasks)} tasks.")
    out("\ntask\tacc_norm\n")
    n_done = n_correct = n_answers = 0
    for r in sc.mc_score(ctx, tasks, ctx.n_batch):
        n_done, n_correct, n_answers = r.index, n_correct + r.correct, n_answers + r.n_answers
        out(f"{r.index}\t{cfloat(r.accuracy, '.8f')}\n")
    res, res_pm, chance, chance_pm = sc.mc_final(n_correct, n_done, n_answers)
    out("\n")
    lg.info(f"Final result: {cfloat(res, '.4f')} +/- {cfloat(res_pm, '.4f')}")
    lg.info(f"Random chance: {cfloat(chance, '.4f')} +/- {cfloat(chance_pm, '.4f')}")
    lg.info("")
    return 0


def _err_part(text: str) -> None:
    """A LOG_INF without its newline (llama.cpp's next message continues the line)."""
    from pyllama.log import logger
    saved = [(h, getattr(h, "terminator", "\n")) for h in logger.handlers]
    for h, _ in saved:
        h.terminator = ""
    try:
        log().info(text)
    finally:
        for h, t in saved:
            h.terminator = t


# ---- strided perplexity ----------------------------------------------------------------------
def run_strided(params, model, out: Output, n_ctx: int, n_seq: int) -> int:
    """perplexity_v2 (--ppl-stride): no final estimate line, as llama.cpp."""
    from pyllama import perplexity as ppl
    from pyllama.errors import ContextError
    lg = log()
    ctx = _context(model, params, n_ctx, min(params.n_batch, n_seq * params.n_ctx), n_seq)
    lg.info("perplexity_v2: tokenizing the input ..")
    tokens = model.tokenize(params.prompt, add_special=True, parse_special=False)
    n_ctx = ctx.n_ctx                                  # llama_n_ctx: padded
    if len(tokens) < 2 * n_ctx:
        lg.error(f"perplexity_v2: you need at least {2 * n_ctx} tokens to evaluate perplexity "
                 f"with a context of {n_ctx}")
        lg.error(f"perplexity_v2: the data file you provided tokenizes to only {len(tokens)} "
                 f"tokens")
        out("\n")
        return 0
    lg.info(f"perplexity_v2: have {len(tokens)} tokens. Calculation chunk = {n_ctx}")
    pl = ppl.stride_plan(len(tokens), n_ctx, ctx.n_batch, params.ppl_stride, params.n_chunks)
    lg.info(f"perplexity_v2: computing over {pl.n_chunk} chunks, n_ctx={n_ctx}, "
            f"batch_size={pl.n_batch}, n_seq={pl.n_seq}")
    import math
    t0 = time.perf_counter()
    try:
        for i, nll, count in ppl.strided_chunks(ctx, tokens, pl):
            if i == 0:
                t = time.perf_counter() - t0
                sys.stderr.write(f"perplexity_v2: {t:.2f} seconds per pass - ETA ")
                sys.stderr.flush()
                total = int(t * pl.n_chunk)
                text = ""
                if total >= 3600:
                    text += f"{total // 3600} hours "
                    total %= 3600
                out(text + f"{total / 60.0:.2f} minutes\n")
            if params.ppl_output_type == 0:
                out(f"[{i + 1}]{math.exp(nll / count):.4f},")
            else:
                out(f"{i * params.ppl_stride:8d}  {math.exp(nll / count):.4f}\n")
    except ContextError as e:
        out("\n")
        lg.error(f"perplexity_v2: {e}")
        return 1
    out("\n")
    out("\n")
    return 0


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
