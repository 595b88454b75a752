"""llama-perplexity's scoring tasks (--hellaswag, --winogrande, --multiple-choice) and strided
perplexity (--ppl-stride) against llama.cpp 0c1e570's own llama-perplexity on the task files of
tests/data/ppltasks/ (tests/data/ppltasks-llamacpp.json, recorded by
tests/make_ppltasks_fixture.py): the same stdout, figure for figure, and the same messages.
The default run does the small cases (6 tasks, 2 windows); the 20-task runs are `slow`."""
import json
import os
import re
import struct

import numpy as np
import pytest

from toolsupport import REPO, real_model_path_or_skip

import make_ppltasks_fixture as mk

DATA = os.path.join(REPO, "tests", "data", "ppltasks")
with open(os.path.join(REPO, "tests", "data", "ppltasks-llamacpp.json"), encoding="utf-8") as f:
    FIX = json.load(f)
CASES = FIX["cases"]


def _run(tool, name, timeout=900):
    case = CASES[name]
    path = real_model_path_or_skip(case["model"])
    task = case["file"]
    f = mk.GPL3 if task is None else os.path.join(DATA, task)
    flag = "-bf" if task and task.endswith(".bin") else "-f"
    return tool("perplexity", "-m", path, flag, f, *case["args"], "-t", "2", timeout=timeout)


def _cases(kind):
    return [pytest.param(n, marks=[pytest.mark.realmodel] +
                         ([pytest.mark.slow] if kind == "slow" else []), id=n)
            for n, c in CASES.items() if c["kind"] == kind]


@pytest.mark.parametrize("name", _cases("fast") + _cases("slow"))
def test_same_output_as_llama_cpp(tool, name):
    """stdout (every figure) and the scoring functions' messages equal llama.cpp's."""
    r = _run(tool, name)
    assert r.returncode == 0, r.stderr[-2000:]
    assert mk.stdout_text(r.stdout) == CASES[name]["stdout"]
    assert mk.messages(r.stderr) == CASES[name]["messages"]


@pytest.mark.parametrize("name", _cases("bad"))
def test_bad_task_file_one_error_line(tool, name):
    """A task file llama.cpp cannot score: its message, as the only error line, and exit 1
    (llama.cpp logs it and returns 0)."""
    r = _run(tool, name, timeout=300)
    assert r.returncode == 1, r.stderr[-2000:]
    assert mk.messages(r.stderr) == CASES[name]["messages"]
    errors = re.findall(r"\d\.\d\d\d\.\d\d\d E ([^\n]*)", r.stderr)
    assert errors[-1] == CASES[name]["messages"][-1]
    assert mk.stdout_text(r.stdout) == CASES[name]["stdout"]


@pytest.mark.realmodel
def test_strided_window_in_no_sequence(tool):
    """--ppl-stride with -b above -c: the window fits in no sequence of the context; llama.cpp
    stops without a word (exit 0), pyllama says so in one error line and exits 1."""
    name = "bad-stride-b2048"
    r = _run(tool, name, timeout=300)
    assert r.returncode == 1
    assert mk.stdout_text(r.stdout) == CASES[name]["stdout"]
    got = mk.messages(r.stderr)
    assert got[:-1] == CASES[name]["messages"]
    assert got[-1].startswith("perplexity_v2: failed to decode window 1")


@pytest.mark.realmodel
def test_hellaswag_gold_index_not_a_number(tool, tmp_path):
    """llama.cpp aborts on an unparsable gold index (std::stoi throws); pyllama: one line, 1."""
    path = real_model_path_or_skip("gemma-3-270m")
    with open(os.path.join(DATA, mk.HS), encoding="utf-8") as f:
        lines = f.read().split("\n")
    lines[1] = "two"
    bad = tmp_path / "hs.txt"
    bad.write_text("\n".join(lines[:6]) + "\n")
    r = tool("perplexity", "-m", path, "-f", str(bad), "--hellaswag", "-c", "128", timeout=300)
    assert r.returncode == 1
    assert "invalid gold ending index <two>" in r.stderr


