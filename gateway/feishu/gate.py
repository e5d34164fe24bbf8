"""The ingest gate: an event is answered within FEISHU_INGEST_WAIT_MAX_MS, or refused.

Feishu sends an event again when its ACK (or the push's answer) has not come within 3 s,
and a duplicate doubles the load exactly when the listener is already behind. So an event
never waits for its Redis step longer than `max_wait_s`:

- on arrival, when the steps already waiting would take longer than that (their count
  times the recent step time), it is refused at once;
- while it waits, when that time passes before its step began, it is refused then, and its
  step is skipped when its turn comes.

A refused event is answered with a failure (ACK 500, HTTP 503) and recorded nowhere, so
Feishu delivers it again later: nothing is lost, and nothing is ACKed that was not taken.
An event whose step began is always waited for (its step is bounded by the Redis timeout).

One gate per ingest thread (a connection's, a webhook lane's); its counts are touched on
the event loop only, the ticket between the loop and the thread under a lock.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, Generic, TypeVar

from gateway.core import metrics

logger = logging.getLogger(__name__)

T = TypeVar("T")
STEP_WEIGHT = 0.2
"""How much the latest step counts in the recent step time (an exponential average)."""
LOG_EVERY_S = 5.0


class Shed:
    """An event refused because it could not be taken in time."""

    def __init__(self, why: str) -> None:
        self.why = why


class _Ticket(Generic[T]):
    """An event's step: begun on the ingest thread, or shed by the loop, whichever first."""

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
    def __init__(self, executor: Executor, max_wait_s: float, what: str) -> None:
        self._executor, self.max_wait_s, self.what = executor, max_wait_s, what
        self.in_flight = 0
        """Events taken and not answered yet (their step runs or waits)."""
        self.step_s = 0.0
        self._shed_since_log = 0
        self._logged_at = float("-inf")

    async def step(self, step: Callable[[], T]) -> T | Shed:
        """Run `step` on the ingest thread and return what it returned, or Shed when it
        could not begin within `max_wait_s` (0: always wait). Its exceptions propagate."""
        if self.max_wait_s > 0 and self.in_flight * self.step_s > self.max_wait_s:
            return self.refused("on arrival")
        ticket = _Ticket(step)
        future = asyncio.get_running_loop().run_in_executor(self._executor, ticket.run)
        self.in_flight += 1
        try:
            if self.max_wait_s > 0:
                done, _ = await asyncio.wait({future}, timeout=self.max_wait_s)
                if not done and ticket.shed():
                    future.add_done_callback(_retrieve)
                    return self.refused("after waiting")
            result = await future
        finally:
            self.in_flight -= 1
        self.step_s += STEP_WEIGHT * (ticket.took_s - self.step_s)
        return result

    def refused(self, when: str) -> Shed:
        """Count (and now and then log) one event refused `when`; its Shed."""
        metrics.shed()
        self._shed_since_log += 1
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            logger.warning("%s: %d event(s) refused (%s, the latest) so they are answered "
                           "within FEISHU_INGEST_WAIT_MAX_MS=%.0f: %d wait for the Redis "
                           "step; Feishu delivers them again", self.what,
                           self._shed_since_log, when, self.max_wait_s * 1000, self.in_flight)
            self._shed_since_log, self._logged_at = 0, now
        return Shed(when)


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


ItemT = TypeVar("ItemT")


class BatchGate(Generic[ItemT, T]):
    """The gate of one ingest thread that takes events in groups (group commit): the events
    that arrive while a step runs go together in the next one (up to `max_batch`, in
    arrival order); `run(items)` answers each with its result or its exception, and each
    event is answered as soon as its group's step is done. The wait bound is as the
    Gate's: an event not taken into a step within `max_wait_s` is refused, at once when
    the waiting ones would take longer (their count times the recent time per event)."""

    def __init__(self, executor: Executor, run: Callable[[list[ItemT]], Sequence[T | Exception]],
                 max_wait_s: float, what: str, *, max_batch: int = 64) -> None:
        self._executor, self._run, self.max_batch = executor, run, max_batch
        self._gate = Gate(executor, max_wait_s, what)  # (its counts and its refusals)
        self._waiting: list[tuple[ItemT, asyncio.Future[T]]] = []
        self._running = False
        self.last_step_s = 0.0

    @property
    def in_flight(self) -> int:
        return self._gate.in_flight

    async def step(self, item: ItemT) -> T | Shed:
        gate = self._gate
        if gate.max_wait_s > 0 and len(self._waiting) * gate.step_s > gate.max_wait_s:
            return gate.refused("on arrival")
        answer: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        entry = (item, answer)
        self._waiting.append(entry)
        gate.in_flight += 1
        try:
            self._next()
            if gate.max_wait_s > 0:
                done, _ = await asyncio.wait({answer}, timeout=gate.max_wait_s)
                if not done and entry in self._waiting:  # not taken into a step yet
                    self._waiting.remove(entry)
                    return gate.refused("after waiting")
            return await answer
        except asyncio.CancelledError:  # (its connection closed): never run it
            if entry in self._waiting:
                self._waiting.remove(entry)
            raise
        finally:
            gate.in_flight -= 1

    def _next(self) -> None:
        """Start a step with the waiting events, unless one runs (on the loop). Every event
        taken is answered, whatever happens to the step."""
        if self._running or not self._waiting:
            return
        batch = self._waiting[:self.max_batch]
        started = time.monotonic()
        try:
            future = asyncio.get_running_loop().run_in_executor(
                self._executor, self._run, [item for item, _ in batch])
        except RuntimeError as error:  # the executor was shut down (a stop): none is taken
            del self._waiting[:len(batch)]
            self._settle(batch, [error for _ in batch])
            return
        del self._waiting[:len(batch)]
        self._running = True
        future.add_done_callback(lambda done: self._answer(batch, done, started))

    def _answer(self, batch: list[tuple[ItemT, asyncio.Future[T]]],
                done: asyncio.Future[Sequence[T | Exception]], started: float) -> None:
        self._running = False
        try:
            self.last_step_s = took_s = time.monotonic() - started
            self._gate.step_s += STEP_WEIGHT * (took_s / len(batch) - self._gate.step_s)
            results: Sequence[T | Exception]
            if done.cancelled():
                results = [RuntimeError("ingest stopped") for _ in batch]
            elif (error := done.exception()) is not None:
                results = [error if isinstance(error, Exception) else RuntimeError(str(error))
                           for _ in batch]
            else:
                results = done.result()
            if len(results) != len(batch):
                results = [RuntimeError(f"{len(results)} answers to {len(batch)} events")
                           for _ in batch]
            self._settle(batch, results)
        finally:
            self._next()

    @staticmethod
    def _settle(batch: list[tuple[ItemT, asyncio.Future[T]]],
                results: Sequence[T | Exception]) -> None:
        for (_, answer), result in zip(batch, results, strict=True):
            if answer.done():  # (its waiter was cancelled)
                continue
            if isinstance(result, Exception):
                answer.set_exception(result)
            else:
                answer.set_result(result)
