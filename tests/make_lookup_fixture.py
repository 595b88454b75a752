"""Record tests/data/lookup/ from llama.cpp 0c1e570's llama-lookup-create, llama-lookup-stats and
llama-lookup on the bundled Gemma-3 270M, for tests/speculative/test_lookup_tools.py.

    python tests/make_lookup_fixture.py [--bin /work/llamacpp/build/bin]

Writes static-gemma.bin.gz (llama-lookup-create of tests/data/tools/gpl3-head.txt), dynamic-gemma.bin.gz
(the -lcd file llama-lookup writes), and lookup-llamacpp.json (the figures llama-lookup-stats prints
on tests/data/GPL-3.txt with -c 256, with and without the static cache; llama-lookup's stdout and
statistics). Also checks pyllama.speculative.std_order.BUCKETS against this machine's
libstdc++.so.6 (__prime_list and _Prime_rehash_policy::_M_need_rehash) and, when g++ is
available, records a libstdc++ unordered_map's iteration order for the std_order test.
"""
from __future__ import annotations

import argparse
import ctypes
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
DATA = os.path.join(HERE, "data")
OUT = os.path.join(DATA, "lookup")
CREATE_TEXT = os.path.join(DATA, "tools", "gpl3-head.txt")
STATS_TEXT = os.path.join(DATA, "GPL-3.txt")
LOOKUP_PROMPT_CHARS = 1500           # the prompt: the first 1500 characters of CREATE_TEXT
LOOKUP_N = 48
STATS = ("n_draft", "n_predict", "n_drafted", "n_accept")

CPP = r"""
#include <unordered_map>
#include <cstdio>
#include <cstdint>
struct NG { int32_t t[4]; bool operator==(const NG&o) const {
    for (int i = 0; i < 4; i++) if (t[i] != o.t[i]) return false; return true; } };
struct H { size_t operator()(const NG& n) const { size_t h = n.t[0]*11400714819323198485llu;
    for (int i = 1; i < 4; i++) h ^= n.t[i]*11400714819323198485llu; return h; } };
int main() {
  int n; std::unordered_map<NG,int,H> m; std::unordered_map<int32_t,int> p;
  while (scanf("%d", &n) == 1 && n != -99) { NG g; for (int i = 0; i < 4; i++) scanf("%d", &g.t[i]);
    m.emplace(g, 1); }
  while (scanf("%d", &n) == 1) p.emplace(n, 1);
  for (auto & x : m) printf("%d %d %d %d\n", x.first.t[0], x.first.t[1], x.first.t[2], x.first.t[3]);
  printf("--\n");
  for (auto & x : p) printf("%d\n", x.first);
}
"""


def check_buckets() -> None:
    from pyllama.speculative.std_order import BUCKETS
    lib = ctypes.CDLL("libstdc++.so.6")

    class Policy(ctypes.Structure):
        _fields_ = [("max_load_factor", ctypes.c_float), ("next_resize", ctypes.c_size_t)]

    class Res(ctypes.Structure):
        _fields_ = [("rehash", ctypes.c_bool), ("n", ctypes.c_size_t)]
    f = lib._ZNKSt8__detail20_Prime_rehash_policy14_M_need_rehashEmmm
    f.restype, f.argtypes = Res, [ctypes.POINTER(Policy)] + [ctypes.c_size_t] * 3
    pol, nb, i, got = Policy(1.0, 0), 1, 0, []
    while len(got) < 24:
        r = f(ctypes.byref(pol), nb, i, 1)
        if r.rehash:
            assert i == (got[-1] if got else 0), (i, got)
            got.append(r.n)
            nb = i = r.n
        else:
            i = max(i + 1, pol.next_resize)
    assert tuple(got) == BUCKETS[:len(got)], got
    print("std_order.BUCKETS agree with libstdc++.so.6")


