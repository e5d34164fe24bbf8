"""Host clocks that are off, on real processes: a listener whose host clock runs 45 minutes
ahead (or a minute behind) of Redis's. Lateness and presence are judged on Redis's clock, so
such a listener delays nothing and hides nothing. (Redis's own clock stepping:
feishu/outbound/test_quota.py, e2e/test_redis_clock.py and the chaos suite.)"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.core.presence import read_connections, redis_time_s
from gateway.ops.processes import wait_until
from tests.support.clocks import SteppedClock
from tests.support.replies import replies_to
from tests.support.rig import Rig, rig_up

AHEAD_S = 45 * 60


@pytest.fixture(scope="module")
def skewed() -> Iterator[SteppedClock]:
    clock = SteppedClock(AHEAD_S)
    yield clock
    clock.close()


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory, skewed: SteppedClock) -> Iterator[Rig]:
    """A listener on a host whose clock runs ahead; late is anything over 60 s old."""
    with rig_up(tmp_path_factory, listener_env=skewed.env({}), FEISHU_LATE_AFTER_S="60") as rig:
        yield rig


def test_a_listener_whose_clock_runs_ahead_runs_fresh_messages(rig: Rig,
                                                                chat_id: str) -> None:
    first = rig.sim.send_text(chat_id, "fresh")
    second = rig.sim.send_text(chat_id, "also fresh")
    wait_until(lambda: second in replies_to(rig.sim, chat_id), 30, "the second reply")
    assert replies_to(rig.sim, chat_id) == {first: ["echo: fresh"],
                                            second: ["echo: also fresh"]}


def test_a_listener_whose_clock_is_behind_is_shown_as_connected(
        rig: Rig, skewed: SteppedClock) -> None:
    client = rig.client()
    skewed.set(-60)
    written_after = redis_time_s(client) + 2.0  # (the step reaches the listener within 1 s)

    def reported() -> dict[str, Any] | None:
        """A report written after the step (its `at` moved onto this host's clock)."""
        offset_s = redis_time_s(client) - time.time()
        return next((c for c in read_connections(client).values()
                     if float(c["at"]) + offset_s > written_after), None)

    record = wait_until(reported, 20, "a report written after the step")
    assert isinstance(record, dict) and record["state"] == "connected"
    connected_for_s = time.time() - float(record["since"])
    assert 0 <= connected_for_s < 300, f"aged on the listener's clock: {connected_for_s:.0f}s"
    skewed.set(AHEAD_S)
    client.close()
