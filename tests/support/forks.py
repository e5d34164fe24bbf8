"""Forking the test process, as a Celery worker's main process forks a pool process: with
threads of its own running."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable

from gateway.ops.processes import wait_until


def in_fork(child: Callable[[], bool], after_fork: Callable[[], object] = lambda: None,
            timeout_s: float = 5.0) -> int:
    """Fork; the child runs `child` and exits 0 when it returns True (1 else) and the parent
    runs `after_fork`. The child's exit code, or -1 when it still runs (hangs) after
    `timeout_s` (then it is killed)."""
    with warnings.catch_warnings():  # (3.12 warns of forking a process with threads: the case)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        os._exit(0 if child() else 1)
    after_fork()
    status: list[int] = []

    def ended() -> bool:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status.append(code)
        return bool(done)

    try:
        wait_until(ended, timeout_s, "the forked child to end", interval_s=0.01)
    except TimeoutError:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return -1
    return os.waitstatus_to_exitcode(status[0])
