"""The ingest gate: events that arrive while a long connection's step runs are taken together
in the next step (group commit), in arrival order, each answered with its own result or
error; one that cannot be taken within the wait bound is refused, and taken later, first in
a later step. The wait is estimated as events are really taken (groups; webhook mode's
threads), so nothing is refused that could have been taken in time."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from gateway.core.settings import load_settings
from gateway.feishu.batch_gate import BatchGate
from gateway.feishu.gate import Gate, Shed
from gateway.feishu.ws.connections import options_for


def six_events(max_batch: int) -> tuple[list[list[int]], list[int | Shed | BaseException]]:
    """Event 0's step runs while events 1 to 5 come: the steps taken (each event's items)
    and every answer (n * 10; event 3 answers an error)."""
    release, begun = threading.Event(), threading.Event()
    batches: list[list[int]] = []

    def run(items: list[int]) -> list[int | Exception]:
        batches.append(items)
        if len(batches) == 1:
            begun.set()
            assert release.wait(10)
        return [ValueError(f"bad {n}") if n == 3 else n * 10 for n in items]

    async def main() -> list[int | Shed | BaseException]:
        with ThreadPoolExecutor(1) as executor:
            gate: BatchGate[int, int] = BatchGate(executor, run, 0.0, "test",
                                                  max_batch=max_batch)
            first = asyncio.ensure_future(gate.step(0))
            await asyncio.get_running_loop().run_in_executor(None, begun.wait, 10)
            rest = [asyncio.ensure_future(gate.step(n)) for n in range(1, 6)]
            await asyncio.sleep(0)  # (each is waiting now)
            release.set()
            return await asyncio.gather(first, *rest, return_exceptions=True)

    return batches, asyncio.run(main())


def test_events_arriving_during_a_step_go_together_in_the_next_one_in_order() -> None:
    batches, answers = six_events(64)
    assert batches == [[0], [1, 2, 3, 4, 5]], "one step for all that came meanwhile"
    assert answers[:3] == [0, 10, 20] and answers[4:] == [40, 50]
    assert isinstance(answers[3], ValueError), "an event's error is its own"


def test_an_event_not_taken_within_the_bound_is_refused_and_taken_later_in_its_turn() -> None:
    release = threading.Event()
    ran: list[int] = []

    def run(items: list[int]) -> list[int | Exception]:
        ran.extend(items)
        if items == [0]:
            assert release.wait(10)
        return list(items)

    async def main() -> tuple[int | Shed, int | Shed, int | Shed]:
        with ThreadPoolExecutor(1) as executor:
            gate: BatchGate[int, int] = BatchGate(executor, run, 0.2, "test", refused_cap=10)
            first = asyncio.ensure_future(gate.step(0))
            await asyncio.sleep(0)  # (its step begins)
            late = await gate.step(1)  # waits behind the first step past the bound
            assert gate.refused == 1, "it keeps its place in the line"
            release.set()
            after = await gate.step(2)
            return await first, late, after

    first, late, after = asyncio.run(main())
    assert first == 0 and after == 2
    assert isinstance(late, Shed) and late.why == "after waiting"
    assert ran == [0, 1, 2], "the refused one taken once, in its turn, before the next"


def test_events_refused_on_arrival_keep_their_place_after_those_already_waiting() -> None:
    """Steps have been taking three seconds, the bound is 1.5 s: with a step running, the
    first two arrivals may yet fit it (the next step, of two: an estimate under three times
    the bound waits), the next two would wait two steps and are refused at once; the steps
    then take all four in the order they came."""
    release = threading.Event()
    steps: list[list[int]] = []

    def run(items: list[int]) -> list[int | Exception]:
        steps.append(items)
        if items == [0]:
            assert release.wait(10)
        return list(items)

    async def main() -> list[int | Shed]:
        with ThreadPoolExecutor(1) as executor:
            gate: BatchGate[int, int] = BatchGate(executor, run, 1.5, "test", max_batch=2,
                                                  refused_cap=10)
            for _ in range(9):  # (as if the steps before had each taken three seconds)
                gate.group_s.add(3.0)
            first = asyncio.ensure_future(gate.step(0))
            await asyncio.sleep(0)  # (its step begins)
            rest = [asyncio.ensure_future(gate.step(n)) for n in range(1, 5)]
            await asyncio.sleep(0)
            release.set()
            return list(await asyncio.gather(first, *rest))

    answers = asyncio.run(main())
    assert answers[:3] == [0, 1, 2]
    assert all(isinstance(a, Shed) and a.why == "on arrival" for a in answers[3:]), answers
    assert steps == [[0], [1, 2], [3, 4]], "in arrival order, the refused ones in their turn"


def test_with_events_kept_and_nothing_coming_an_empty_step_takes_them() -> None:
    """The listener's step takes the kept events itself: with none arriving, the gate runs
    an empty step now and then, until none is kept."""
    kept = [1, 2]
    steps: list[list[int]] = []

    def run(items: list[int]) -> list[int | Exception]:
        steps.append(items)
        if len(steps) >= 3:  # (the first empty steps cannot take them: Redis is down)
            kept.clear()
        return list(items)

    async def main() -> None:
        with ThreadPoolExecutor(1) as executor:
            gate: BatchGate[int, int] = BatchGate(executor, run, 1.0, "test",
                                                  kept=kept.__len__)
            assert await gate.step(0) == 0
            for _ in range(100):
                if not kept:
                    break
                await asyncio.sleep(0.05)

    asyncio.run(main())
    assert not kept and steps[0] == [0] and steps[1:3] == [[], []], steps
    assert all(step == [] for step in steps[1:]), steps


def test_a_burst_into_an_idle_gate_waits_by_groups_and_none_is_refused() -> None:
    """Each step takes 30 ms whatever its size (a pipelined Redis round trip): 600 events at
    once wait ten groups (0.3 s), far inside the 2 s bound (a host busy with other jobs may
    stall the gate a while and still none is refused), so none may be refused (an estimate
    of waiting events times a step's time, 18 s, refused most of them)."""
    steps: list[int] = []

    def run(items: list[int]) -> list[int | Exception]:
        steps.append(len(items))
        threading.Event().wait(0.03)  # (the step's work: a 30 ms round trip)
        return list(items)

    async def main() -> list[int | Shed]:
        with ThreadPoolExecutor(1) as executor:
            gate: BatchGate[int, int] = BatchGate(executor, run, 2.0, "test")
            assert await gate.step(-1) == -1  # (the gate has seen one step of one event)
            return await asyncio.gather(*(gate.step(n) for n in range(600)))

    answers = asyncio.run(main())
    assert answers == list(range(600)), "every one taken, none refused"
    assert max(steps) == 64 and len(steps) <= 12


def test_webhook_pushes_wait_only_when_every_thread_is_busy() -> None:
    """Eight threads, a 0.2 s step: eight pushes at a time never wait for a thread, so none
    is refused (counting the steps running as waiting refused half of them); a ninth waits
    for one."""
    async def main() -> list[object]:
        with ThreadPoolExecutor(8) as executor:
            gate = Gate(executor, 0.5, "test", threads=8)
            answers: list[object] = []
            for _ in range(3):
                answers += await asyncio.gather(*(gate.step(lambda: threading.Event().wait(
                    0.2) or "taken") for _ in range(8)))
            assert gate.wait_s() == 0.0
            return answers

    assert asyncio.run(main()) == ["taken"] * 24


def test_every_event_is_answered_when_its_step_breaks_or_the_executor_is_gone() -> None:
    calls: list[list[int]] = []

    def run(items: list[int]) -> list[int | Exception]:
        calls.append(items)
        return [] if items == [0] else list(items)  # a step that answers nothing, once

    async def main() -> tuple[object, object, object]:
        executor = ThreadPoolExecutor(1)
        gate: BatchGate[int, int] = BatchGate(executor, run, 0.0, "test")
        broken = await asyncio.gather(gate.step(0), return_exceptions=True)
        after = await gate.step(1)  # the gate goes on
        executor.shutdown()
        gone = await asyncio.wait_for(asyncio.gather(gate.step(2), return_exceptions=True), 5)
        return broken[0], after, gone[0]

    broken, after, gone = asyncio.run(main())
    assert isinstance(broken, RuntimeError) and "0 answers to 1 events" in str(broken)
    assert after == 1
    assert isinstance(gone, RuntimeError), "answered at once, never left waiting"


def test_a_step_takes_at_most_the_group_max_and_the_setting_reaches_the_connection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FEISHU_INGEST_GROUP_MAX", "2")
    assert options_for(load_settings()).max_batch == 2
    batches, answers = six_events(2)
    assert batches == [[0], [1, 2], [3, 4], [5]]
    assert answers[:3] == [0, 10, 20] and answers[4:] == [40, 50]


def test_at_a_stop_the_refused_events_still_in_line_are_handed_over_in_order() -> None:
    release = threading.Event()

    def run(items: list[int]) -> list[int | Exception]:
        assert release.wait(10)
        return list(items)

    async def main() -> list[int]:
        with ThreadPoolExecutor(1) as executor:
            gate: BatchGate[int, int] = BatchGate(executor, run, 1.0, "test", max_batch=1,
                                                  refused_cap=10)
            gate.group_s.add(9.0)  # (each step takes long: arrivals are refused at once)
            first = asyncio.ensure_future(gate.step(0))
            await asyncio.sleep(0)
            refused = await asyncio.gather(*(gate.step(n) for n in (1, 2, 3)))
            assert all(isinstance(r, Shed) for r in refused)
            left = gate.take_refused()  # (the connection's last step takes these)
            release.set()
            assert await first == 0
            return left

    assert asyncio.run(main()) == [1, 2, 3]


def test_one_slow_step_does_not_make_the_gate_refuse_what_it_can_take() -> None:
    """The recent time of a group is the median of the latest steps: one that took 3 s (the
    process paused, a GC) leaves the estimate at what the steps take."""
    gate: BatchGate[int, int] = BatchGate(ThreadPoolExecutor(1), lambda items: list(items),
                                          1.8, "test", kept=lambda: 640)
    for took_s in (0.01,) * 4 + (3.0,) + (0.01,) * 4:
        gate.group_s.add(took_s)
    assert gate.wait_s() == pytest.approx(0.1), "ten groups ahead, 10 ms each"
