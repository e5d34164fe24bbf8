"""The streaming throttle: at most one update per interval, stretched while updates are
skipped (they yield to replies waiting for the send quota) and back once one is shown. Pure."""

from __future__ import annotations

from gateway.worker.streaming import COARSEST, Throttle


def test_one_update_per_interval_the_first_at_once() -> None:
    throttle = Throttle(0.5)
    assert throttle.due(0.0)
    assert not throttle.due(0.4)
    assert throttle.due(0.5)


def test_skipped_updates_stretch_the_interval_up_to_the_coarsest() -> None:
    throttle = Throttle(0.5)
    assert throttle.due(0.0)
    throttle.missed()
    assert not throttle.due(0.9) and throttle.due(1.0), "twice the interval"
    for _ in range(10):
        throttle.missed()
    assert throttle.current_s == 0.5 * COARSEST
    assert not throttle.due(1.0 + 0.5 * COARSEST - 0.1)
    throttle.shown()
    assert throttle.due(1.0 + 0.5 * COARSEST), "one shown: the interval is back"
    assert throttle.current_s == 0.5
