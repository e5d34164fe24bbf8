"""Scenarios more than one suite plays on its own gateway."""

from __future__ import annotations

from collections.abc import Callable

import redis

from gateway.ops.processes import wait_until
from tests.support.replies import reply_of, started
from tests.support.rig import TEST_CANCEL_TIMEOUT_S, Rig


def stop_then_kill_a_worker(rig: Rig, events: redis.Redis, chat: str,
                            while_running: Callable[[str], object] = lambda _: None) -> None:
    """A /stop ends a running turn and the next message is answered; then a worker is
    SIGKILLed mid-turn and the message behind it is answered. `while_running(message_id)`
    runs while the first turn is running."""
    sim = rig.sim
    running = sim.send_text(chat, "sleep 30")
    wait_until(lambda: started(events, chat, running), 20, "the turn to start")
    after = sim.send_text(chat, "after the stop")
    while_running(running)
    stop = sim.send_text(chat, "/stop")
    assert reply_of(sim, chat, stop, TEST_CANCEL_TIMEOUT_S + 10).startswith("Stopped.")
    assert reply_of(sim, chat, after) == "echo: after the stop"
    crashed = sim.send_text(chat, "hang 4")
    wait_until(lambda: started(events, chat, crashed), 20, "the hanging turn to start")
    for worker in rig.fleet.workers():
        worker.kill()  # supervised: started again, as systemd would
    behind = sim.send_text(chat, "behind the crash")
    assert reply_of(sim, chat, behind, 60) == "echo: behind the crash"
