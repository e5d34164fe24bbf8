"""The long connection's gate: its events taken in groups (group commit), each beginning its
Redis step within FEISHU_INGEST_WAIT_MAX_MS or refused and taken later in its turn (the
bound, the estimate and what a refusal means: gate.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Generic, TypeVar

from gateway.feishu.gate import ARRIVAL_MARGIN, LATER_RETRY_S, Recent, Refusals, Shed

T = TypeVar("T")
ItemT = TypeVar("ItemT")


def _nothing() -> None:
    return None


def _none() -> int:
    return 0


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
        self.group_s = Recent()
        """The recent time of a step (a group)."""
        self.last_step_s = 0.0
        self.in_flight = 0
        """Events taken and not answered yet."""

    @property
    def refused(self) -> int:
        """Refused events in the line, to be taken in their turn."""
        return self._refused

    def take_refused(self) -> list[ItemT]:
        """The refused events still in the line, in order, taken out (at a stop, once the
        loop is done: the events waiting for an answer are left, unacknowledged)."""
        refused = [item for item, answer in self._line if answer.done()]
        self._line.clear()
        self._refused = 0
        return refused

    def wait_s(self) -> float:
        """How long an event arriving now would wait for its step: what is left of the step
        running, then a group's time for each full group ahead of it."""
        ahead = self._kept() + len(self._line)
        group_s = self.group_s.value
        wait = (ahead // self.max_batch) * group_s
        if self._running:
            wait += max(group_s - (time.monotonic() - self._step_began), 0.0)
        return wait

    async def step(self, item: ItemT) -> T | Shed:
        answer: asyncio.Future[T | Shed] = asyncio.get_running_loop().create_future()
        if self.max_wait_s > 0 and self.wait_s() > self.max_wait_s * ARRIVAL_MARGIN:
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
            self.group_s.add(took_s)
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
