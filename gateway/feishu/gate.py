"""The ingest gate: an event's Redis step begins within FEISHU_INGEST_WAIT_MAX_MS, or the event
is refused and taken later.

Feishu sends an event again when its ACK (or the push's answer) has not come within 3 s, and
a duplicate doubles the load exactly when the listener is already behind. So an event never
waits for its step longer than `max_wait_s`:

- on arrival, when the steps ahead of it would take far longer than that (three times:
  ARRIVAL_MARGIN), it is refused at once. The estimate follows how events are
  really taken: a long connection's groups (batch_gate.py: the groups ahead of it, each
  the recent time of a group, after what is left of the one running), webhook mode's
  threads (Gate: the events ahead of it spread over the threads, each the recent time of
  a step); a recent time is the median of the latest steps;
- while it waits, when that time passes before its step began, it is refused then.

A refused event is answered with a failure (ACK 500, HTTP 503), so nothing is ACKed that was
not taken, and it is taken later in its turn: a long connection's keeps its place in the
gate's line; a push is kept by the listener (gateway/listener/refused.py). An event whose
step began is always waited for (its step is bounded by the Redis timeout).

One gate per ingest thread (a connection's) or pool (a webhook lane); its counts are touched
on the event loop only, the ticket between the loop and the thread under a lock.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, Generic, TypeVar

from gateway.core import metrics
from gateway.core.logs import Tally

logger = logging.getLogger(__name__)

T = TypeVar("T")
ARRIVAL_MARGIN = 3.0
"""An event is refused on arrival only when its estimated wait is this many times the bound:
past any hope (an estimate can be wrong: a listener whose steps were slowed a moment, by the
workers beside it say, takes the next ones faster; one that merely comes near the bound
waits, and is refused only if the bound really passes before its step began)."""
RECENT_STEPS = 9
"""How many of the latest steps the recent step time is the median of (one slow step, a
pause of the process, does not make the gate refuse what it could take)."""
LATER_RETRY_S = (0.2, 5.0)
"""With nothing else to do, events kept to take later are tried again after the first of
these, doubling while none could be taken, up to the second."""


class Recent:
    """The recent time of a step: the median of the latest RECENT_STEPS (0 before any)."""

    def __init__(self) -> None:
        self._times: deque[float] = deque(maxlen=RECENT_STEPS)
        self.value = 0.0

    def add(self, seconds: float) -> None:
        self._times.append(seconds)
        self.value = statistics.median(self._times)


class Shed:
    """An event refused because it could not be taken in time."""

    def __init__(self, why: str) -> None:
        self.why = why


class Refusals:
    """Counts (and now and then logs) the events a gate refused."""

    def __init__(self, what: str, max_wait_s: float) -> None:
        self.what, self.max_wait_s = what, max_wait_s
        self._tally = Tally(logger)

    def refused(self, when: str, waiting: int) -> Shed:
        metrics.shed()
        self._tally.note("%d event(s) of %s refused (%s, the latest) so they are answered "
                         "within FEISHU_INGEST_WAIT_MAX_MS=%.0f: %d wait for the Redis step; "
                         "they are taken later", self.what, when, self.max_wait_s * 1000,
                         waiting)
        return Shed(when)


class _Ticket(Generic[T]):
    """An event's step: begun on a thread, or shed by the loop, whichever first."""

    def __init__(self, step: Callable[[], T]) -> None:
        self._step = step
        self._lock = threading.Lock()
        self._state = "waiting"
        self.took_s = 0.0

    def run(self) -> T | Shed:
        with self._lock:
            if self._state != "waiting":
                return Shed("skipped")
            self._state = "running"
        started = time.monotonic()
        try:
            return self._step()
        finally:
            self.took_s = time.monotonic() - started

    def shed(self) -> bool:
        """Refuse the step if it has not begun; whether it was refused."""
        with self._lock:
            if self._state != "waiting":
                return False
            self._state = "shed"
            return True


class Gate:
    """The gate of a pool of `threads` that runs one event per step (webhook mode)."""

    def __init__(self, executor: Executor, max_wait_s: float, what: str, *,
                 threads: int = 1) -> None:
        self._executor, self.max_wait_s, self.threads = executor, max_wait_s, threads
        self._refusals = Refusals(what, max_wait_s)
        self.in_flight = 0
        """Events taken and not answered yet (their step runs or waits for a thread)."""
        self.step_s = Recent()

    def refused(self, when: str) -> Shed:
        """Count (and now and then log) an event refused before it reached the gate."""
        return self._refusals.refused(when, self.in_flight)

    def wait_s(self) -> float:
        """How long an event arriving now would wait for a thread: the events not begun
        ahead of it, spread over the threads, each a recent step's time."""
        waiting = self.in_flight - self.threads
        return 0.0 if waiting < 0 else (waiting // self.threads + 1) * self.step_s.value

    async def step(self, step: Callable[[], T], *, wait_s: float | None = None) -> T | Shed:
        """Run `step` on the pool and return what it returned, or Shed when it could not
        begin within `wait_s` (default `max_wait_s`; with `max_wait_s` 0, always wait). Its
        exceptions propagate."""
        budget = self.max_wait_s if wait_s is None else min(wait_s, self.max_wait_s)
        if self.max_wait_s > 0 and (budget <= 0 or self.wait_s() > budget * ARRIVAL_MARGIN):
            return self._refusals.refused("on arrival", self.in_flight)
        ticket = _Ticket(step)
        future = asyncio.get_running_loop().run_in_executor(self._executor, ticket.run)
        self.in_flight += 1
        try:
            if self.max_wait_s > 0:
                done, _ = await asyncio.wait({future}, timeout=budget)
                if not done and ticket.shed():
                    future.add_done_callback(_retrieve)
                    return self._refusals.refused("after waiting", self.in_flight)
            result = await future
        finally:
            self.in_flight -= 1
        self.step_s.add(ticket.took_s)
        return result


def answer_or_error(handle: Callable[[], T]) -> T | Exception:
    """What `handle` returned, or the error it raised: one event's boundary inside a group,
    so that every event gets its own answer (an error answers it 500, logged by whoever
    sends the ACK)."""
    try:
        return handle()
    except Exception as error:  # noqa: BLE001 (the event's ACK says 500; its sender logs it)
        return error


def _retrieve(future: asyncio.Future[Any]) -> None:
    """A shed step's outcome, consumed (it is skipped, or cancelled at shutdown)."""
    if not future.cancelled():
        future.exception()
