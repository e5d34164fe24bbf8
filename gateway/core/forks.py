"""Steps of a process's own threads that a fork never splits.

A Celery worker's main process forks a new pool process whenever one ends (a turn
terminated, a crash, a recycled child) while threads of its own work beside its event loop
(the sweeper, the revoke lane). A lock such a thread holds at that instant (a module being
imported, a part being built, a connection pool's) is copied held into the child, which
hangs on it the first time it needs the same: its pool slot is lost, and the task handed to
it. So each of those threads does its work in short `step()`s (one Redis round, one batch,
one attempt: never a sleep between tries): a fork waits for the steps in progress and no
step begins while it forks. A step that outlasts `wait_s` (a slow send) does not hold the
pool back longer: the fork goes ahead, logged.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)

WAIT_S = 5.0
"""How long a fork waits for a step in progress."""


class ForkGate:
    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self._renew()
        os.register_at_fork(before=self._close, after_in_parent=self._open,
                            after_in_child=self._renew)

    def _renew(self) -> None:
        self._state = threading.Condition(threading.Lock())
        self._steps = 0
        self._forking = False

    @contextmanager
    def step(self) -> Iterator[None]:
        """One step no fork splits; while a fork waits, no step begins (it waits behind)."""
        with self._state:
            self._state.wait_for(lambda: not self._forking)
            self._steps += 1
        try:
            yield
        finally:
            with self._state:
                self._steps -= 1
                self._state.notify_all()

    def _close(self) -> None:
        """Before a fork: wait for the steps in progress; the state's lock is kept until the
        fork is done (forks of two threads go one after the other)."""
        self._state.acquire()
        self._forking = True
        if not self._state.wait_for(lambda: self._steps == 0, self.wait_s):
            logger.warning("forking while %d step(s) of this process's threads still run "
                           "(over %.0f s): the new process may wait on a lock one holds",
                           self._steps, self.wait_s)

    def _open(self) -> None:
        self._forking = False
        self._state.notify_all()
        self._state.release()


_gate: ForkGate | None = None
_making = threading.Lock()


def fork_gate() -> ForkGate:
    """This process's gate (its forks inherit it, renewed), made on first use: by the
    thread that forks, before any other uses it."""
    global _gate
    if _gate is None:
        with _making:
            if _gate is None:
                _gate = ForkGate()
    return _gate
