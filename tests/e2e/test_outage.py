"""A Redis outage loses nothing: an event that could not be admitted is not ACKed with
200, so Feishu delivers it again, and it is answered once Redis is back. An unreachable
Redis (no answer at all) is noticed within the listener's short timeout, not after 20 s."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from gateway.ops.processes import wait_until
from gateway.simulator.records import Ack
from tests.support.replies import agent_events, replies_to
from tests.support.rig import Rig, rig_up


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A gateway of its own, on a Redis that keeps its data across a crash."""
    with rig_up(tmp_path_factory, supervise=False, persistent=True) as rig:
        yield rig


def first_ack(rig: Rig, message_id: str) -> Ack | None:
    return next((a for a in rig.sim.acks if a.message_id == message_id), None)


def test_an_event_during_a_redis_outage_is_refused_then_answered_once(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    before = sim.send_text(chat_id, "before the outage")
    wait_until(lambda: before in replies_to(sim, chat_id), 20, "the first reply")
    rig.redis.crash()
    during = sim.send_text(chat_id, "during the outage")
    ack = wait_until(lambda: first_ack(rig, during), 20, "the ACK of the event sent during "
                     "the outage")
    assert getattr(ack, "code", None) == 500, "admission failed, so it must not be ACKed 200"
    rig.redis.start()
    sim.redeliver(during)  # what Feishu does with an event it got no 200 for
    wait_until(lambda: during in replies_to(sim, chat_id), 60, "the reply after the outage")
    assert replies_to(sim, chat_id)[during] == ["echo: during the outage"]
    assert replies_to(sim, chat_id)[before] == ["echo: before the outage"]
    assert ": reconnecting" not in rig.fleet.logs("listener"), "Redis down is not a dead socket"


def test_an_unreachable_redis_is_answered_500_at_once(rig: Rig, chat_id: str) -> None:
    """With Redis not answering at all (a dead network, here SIGSTOP), the SDK
    loop must not block for socket timeouts times retries: ACK 500 within about a second
    (GATEWAY_REDIS_TIMEOUT_S), and the event is answered once Redis answers again."""
    sim = rig.sim
    warm = sim.send_text(chat_id, "warm up")
    wait_until(lambda: warm in replies_to(sim, chat_id), 20, "the first reply")
    rig.redis.pause()
    try:
        during = sim.send_text(chat_id, "while redis is silent")
        ack = wait_until(lambda: first_ack(rig, during), 10, "the ACK")
        assert isinstance(ack, Ack) and ack.code == 500
        assert ack.latency_ms < 2500, f"the SDK loop was blocked {ack.latency_ms:.0f} ms"
    finally:
        rig.redis.resume()
    sim.redeliver(during)
    wait_until(lambda: during in replies_to(sim, chat_id), 60, "the reply after the silence")
    assert replies_to(sim, chat_id)[during] == ["echo: while redis is silent"]


def test_a_worker_survives_redis_restarts_under_a_running_turn(
        rig: Rig, chat_id: str) -> None:
    """Kombu 5.7.0 + celery 5.7.0 could kill a worker for good when Redis died with
    a turn running (AttributeError in kombu's `_connparams`); it must survive any number of
    restarts and resume by itself."""
    sim, client = rig.sim, rig.client()
    for cycle in range(8):
        running = sim.send_text(chat_id, f"hang 1.5 cycle {cycle}")

        def begun(m: str = running) -> bool:
            return any(e["message_id"] == m for e in agent_events(client, chat_id))

        def answered(m: str = running) -> bool:
            return m in replies_to(sim, chat_id)

        wait_until(begun, 20, f"the turn of cycle {cycle} to start")
        rig.redis.crash()
        time.sleep(0.3 * (cycle % 3))  # outages of different lengths, not synchronisation
        rig.redis.start()
        wait_until(answered, 60, f"the reply of cycle {cycle} after the restart")
    log = rig.fleet.logs("worker")
    assert "Unrecoverable error" not in log, log[-3000:]
    assert all(p.alive for p in rig.fleet.started), "every process survived"
