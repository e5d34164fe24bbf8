"""A thread that publishes on behalf of the listener, so the SDK loop never waits on the broker.

Bounded: while the broker is down its jobs pile up, so past `cap` jobs the listener refuses
new events (`full`: their frames are answered with a failure and Feishu keeps them) instead
of growing without bound. A job that still finds it full is dropped with one line: what it
would have published is in Redis already, and the sweeper publishes it.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

logger = logging.getLogger(__name__)

_STOP = object()
T = TypeVar("T")
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


class Coalescing(Generic[T]):
    """Items submitted one by one to an outbox, handled together: each submit queues one
    job, and the first job to run hands every item waiting by then (up to `most` a call) to
    `handle`, so what piles up while the outbox thread is busy goes out in one call (the
    listener's turns: one publish round trip for a group). Order is kept. An item whose job
    was dropped (the outbox full) goes with the next job; a failed `handle` is logged by
    the outbox, and its items are the sweeper's to publish again."""

    def __init__(self, outbox: Outbox, handle: Callable[[list[T]], object], *,
                 most: int = 256) -> None:
        self._outbox, self._handle, self._most = outbox, handle, most
        self._items: collections.deque[T] = collections.deque()

    def submit(self, item: T) -> None:
        self._items.append(item)
        self._outbox.submit(self._drain)

    def _drain(self) -> None:
        while self._items:
            batch: list[T] = []
            while self._items and len(batch) < self._most:
                batch.append(self._items.popleft())
            self._handle(batch)
