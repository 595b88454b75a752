"""Tokenizer build and tokenize times for the bundled models (issue 4: each < 0.5 s).

    PYTHONPATH=. python bench/vocab_times.py [--rounds 5]

Per model: the first Vocab.from_gguf in this process (cold: first touch of the mapping and of
the libraries), then the min and median of --rounds further builds (warm), each on a freshly
opened reader (opening is bench_gguf's business), the first tokenize of 100 KB of mixed text
(the reference corpus repeated) on each fresh vocab, then tokenize (its piece cache warm) and
detokenize of the same text on one vocab. Wall clock and CPU time (time.process_time) both: on a
shared box the CPU time is the steadier figure. The load average is printed with the results.
There is no tokenizer cache: the tables are built from the GGUF arrays every time.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_bench_vocab import MODELS, text_100k  # noqa: E402

from pyllama.gguf import GGUFReader  # noqa: E402
from pyllama.models import resolve  # noqa: E402
from pyllama.vocab import Vocab  # noqa: E402


def timed(fn, *args):
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args)
    return out, time.perf_counter() - w, time.process_time() - c


def summary(name, runs):
    wall, cpu = [r[0] for r in runs], [r[1] for r in runs]
    return (f"  {name:<12} wall min {min(wall) * 1e3:7.1f} ms  med {statistics.median(wall) * 1e3:7.1f}"
            f" | cpu min {min(cpu) * 1e3:7.1f} ms  med {statistics.median(cpu) * 1e3:7.1f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    text = text_100k()
    print(f"load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; "
          f"{len(text.encode())} bytes of text")
    for alias in MODELS:
        path = resolve(alias, progress=False)
        _, w, c = timed(Vocab.from_gguf, GGUFReader(path))
        print(f"{alias}: first build {w * 1e3:.1f} ms wall, {c * 1e3:.1f} ms cpu")
        builds, firsts = [], []
        for _ in range(args.rounds):
            reader = GGUFReader(path)
            vocab, w, c = timed(Vocab.from_gguf, reader)
            builds.append((w, c))
            firsts.append(timed(vocab.tokenize, text)[1:])
        print(summary("build", builds))
        print(summary("1st tokenize", firsts))
        toks = [timed(vocab.tokenize, text)[1:] for _ in range(args.rounds)]
        print(summary("tokenize", toks))
        ids = vocab.tokenize(text, add_special=False)
        detoks = [timed(vocab.detokenize, ids)[1:] for _ in range(args.rounds)]
        print(summary("detokenize", detoks) + f"  ({len(ids)} tokens)")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
