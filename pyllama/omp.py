"""How the CPU backend's OpenMP threads wait for work: llama.cpp's `--poll` level.

llama.cpp's threads poll (spin) for a while before sleeping (`--poll`, default 50). pyllama's CPU
kernels run on libgomp, which reads its wait policy once, when the library loads (the first CPU
kernel import), from OMP_WAIT_POLICY and GOMP_SPINCOUNT. This module sets both before that:

- poll 0: OMP_WAIT_POLICY=passive, no spinning: a thread sleeps as soon as it has no work.
- poll p > 0: passive, plus GOMP_SPINCOUNT = p * SPINS_PER_POLL: a thread spins about p
  microseconds (libgomp counts ~100 spins per microsecond) before sleeping, so the next op of a
  token, launched tens of microseconds later, finds it awake.

Default (no --poll, no OMP_WAIT_POLICY/GOMP_SPINCOUNT in the environment): poll 50 when the
machine has idle cores at start-up (runnable tasks sampled for ~10 ms), else 0 (docs/architecture.md).
Measured on the 2-core
box, Gemma 3 270M tg: quiet, passive 31 t/s vs poll 50 38 t/s; overloaded (other busy
processes), passive 11 t/s vs poll 50 6-8 t/s: spinning only pays when the cores are ours.
Variables the user set are never changed.
"""
from __future__ import annotations

import os
import sys
import time

from .log import get_logger

DEFAULT_POLL = 50
SPINS_PER_POLL = 100
_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_MARK = "PYLLAMA_OMP_POLL"      # set with the variables: a child process decides anew
_OMP_MODULES = ("pyllama.backend.cpu._ops", "pyllama.backend.cpu._matmul",
                "pyllama.backend.cpu._attn", "pyllama.backend.cpu._attn_q")
_state = {"poll": None, "user": False}


def _set_by_us(env) -> bool:
    try:
        return {v: env[v] for v in _VARS if v in env} == environment(int(env[_MARK]))
    except (KeyError, ValueError):
        return False


def _user_set(env) -> bool:
    return any(v in env for v in _VARS) and not _set_by_us(env)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def busy_cpus(samples: int = 9, interval: float = 0.001) -> float:
    """Other work on the machine now: the median number of runnable tasks in a few samples of
    /proc/loadavg ~1 ms apart, not counting this process's runnable threads. (The 1-minute load
    average lags: it still counts a benchmark run that just ended; one sample can catch a
    process that is just exiting or a short burst, and miss others' short sleeps, hence the
    median of several: a CPU-bound neighbour is runnable in most of them.) Without /proc: the
    load average."""
    seen = []
    for i in range(samples):
        try:
            with open("/proc/loadavg", encoding="ascii") as f:
                total = int(f.read().split()[3].split("/")[0])
            seen.append(max(0, total - _own_runnable()))
        except (OSError, ValueError, IndexError):
            break
        if i + 1 < samples:
            time.sleep(interval)
    if seen:
        return float(sorted(seen)[len(seen) // 2])
    try:
        return min(os.getloadavg()[0], float(cpu_count()))
    except OSError:
        return 0.0


def _own_runnable() -> int:
    """This process's runnable threads (at least the caller): numpy's BLAS threads spin for a
    while after they start and must not count as other work."""
    n = 0
    try:
        for t in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{t}/stat", encoding="ascii") as f:
                    n += f.read().rsplit(")", 1)[1].split()[0] == "R"
            except (OSError, IndexError):
                pass
    except OSError:
        pass
    return max(1, n)


def auto_poll(n_cpu: int | None = None, busy: float | None = None) -> int:
    """DEFAULT_POLL when at most half of the CPUs are busy with other work, else 0."""
    n_cpu = cpu_count() if n_cpu is None else n_cpu
    busy = busy_cpus() if busy is None else busy
    return DEFAULT_POLL if n_cpu > 1 and busy <= n_cpu / 2 else 0


def environment(poll: int) -> dict[str, str]:
    """The libgomp variables for a poll level (0..100)."""
    if not 0 <= poll <= 100:
        raise ValueError(f"poll level {poll} out of range [0, 100]")
    env = {"OMP_WAIT_POLICY": "passive"}
    if poll > 0:
        env["GOMP_SPINCOUNT"] = str(poll * SPINS_PER_POLL)
    return env


def started() -> bool:
    """Whether a CPU kernel module (and with it libgomp) is already loaded."""
    return any(m in sys.modules for m in _OMP_MODULES)


def current() -> int:
    """The poll level in effect: the one configure set, else the user's variables'."""
    return _state["poll"] if _state["poll"] is not None else level_of(os.environ)


def level_of(env) -> int:
    """The poll level OMP_WAIT_POLICY/GOMP_SPINCOUNT amount to (libgomp's default, when neither
    is set, spins ~3 ms: 100)."""
    try:
        return max(0, min(100, int(env["GOMP_SPINCOUNT"]) // SPINS_PER_POLL))
    except (KeyError, ValueError):
        return 0 if env.get("OMP_WAIT_POLICY", "").lower() == "passive" else 100


def configure(poll: int | None = None) -> int | None:
    """Set the wait policy for poll level `poll` (None: auto_poll()) unless the user set the
    variables; returns the level in effect (None when the user's variables rule). After the
    kernels are loaded an explicit level cannot take effect: it is logged and ignored."""
    if _state["user"]:
        return None
    if started():
        if poll is not None and poll != _state["poll"]:
            get_logger("omp").warning("--poll %d ignored: the CPU backend has already started "
                                      "(poll %s in effect)", poll, _state["poll"])
        return _state["poll"]
    level = auto_poll() if poll is None else poll
    for v in _VARS:
        os.environ.pop(v, None)
    os.environ.update(environment(level))
    os.environ[_MARK] = str(level)
    _state["poll"] = level
    return level


_state["user"] = _user_set(os.environ)      # as found at `import pyllama`