def record_std_order() -> dict | None:
    if not shutil.which("g++"):
        return None
    d = tempfile.mkdtemp()
    src, exe = os.path.join(d, "t.cpp"), os.path.join(d, "t")
    with open(src, "w") as f:
        f.write(CPP)
    subprocess.run(["g++", "-O1", "-o", exe, src], check=True)
    r = random.Random(18)
    keys, seen = [], set()
    while len(keys) < 300:
        k = tuple(r.randrange(0, 262144) if j < r.randint(1, 4) else -1 for j in range(4))
        if k not in seen:
            seen.add(k)
            keys.append(k)
    toks = r.sample(range(262144), 40)
    inp = "".join(f"0 {' '.join(map(str, k))}\n" for k in keys) + "-99\n" + " ".join(map(str, toks))
    out = subprocess.run([exe], input=inp, capture_output=True, text=True, check=True).stdout
    a, b = out.split("--\n")
    return dict(keys=keys, key_order=[list(map(int, ln.split())) for ln in a.splitlines()],
                tokens=toks, token_order=[int(x) for x in b.split()])


def stats_of(stderr: str) -> dict:
    out = {}
    for k in STATS:
        m = re.search(rf"^(?:.* I )?{k} +=\s*(-?\d+)\s*$", stderr, re.M)
        out[k] = int(m.group(1))
    m = re.search(r"accept += ([-\w.]+)%", stderr)
    out["accept"] = m.group(1)
    return out


def stats_lines(stderr: str) -> list:
    """The statistics block's lines, log prefixes dropped and numbers replaced by N."""
    lines = []
    for ln in stderr.splitlines():
        ln = re.sub(r"^\d+\.\d+\.\d+\.\d+ I ", "", ln)
        if re.match(r"(encoded|decoded|n_draft|n_predict|n_drafted|t_draft_flat|t_draft|n_accept|"
                    r"accept)\b", ln):
            lines.append(re.sub(r" *(-?\d+(\.\d+)?|-?nan|inf)", " N", ln))
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="/work/llamacpp/build/bin")
    args = ap.parse_args()
    from pyllama.models import resolve
    model = resolve("gemma-3-270m")
    check_buckets()
    os.makedirs(OUT, exist_ok=True)
    tmp = tempfile.mkdtemp()
    static = os.path.join(tmp, "static.bin")
    run = lambda name, *a: subprocess.run(  # noqa: E731
        [os.path.join(args.bin, name), "-m", model, "-t", "2", *a], capture_output=True,
        text=True, check=True)
    run("llama-lookup-create", "-f", CREATE_TEXT, "-lcs", static)
    rec = {"model": "gemma-3-270m", "create_text": "tests/data/tools/gpl3-head.txt",
           "stats_text": "tests/data/GPL-3.txt", "stats_ctx": 256}
    rec["stats"] = stats_of(run("llama-lookup-stats", "-f", STATS_TEXT, "-c", "256").stderr)
    rec["stats_static"] = stats_of(run("llama-lookup-stats", "-f", STATS_TEXT, "-c", "256",
                                       "-lcs", static).stderr)
    with open(CREATE_TEXT) as f:
        prompt = f.read()[:LOOKUP_PROMPT_CHARS]
    dyn = os.path.join(tmp, "dyn.bin")
    r = run("llama-lookup", "-p", prompt, "-n", str(LOOKUP_N), "--temp", "0", "-c", "2048",
            "-lcs", static, "-lcd", dyn)
    rec["lookup"] = dict(prompt_chars=LOOKUP_PROMPT_CHARS, n=LOOKUP_N, stdout=r.stdout,
                         stats=stats_of(r.stderr), stats_lines=stats_lines(r.stderr))
    rec["std_order"] = record_std_order()
    for src, name in ((static, "static-gemma.bin.gz"), (dyn, "dynamic-gemma.bin.gz")):
        with open(src, "rb") as f, gzip.GzipFile(os.path.join(OUT, name), "wb", mtime=0) as g:
            g.write(f.read())
    with open(os.path.join(OUT, "lookup-llamacpp.json"), "w") as f:
        json.dump(rec, f, indent=1)
    print(json.dumps({k: v for k, v in rec.items() if k != "std_order"}, indent=1)[:3000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