# ---- the pieces, without a model ------------------------------------------------------------
def test_random_picks_are_libstdcxx():
    """std::mt19937(1) with libstdc++'s uniform_int_distribution (HellaSwag) and llama.cpp's
    float-scaled draws (Winogrande, multiple choice), as the C++ probe printed them."""
    from pyllama import scoring as sc
    for total, want in FIX["rng"]["hellaswag"].items():
        rng = sc.MT19937(1)
        assert [sc.uniform_index(rng, int(total) - i) for i in range(len(want))] == want
    for total, want in FIX["rng"]["scaled"].items():
        rng, aux, got = sc.MT19937(1), list(range(int(total))), []
        for _ in want:
            j = sc.scaled_index(rng, len(aux))
            got.append(aux[j])
            aux[j] = aux[-1]
            aux.pop()
        assert got == want


def test_expf_is_libms():
    from pyllama import perplexity as ppl
    if ppl._EXPF is None:
        pytest.skip("no C library to compare with")
    x = np.minimum(np.random.default_rng(0).standard_normal(300000) * 8 - 9, 0).astype(np.float32)
    ref = np.asarray(np.frompyfunc(ppl._EXPF, 1, 1)(x), dtype=np.float32)
    assert np.array_equal(ppl.expf(x).view(np.uint32), ref.view(np.uint32))


def test_token_logprobs_sum_in_float_in_order():
    from pyllama import perplexity as ppl
    lg = (np.random.default_rng(1).standard_normal((3, 5000)) * 4).astype(np.float32)
    got = ppl.token_logprobs(lg, [0, 1, 2], [7, 8, 9])
    for k in range(3):
        mx = lg[k].max()
        s = np.float32(0)
        for v in ppl.expf(lg[k] - mx):
            s = np.float32(s + v)
        assert got[k] == np.float32(np.float32(lg[k, 7 + k] - mx) - ppl.logf(s))


def test_winogrande_csv_rules():
    from pyllama import scoring as sc
    text = ('0,"A, quoted _ sentence.",x,y,2\n1,no blank,x,y,1\n2,a _ b,x,y,3\n'
            '3,too,few\n4,last _ line,x,y,1')
    rows, errors = sc.winogrande_rows(text)
    assert rows == [("A, quoted ", " sentence.", "x", "y", 2)]     # line 4: no newline, unread
    assert errors == ["load_winogrande_from_csv: no _ in <no blank>",
                      "load_winogrande_from_csv: failed to parse answer <3>",
                      "load_winogrande_from_csv: failed to find comma separators in <3,too,few>"]


def test_hellaswag_lines_and_gold_index():
    from pyllama import scoring as sc
    assert sc.split_lines("a\nb\n") == ["a", "b"] and sc.split_lines("a\n\nb") == ["a", "", "b"]
    with pytest.raises(sc.TaskError, match="not a multiple of 6"):
        sc.hellaswag_lines("1\n2\n3\n")
    assert sc.stoi(" 3\r") == 3 and sc.stoi("-1x") == -1
    with pytest.raises(sc.TaskError):
        sc.stoi("x1")


def test_multiple_choice_file_reading():
    from pyllama import scoring as sc
    with open(os.path.join(DATA, mk.MC), "rb") as f:
        data = f.read()
    with open(os.path.join(DATA, "mc-20.json"), encoding="utf-8") as f:
        src = json.load(f)["tasks"]
    assert mk.mc_bytes(src) == data
    n, tasks = sc.mc_read(data, 0)
    assert n == 20 and [t[0].decode() for t in tasks] == [t["q"] for t in src]
    n, picked = sc.mc_read(data, 6)
    order = FIX["rng"]["scaled"]["20"][:6]
    assert [t[0].decode() for t in picked] == [src[i]["q"] for i in order]
    for cut, msg in ((2, "no tasks"), (10, "failed to read task positions"),
                     (len(data) - 3, "failed to read task 20 of 20")):
        with pytest.raises(sc.TaskError, match=msg):
            sc.mc_read(data[:cut], 0)
    big = struct.pack("<I", 1) + data[4:8]
    with pytest.raises(sc.TaskError, match="failed to read task 1 of 1"):
        sc.mc_read(big, 0)
