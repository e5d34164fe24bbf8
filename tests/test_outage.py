"""A Redis outage loses nothing: an event that could not be admitted is not ACKed with
200, so Feishu delivers it again, and it is answered once Redis is back."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from gateway.embedded_redis import EmbeddedRedis
from gateway.processes import wait_until
from gateway.simulator import Simulator
from tests.conftest import Fleet, env_for
from tests.test_pipeline import replies_to


@dataclass
class Rig:
    redis: EmbeddedRedis
    sim: Simulator
    fleet: Fleet


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    """A gateway of its own, on a Redis that keeps its data across a crash."""
    server = EmbeddedRedis(persistent=True).start()
    sim = Simulator().start()
    fleet = Fleet(env_for(server.url, sim), tmp_path_factory)
    try:
        fleet("worker")
        fleet("listener")
        sim.wait_connected(1, timeout_s=30)
        yield Rig(server, sim, fleet)
    finally:
        fleet.stop_all()
        sim.stop()
        server.stop()


def test_an_event_during_a_redis_outage_is_refused_then_answered_once(
        rig: Rig, chat_id: str) -> None:
    sim = rig.sim
    before = sim.send_text(chat_id, "before the outage")
    wait_until(lambda: before in replies_to(sim, chat_id), 20, "the first reply")
    rig.redis.crash()
    during = sim.send_text(chat_id, "during the outage")
    ack = wait_until(lambda: next((a for a in sim.acks if a.message_id == during), None), 20,
                     "the ACK of the event sent during the outage")
    assert getattr(ack, "code", None) == 500, "admission failed, so it must not be ACKed 200"
    rig.redis.start()
    sim.redeliver(during)  # what Feishu does with an event it got no 200 for
    wait_until(lambda: during in replies_to(sim, chat_id), 60, "the reply after the outage")
    assert replies_to(sim, chat_id)[during] == ["echo: during the outage"]
    assert replies_to(sim, chat_id)[before] == ["echo: before the outage"]
    assert "the client is deaf" not in rig.fleet.logs("listener")
