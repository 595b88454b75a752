"""--sleep-idle-seconds N: unload the model after N idle seconds, reload it on the next request
(llama.cpp 0c1e570: server-queue.cpp's start_loop enters the sleeping state when no task came
for N s; server-context.cpp's handle_sleeping_state destroys the model and context and loads
them again on wake-up; a request waits in server_res_generator until the server is awake).

Here the engine thread sleeps (Engine._run calls maybe_sleep when it has nothing to do) and the
HTTP side (app.Gate) wakes it: every request except /health, /metrics and the Web UI files
waits until the model is loaded again, as llama.cpp's handlers do. The engine never sleeps
while an HTTP request is in flight (Gate's count), so no handler finds the model gone.
"""
from __future__ import annotations

import gc
import time

from ..log import get_logger

log = get_logger("server")
# answered while asleep without waking the model (llama.cpp: create_response(bypass_sleep=true))
BYPASS = ("/health", "/v1/health", "/metrics")


def check_seconds(value: int) -> int:
    """common/arg.cpp's rule for --sleep-idle-seconds."""
    if value == 0 or value < -1:
        raise SystemExit('error while handling argument "--sleep-idle-seconds": invalid '
                         "value: cannot be 0 or less than -1")
    return value


def maybe_sleep(engine) -> None:
    """On the engine thread, with no task busy or pending: sleep once idle long enough, and
    return when woken with the model loaded again."""
    idle = engine.cfg.sleep_idle_seconds
    if idle <= 0 or time.monotonic() - engine.t_last_task < idle:
        return
    engine.awake.clear()               # first: a request arriving now waits for the wake-up
    if engine.http_busy() or not engine.tasks.empty():
        engine.awake.set()             # a request is being handled: not idle after all
        engine.t_last_task = time.monotonic()
        return
    log.info("srv  handle_sleeping_state: server is entering sleeping state")
    for name in ("ctx", "memory", "spec", "model", "vocab"):
        setattr(engine, name, None)
    engine.slots = []
    gc.collect()
    _trim()
    while True:                        # woken by wake() (a None), a task, or stop()
        item = engine.tasks.get()
        if engine._stop:
            return
        if item is not None:
            engine.pending.append(item)
        break
    log.info("srv  handle_sleeping_state: server is exiting sleeping state")
    try:
        engine.load()
    except BaseException as e:  # noqa: BLE001 - llama.cpp aborts: "failed to reload model"
        log.error(f"srv  handle_sleeping_state: failed to reload model after sleeping: {e}")
        engine.load_error = e
        engine._stop = True
        engine.on_fatal()
        return
    engine.t_last_task = time.monotonic()
    engine.awake.set()


def wake(engine) -> None:
    """Any thread: ask a sleeping engine to load its model again (wait on engine.awake)."""
    if not engine.awake.is_set():
        engine.tasks.put(None)


def _trim() -> None:
    try:
        import ctypes
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
