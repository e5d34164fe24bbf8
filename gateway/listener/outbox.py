"""A thread that publishes on behalf of the listener, so the SDK loop never waits on the broker.

Bounded: while the broker is down its jobs pile up, so past `cap` jobs the listener refuses
new events (`full`: their frames are answered with a failure and Feishu keeps them) instead
of growing without bound. A job that still finds it full is dropped with one line: what it
would have published is in Redis already, and the sweeper publishes it.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

_STOP = object()
CAP_JOBS = 10_000
"""The jobs an outbox holds by default (GATEWAY_OUTBOX_CAP)."""


class Outbox:
    """Runs submitted jobs one by one, in order, on its own thread."""

    def __init__(self, name: str = "gateway-outbox", *, cap: int = CAP_JOBS) -> None:
        self.cap = cap
        self._jobs: queue.Queue[Callable[[], object] | object] = queue.Queue(maxsize=cap)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Outbox:
        self._thread.start()
        return self

    def full(self) -> bool:
        """Whether `cap` jobs wait: the broker is not keeping up (or is down)."""
        return self._jobs.qsize() >= self.cap

    def submit(self, job: Callable[[], object]) -> None:
        """Queue `job`, never blocking; dropped (logged) when the outbox is full."""
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            logger.warning("outbox full (%d jobs): a publish is left to the sweeper", self.cap)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Finish what was submitted (up to the timeout), then end the thread."""
        try:
            self._jobs.put(_STOP, timeout=timeout_s)
        except queue.Full:
            logger.warning("outbox still full after %.1fs; the sweeper will finish its work",
                           timeout_s)
            return
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
