"""A thread that publishes on behalf of the listener, so the SDK loop never waits on the broker."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

_STOP = object()


class Outbox:
    """Runs submitted jobs one by one, in order, on its own thread."""

    def __init__(self, name: str = "gateway-outbox") -> None:
        self._jobs: queue.SimpleQueue[Callable[[], object] | object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Outbox:
        self._thread.start()
        return self

    def submit(self, job: Callable[[], object]) -> None:
        self._jobs.put(job)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Finish what was submitted (up to the timeout), then end the thread."""
        self._jobs.put(_STOP)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            logger.warning("outbox still busy after %.1fs; the sweeper will finish its work",
                           timeout_s)

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            assert callable(job)
            try:
                job()
            except Exception:  # a job's failure must not end the thread
                logger.exception("outbox job failed")
