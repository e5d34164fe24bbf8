"""Steps of a process's own threads that a fork never splits.

A Celery worker's main process forks a new pool process whenever one ends (a turn
terminated, a crash, a recycled child) while threads of its own work beside its event loop
(the sweeper, the revoke lane). A lock such a thread holds at that instant (a module being
imported, a part being built, a connection pool's) is copied held into the child, which
hangs on it the first time it needs the same: its pool slot is lost, and the task handed to
it. So each of those threads does its work in `step()`s: a fork waits for the step in
progress and no step begins while it forks. A step that outlasts `wait_s` (Redis down, a
slow send) does not hold the pool back longer: the fork goes ahead, logged.
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
        self._lock = threading.RLock()
        self._held = False
        os.register_at_fork(before=self._close, after_in_parent=self._open,
                            after_in_child=self._renew)

    @contextmanager
    def step(self) -> Iterator[None]:
        """One step no fork splits."""
        with self._lock:
            yield

    def _close(self) -> None:
        self._held = self._lock.acquire(timeout=self.wait_s)
        if not self._held:
            logger.warning("forking while a step of this process's threads still runs "
                           "(over %.0f s): the new process may wait on a lock it holds",
                           self.wait_s)

    def _open(self) -> None:
        if self._held:
            self._held = False
            self._lock.release()

    def _renew(self) -> None:
        self._lock = threading.RLock()
        self._held = False


_gate: ForkGate | None = None
_making = threading.Lock()


def fork_gate() -> ForkGate:
    """This process's gate (and its forks' after them), made on first use."""
    global _gate
    with _making:
        if _gate is None:
            _gate = ForkGate()
        return _gate
