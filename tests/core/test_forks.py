"""A fork never splits a step of this process's threads: what a step holds, the forked
child finds free (a Celery worker's main process forking a new pool process while its
sweeper or revoke lane works)."""

from __future__ import annotations

import threading

from gateway.core.forks import ForkGate
from tests.support.forks import in_fork


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
    assert in_fork(held.acquire) == 0
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
    assert in_fork(threading.Lock().acquire) == 0, "forked after the wait"
    finish.set()
    worker.join(5)
    assert not worker.is_alive()
