"""Read-bandwidth limit for decode: a read-only pass over the same weight bytes on the same threads.

    python bench/bandwidth.py [--models gemma-3-270m,qwen2.5-coder-0.5b] [-t 2] [--rounds 7]

One decoded token reads every matmul weight once (the tied output head included). This script
walks exactly those bytes (the GGUF's mmap views, in file order) with an AVX2 sum of 32-byte
loads, the threads splitting each matrix by rows as the matmul does, and reports:

- `one_region`: all weights in one OpenMP region (no fork/join between matrices): the streaming
  limit of this machine for this working set, the number `% of limit` is measured against;
- `per_matrix`: one parallel region per weight matrix, as a decode issues them (adds the
  thread wake-ups of ~130 regions per token);
- the tokens/s a decode could reach at each rate (bytes per token / rate).

Minimum over rounds (the machine is shared: read min, say what the load was). The C kernel is
compiled here with the system compiler (gcc -O3 -march=native -fopenmp) into a temporary
directory and loaded with ctypes; no library code is involved.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

C_SRC = r"""
#include <immintrin.h>
#include <stdint.h>
#include <omp.h>
/* sum of 64-bit lanes of every 32-byte chunk of bufs[i][0:lens[i]] (lens multiple of 128) */
static inline __m256i rd(const uint8_t *p, int64_t n, __m256i acc) {
    __m256i a0 = acc, a1 = _mm256_setzero_si256(), a2 = a1, a3 = a1;
    for (int64_t j = 0; j < n; j += 128) {
        a0 = _mm256_add_epi64(a0, _mm256_loadu_si256((const __m256i *)(p + j)));
        a1 = _mm256_add_epi64(a1, _mm256_loadu_si256((const __m256i *)(p + j + 32)));
        a2 = _mm256_add_epi64(a2, _mm256_loadu_si256((const __m256i *)(p + j + 64)));
        a3 = _mm256_add_epi64(a3, _mm256_loadu_si256((const __m256i *)(p + j + 96)));
    }
    return _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
}
static inline void split(int64_t len, int tid, int nth, int64_t *s, int64_t *e) {
    int64_t chunks = len / 128, per = chunks / nth, rem = chunks % nth;
    *s = 128 * (tid * per + (tid < rem ? tid : rem));
    *e = *s + 128 * (per + (tid < rem));
}
int64_t read_one_region(const uint8_t **bufs, const int64_t *lens, int n, int nth) {
    int64_t total = 0;
    #pragma omp parallel num_threads(nth) reduction(+:total)
    {
        int tid = omp_get_thread_num(), nt = omp_get_num_threads();
        __m256i acc = _mm256_setzero_si256();
        for (int i = 0; i < n; i++) {
            int64_t s, e; split(lens[i], tid, nt, &s, &e);
            acc = rd(bufs[i] + s, e - s, acc);
        }
        int64_t v[4]; _mm256_storeu_si256((__m256i *)v, acc);
        total += v[0] + v[1] + v[2] + v[3];
    }
    return total;
}
int64_t read_per_matrix(const uint8_t **bufs, const int64_t *lens, int n, int nth) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        int64_t t = 0;
        #pragma omp parallel num_threads(nth) reduction(+:t)
        {
            int tid = omp_get_thread_num(), nt = omp_get_num_threads();
            int64_t s, e; split(lens[i], tid, nt, &s, &e);
            int64_t v[4]; _mm256_storeu_si256((__m256i *)v, rd(bufs[i] + s, e - s, _mm256_setzero_si256()));
            t += v[0] + v[1] + v[2] + v[3];
        }
        total += t;
    }
    return total;
}
"""


def build() -> ctypes.CDLL:
    d = tempfile.mkdtemp(prefix="pyl_bw_")
    src, so = os.path.join(d, "bw.c"), os.path.join(d, "bw.so")
    with open(src, "w") as f:
        f.write(C_SRC)
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", src, "-o", so],
                   check=True)
    lib = ctypes.CDLL(so)
    for fn in (lib.read_one_region, lib.read_per_matrix):
        fn.restype = ctypes.c_int64
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                       ctypes.c_int, ctypes.c_int]
    return lib


def weight_views(path: str) -> list[np.ndarray]:
    """The matmul weights of one decode, as uint8 views of the file mapping (norms and other
    F32 vectors excluded: they are a few KB). The tied output reads token_embd."""
    from pyllama.gguf.reader import GGUFReader
    r = GGUFReader(path)
    out = []
    for name, t in r.tensors.items():
        if len(t.shape) < 2 or t.shape[0] == 1:
            continue
        if name == "token_embd.weight" and "output.weight" in r.tensors:
            continue        # only get_rows reads it (one row per token)
        out.append(np.asarray(t.data).reshape(-1).view(np.uint8))
    return out, r


def measure(lib, views, nth: int, rounds: int) -> dict:
    n = len(views)
    lens = [v.nbytes // 128 * 128 for v in views]
    ptrs = (ctypes.c_void_p * n)(*[v.ctypes.data for v in views])
    lns = (ctypes.c_int64 * n)(*lens)
    total = sum(lens)
    res = {"bytes": total, "matrices": n}
    for name, fn in (("one_region", lib.read_one_region), ("per_matrix", lib.read_per_matrix)):
        fn(ptrs, lns, n, nth)                           # page in, warm up
        best = float("inf")
        for _ in range(rounds):
            t = time.perf_counter()
            fn(ptrs, lns, n, nth)
            best = min(best, time.perf_counter() - t)
        res[name + "_GBps"] = total / best / 1e9
        res[name + "_tps"] = 1 / best
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="gemma-3-270m,qwen2.5-coder-0.5b")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(HERE))
    from pyllama.models import resolve
    lib = build()
    cpu = ""
    with open("/proc/cpuinfo") as f:
        cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
    print(f"# read-bandwidth limit, {time.strftime('%Y-%m-%d %H:%M:%S')}, {cpu}, "
          f"{os.cpu_count()} cores, {args.threads} threads, load average {os.getloadavg()[0]:.1f}")
    print("| model | MB/token | matrices | one region GB/s | t/s limit | per-matrix GB/s | t/s |")
    print("|---|---|---|---|---|---|---|")
    for alias in args.models.split(","):
        views, _r = weight_views(resolve(alias))
        m = measure(lib, views, args.threads, args.rounds)
        print(f"| {alias} | {m['bytes'] / 1e6:.1f} | {m['matrices']} | {m['one_region_GBps']:.2f} | "
              f"{m['one_region_tps']:.1f} | {m['per_matrix_GBps']:.2f} | {m['per_matrix_tps']:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
