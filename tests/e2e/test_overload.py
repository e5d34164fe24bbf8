"""A listener that cannot keep up never ACKs late: while its Redis step is held up, each
event is answered within FEISHU_INGEST_WAIT_MAX_MS (plus one step), those that could not be
taken with a failure, and Feishu's redelivery brings them back: every message answered
once."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gateway.ops.processes import wait_until
from tests.support.replies import replies_to
from tests.support.rig import Rig, rig_up

PAUSE_MS = 2500
WAIT_MAX_MS = 400
REDIS_TIMEOUT_S = 0.5


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    with rig_up(tmp_path_factory, FEISHU_INGEST_WAIT_MAX_MS=str(WAIT_MAX_MS),
                GATEWAY_REDIS_TIMEOUT_S=str(REDIS_TIMEOUT_S)) as rig:
        yield rig


def answered(rig: Rig, chat: str, ids: list[str]) -> bool:
    return all(m in replies_to(rig.sim, chat) for m in ids)


def test_while_redis_is_held_up_every_ack_is_prompt_and_every_message_answered_once(
        rig: Rig) -> None:
    sim = rig.sim
    chats = [f"oc_overload_{n}" for n in range(4)]
    warm = sim.send_text(chats[0], "warm up")
    wait_until(lambda: warm in replies_to(sim, chats[0]), 30, "the first answer")
    before = len(sim.acks)
    rig.client().client_pause(PAUSE_MS, all=False)  # writes (and scripts) wait
    sent = {chat: [sim.send_text(chat, f"m{n}") for n in range(6)] for chat in chats}
    wait_until(lambda: all(answered(rig, chat, ids) for chat, ids in sent.items()), 60,
               "every message answered")
    for chat, ids in sent.items():
        answers = replies_to(sim, chat)
        assert [len(answers[m]) for m in ids] == [1] * len(ids), "each answered once"
    acks = sim.acks[before:]
    assert any(ack.code != 200 for ack in acks), "some could not be taken in time"
    slowest_ms = max(ack.latency_ms for ack in acks)
    assert slowest_ms <= 1500, f"an ACK took {slowest_ms:.0f} ms"
    assert "so they are answered within FEISHU_INGEST_WAIT_MAX_MS" in rig.fleet.logs("listener")
