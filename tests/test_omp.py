"""The OpenMP wait policy (llama.cpp's --poll level): set before the CPU kernels load."""
import json
import os
import subprocess
import sys

import pytest

from pyllama import omp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", omp._MARK)}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _run(code, **extra):
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=_clean_env(**extra), timeout=120)
    assert r.returncode == 0, r.stderr
    return r


def test_environment_for_poll_levels():
    assert omp.environment(0) == {"OMP_WAIT_POLICY": "passive"}
    assert omp.environment(50) == {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "5000"}
    assert omp.environment(1)["GOMP_SPINCOUNT"] == "100"
    for bad in (-1, 101):
        with pytest.raises(ValueError):
            omp.environment(bad)


@pytest.mark.parametrize("n_cpu,busy,want", [(2, 0.0, 50), (2, 1.0, 50), (2, 1.1, 0), (2, 4.0, 0),
                                             (8, 3.9, 50), (8, 4.5, 0), (1, 0.0, 0)])
def test_auto_poll_spins_only_with_idle_cores(n_cpu, busy, want):
    assert omp.auto_poll(n_cpu=n_cpu, busy=busy) == want


def test_busy_cpus_sees_other_runnable_processes():
    assert omp.busy_cpus() >= 0.0
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(3)]
    try:
        import time
        time.sleep(0.3)
        assert omp.busy_cpus() >= 2.0                  # always runnable: seen in every sample
    finally:
        for p in spin:
            p.kill()
            p.wait()


PROBE = ("import os, json, pyllama\nfrom pyllama import omp\n"
         "a = {v: os.environ.get(v) for v in omp._VARS}\n"
         "lv = omp.configure({level})\n"
         "b = {{v: os.environ.get(v) for v in omp._VARS}}\n"
         "from pyllama.backend.cpu import CpuBackend\n"
         "late = omp.configure(7)\n"
         "c = {{v: os.environ.get(v) for v in omp._VARS}}\n"
         "print(json.dumps([a, lv, b, late, c]))\n")


def test_explicit_level_before_kernels_load_then_fixed():
    r = _run(PROBE.replace("{level}", "20").replace("{{", "{").replace("}}", "}"))
    a, lv, b, late, c = json.loads(r.stdout)
    assert a["OMP_WAIT_POLICY"] == "passive"            # the import-time default is set
    assert lv == 20 and b == {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": "2000"}
    assert late == 20 and c == b                          # libgomp has read it: unchanged
    assert "--poll 7 ignored" in r.stderr


def test_level_zero_is_pure_passive():
    r = _run(PROBE.replace("{level}", "0").replace("{{", "{").replace("}}", "}"))
    _, lv, b, _, _ = json.loads(r.stdout)
    assert lv == 0 and b == {"OMP_WAIT_POLICY": "passive", "GOMP_SPINCOUNT": None}


def test_user_variables_are_never_changed():
    r = _run(PROBE.replace("{level}", "20").replace("{{", "{").replace("}}", "}"),
             OMP_WAIT_POLICY="active")
    a, lv, b, _, _ = json.loads(r.stdout)
    assert a == b == {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": None} and lv is None


def test_poll_flag_sets_the_policy_and_rejects_out_of_range():
    code = ("import os, sys\nfrom pyllama.__main__ import tools_package\ntools_package()\n"
            "from pyllama.tools._common import parse_or_exit\n"
            "parse_or_exit('completion', sys.argv[1:])\n"
            "print(os.environ.get('GOMP_SPINCOUNT'), os.environ.get('OMP_WAIT_POLICY'))\n")
    r = subprocess.run([sys.executable, "-c", code, "--poll", "30"], capture_output=True,
                       text=True, env=_clean_env(), timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3000", "passive"]
    r = subprocess.run([sys.executable, "-c", code, "--poll", "101"], capture_output=True,
                       text=True, env=_clean_env(), timeout=120)
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines() == ["error: invalid --poll value 101: expected 0...100"]


def test_level_of_the_users_variables():
    assert omp.level_of({"GOMP_SPINCOUNT": "2500"}) == 25
    assert omp.level_of({"GOMP_SPINCOUNT": "10000000"}) == 100
    assert omp.level_of({"OMP_WAIT_POLICY": "PASSIVE"}) == 0
    assert omp.level_of({"OMP_WAIT_POLICY": "active"}) == omp.level_of({}) == 100


def test_a_child_process_decides_anew_unless_the_user_set_the_variables():
    ours = dict(omp.environment(30), **{omp._MARK: "30"})
    assert not omp._user_set(ours)
    assert omp._user_set(dict(ours, GOMP_SPINCOUNT="7"))          # changed after us: the user's
    assert omp._user_set({"OMP_WAIT_POLICY": "passive"})
    r = _run("import os, pyllama; print(os.environ.get('GOMP_SPINCOUNT'))",
             **{k: v for k, v in omp.environment(30).items()}, **{omp._MARK: "30"})
    assert r.stdout.strip() in ("5000", "None")     # auto_poll decided again (50 or 0), not 30
