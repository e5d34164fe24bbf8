"""A fork never splits a step of this process's threads: what a step holds, the forked
child finds free (a Celery worker's main process forking a new pool process while its
sweeper or revoke lane works)."""

from __future__ import annotations

import os
import threading
import warnings

from gateway.core.forks import ForkGate
from gateway.ops.processes import wait_until


def fork_and_take(held: threading.Lock) -> int:
    """Fork; the child takes `held` (exit 0), or hangs on it. The child's exit code, or -1
    when it still hangs after 5 s (then it is killed)."""
    with warnings.catch_warnings():  # (3.12 warns of forking a process with threads: the case)
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        held.acquire()
        os._exit(0)
    status: list[int] = []

    def ended() -> bool:
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            status.append(code)
        return bool(done)

    try:
        wait_until(ended, 5, "the child to take the lock", interval_s=0.01)
    except TimeoutError:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        return -1
    return os.waitstatus_to_exitcode(status[0])


def test_a_fork_waits_for_the_step_in_progress() -> None:
    gate = ForkGate(wait_s=10)
    held, inside, finish = threading.Lock(), threading.Event(), threading.Event()

    def step() -> None:
        with gate.step(), held:  # (an import, a part being built: any lock of the process)
            inside.set()
            finish.wait(10)

    worker = threading.Thread(target=step, daemon=True)
    worker.start()
    assert inside.wait(5)
    threading.Timer(0.3, finish.set).start()  # the step ends while the fork waits
    assert fork_and_take(held) == 0
    worker.join(5)
    with gate.step():  # the parent's gate is open again after the fork
        pass


def test_a_step_that_outlasts_the_wait_does_not_hold_the_fork_back() -> None:
    gate = ForkGate(wait_s=0.2)
    inside, finish = threading.Event(), threading.Event()

    def step() -> None:
        with gate.step():
            inside.set()
            finish.wait(10)

    worker = threading.Thread(target=step, daemon=True)
    worker.start()
    assert inside.wait(5)
    assert fork_and_take(threading.Lock()) == 0, "forked after the wait"
    finish.set()
    worker.join(5)
    assert not worker.is_alive()
