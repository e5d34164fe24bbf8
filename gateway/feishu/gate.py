"""The ingest gate: an event's Redis step begins within FEISHU_INGEST_WAIT_MAX_MS, or the event
is refused at once and taken later.

Feishu sends an event again when its ACK (or the push's answer) has not come within 3 s, and
a duplicate doubles the load exactly when the listener is already behind. So an event never
waits for its step longer than `max_wait_s`:

- on arrival, when the steps ahead of it would take longer than that, it is refused at once.
  The estimate follows how events are really taken: the long connection's groups (the
  groups ahead of it, each taking the recent time of a group, after what is left of the
  one running), webhook mode's threads (the events ahead of it spread over the threads,
  each taking the recent time of a step);
- while it waits, when that time passes before its step began, it is refused then.

A refused event is answered with a failure (ACK 500, HTTP 503), so nothing is ACKed that was
not taken, and handed to `keep`: the listener takes it later, first in its next step, ahead
of what arrived after it (gateway/listener/refused.py). An event whose step began is always
waited for (its step is bounded by the Redis timeout).

One gate per ingest thread (a connection's) or pool (a webhook lane); its counts are touched
on the event loop only, the ticket between the loop and the thread under a lock.
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
from gateway.core.logs import Tally

logger = logging.getLogger(__name__)

T = TypeVar("T")
ItemT = TypeVar("ItemT")
STEP_WEIGHT = 0.2
"""How much the latest step counts in the recent step time (an exponential average)."""
LATER_RETRY_S = (0.2, 5.0)
"""With nothing else to do, events kept to take later are tried again after the first of
these, doubling while none could be taken, up to the second."""


def _nothing() -> None:
    return None


def _none() -> int:
    return 0


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
        self.step_s = 0.0

    def refused(self, when: str) -> Shed:
        """Count (and now and then log) an event refused before it reached the gate."""
        return self._refusals.refused(when, self.in_flight)

    def wait_s(self) -> float:
        """How long an event arriving now would wait for a thread: the events not begun
        ahead of it, spread over the threads, each a recent step's time."""
        waiting = self.in_flight - self.threads
        return 0.0 if waiting < 0 else (waiting // self.threads + 1) * self.step_s

    async def step(self, step: Callable[[], T], *, wait_s: float | None = None) -> T | Shed:
        """Run `step` on the pool and return what it returned, or Shed when it could not
        begin within `wait_s` (default `max_wait_s`; with `max_wait_s` 0, always wait). Its
        exceptions propagate."""
        budget = self.max_wait_s if wait_s is None else min(wait_s, self.max_wait_s)
        if self.max_wait_s > 0 and (budget <= 0 or self.wait_s() > budget):
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
        self.step_s += STEP_WEIGHT * (ticket.took_s - self.step_s)
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


Run = Callable[[list[ItemT]], Sequence[T | Exception]]
"""The events of one step → each one's answer, or the error that answers it 500 (the
listener takes the events it kept before its own, ahead of them)."""


class BatchGate(Generic[ItemT, T]):
    """The gate of one ingest thread that takes events in groups (group commit): the events
    that arrive while a step runs go together in the next one (up to `max_batch`, in
    arrival order); `run` answers each with its result or its exception, and each event is
    answered as soon as its group's step is done.

    An event that cannot begin within `max_wait_s` is answered Shed, and keeps its place in
    the line: refused on arrival, it is the last; refused while it waited, it stays where it
    was; a step takes it in its turn, in arrival order with the others (its answer is not
    waited for). At most `refused_cap` refused events are kept in the line (past it, one
    refused on arrival is left to Feishu's delivery again: `dropped()`). `kept()` says how
    many events the listener kept besides (its steps' own refusals, taken before the line):
    they count in the wait, and an empty step takes them when nothing else comes."""

    def __init__(self, executor: Executor, run: Run[ItemT, T], max_wait_s: float, what: str,
                 *, max_batch: int = 64, refused_cap: int = 0,
                 kept: Callable[[], int] = _none,
                 dropped: Callable[[], object] = _nothing) -> None:
        self._executor, self._run, self.max_batch = executor, run, max_batch
        self.max_wait_s, self.refused_cap = max_wait_s, refused_cap
        self._refusals = Refusals(what, max_wait_s)
        self._kept, self._dropped = kept, dropped
        self._line: list[tuple[ItemT, asyncio.Future[T | Shed]]] = []
        """Every event not taken into a step yet, in arrival order (a refused one's answer
        is done: Shed)."""
        self._refused = 0
        """Refused events in the line."""
        self._running = False
        self._step_began = 0.0
        self._retry: asyncio.TimerHandle | None = None
        self._retry_s = LATER_RETRY_S[0]
        self.group_s = 0.0
        """The recent time of a step (a group), an exponential average."""
        self.last_step_s = 0.0
        self.in_flight = 0
        """Events taken and not answered yet."""

    @property
    def refused(self) -> int:
        """Refused events in the line, to be taken in their turn."""
        return self._refused

    def wait_s(self) -> float:
        """How long an event arriving now would wait for its step: what is left of the step
        running, then a group's time for each full group ahead of it."""
        ahead = self._kept() + len(self._line)
        wait = (ahead // self.max_batch) * self.group_s
        if self._running:
            wait += max(self.group_s - (time.monotonic() - self._step_began), 0.0)
        return wait

    async def step(self, item: ItemT) -> T | Shed:
        answer: asyncio.Future[T | Shed] = asyncio.get_running_loop().create_future()
        if self.max_wait_s > 0 and self.wait_s() > self.max_wait_s:
            shed = self._refusals.refused("on arrival", len(self._line))
            if self._refused < self.refused_cap:
                answer.set_result(shed)
                self._line.append((item, answer))
                self._refused += 1
                self._next()
            else:
                self._dropped()
            return shed
        entry = (item, answer)
        self._line.append(entry)
        self.in_flight += 1
        try:
            self._next()
            if self.max_wait_s > 0:
                done, _ = await asyncio.wait({answer}, timeout=self.max_wait_s)
                if not done and entry in self._line:  # not taken into a step yet: it keeps
                    shed = self._refusals.refused("after waiting", len(self._line))
                    answer.set_result(shed)  # its place (a step takes it in its turn)
                    self._refused += 1
                    return shed
            return await answer
        except asyncio.CancelledError:  # (its connection closed): never run it
            if entry in self._line and not answer.done():
                self._line.remove(entry)
            raise
        finally:
            self.in_flight -= 1

    def _next(self, *, empty: bool = False) -> None:
        """Start a step with the events of the line (`empty`: with none, for the kept
        ones), unless one runs (on the loop). Every event taken is answered, whatever
        happens."""
        if self._running or not (self._line or empty):
            return
        batch = self._line[:self.max_batch]
        kept, started = self._kept(), time.monotonic()
        try:
            future = asyncio.get_running_loop().run_in_executor(
                self._executor, self._run, [item for item, _ in batch])
        except RuntimeError as error:  # the executor was shut down (a stop): none is taken
            self._take(batch)
            self._settle(batch, [error for _ in batch])
            return
        self._take(batch)
        self._running, self._step_began = True, started
        future.add_done_callback(lambda done: self._answer(batch, done, started, kept))

    def _take(self, batch: list[tuple[ItemT, asyncio.Future[T | Shed]]]) -> None:
        del self._line[:len(batch)]
        self._refused -= sum(1 for _, answer in batch if answer.done())

    def _answer(self, batch: list[tuple[ItemT, asyncio.Future[T | Shed]]],
                done: asyncio.Future[Sequence[T | Exception]], started: float,
                kept: int) -> None:
        self._running = False
        took_kept = False
        try:
            self.last_step_s = took_s = time.monotonic() - started
            self.group_s += STEP_WEIGHT * (took_s - self.group_s)
            self._settle(batch, _results(done, len(batch)))
            took_kept = self._kept() < kept
            self._retry_s = LATER_RETRY_S[0] if took_kept or not kept else \
                min(self._retry_s * 2, LATER_RETRY_S[1])
        finally:
            self._next(empty=took_kept)  # (kept events being taken: on with them at once)
            self._schedule_retry()

    def _schedule_retry(self) -> None:
        """With events kept and no step to take them, an empty step after a while."""
        if self._retry is None and not self._running and self._kept():
            self._retry = asyncio.get_running_loop().call_later(self._retry_s, self._retried)

    def _retried(self) -> None:
        self._retry = None
        self._next(empty=True)
        self._schedule_retry()

    @staticmethod
    def _settle(batch: list[tuple[ItemT, asyncio.Future[T | Shed]]],
                results: Sequence[T | Exception]) -> None:
        for (_, answer), result in zip(batch, results, strict=True):
            if answer.done():  # (refused: answered already; or its waiter was cancelled)
                continue
            if isinstance(result, Exception):
                answer.set_exception(result)
            else:
                answer.set_result(result)


def _results(done: asyncio.Future[Sequence[T | Exception]], count: int) -> list[T | Exception]:
    """A step's answers, one per event, whatever happened to it."""
    if done.cancelled():
        return [RuntimeError("ingest stopped") for _ in range(count)]
    error = done.exception()
    if error is not None:
        return [error if isinstance(error, Exception) else RuntimeError(str(error))
                for _ in range(count)]
    results = list(done.result())
    if len(results) != count:
        return [RuntimeError(f"{len(results)} answers to {count} events") for _ in range(count)]
    return results
