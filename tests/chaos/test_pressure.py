"""A burst under pressure, in both connection modes: 3,000 messages over 60 chats, sent at
once by 60 users (each writing to their chat in order, as fast as the simulator delivers),
while Redis is held up 600 ms in every 900 ms for the first 8 s (CLIENT PAUSE from a side
connection), and the simulator delivers
again what was not ACKed 200, as Feishu does (FEISHU_INGEST_WAIT_MAX_MS at its default).

The listener must refuse what it cannot take in time, and only that: every event is
answered within Feishu's 3 s (an ACK, or the push's HTTP answer: none is missing), some are
refused (the pressure is real), and what was refused keeps its place: every message is
answered exactly once, and each chat's messages start in the order they were sent, with no
exception for a refused one. The figures of each run are printed at the end of the session
(`chaos {...}` lines)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator

import pytest
import redis

from gateway.ops.processes import wait_until
from tests.chaos.monkey import FIGURES
from tests.support.agents import events_key
from tests.support.rig import Mode, Rig, rig_up

CHATS = 60
PER_CHAT = 50
PAUSE_MS = 600
EVERY_S = 0.9
SQUEEZE_S = 8.0
FEISHU_ACK_S = 3.0
QUIESCENCE_DEADLINE_S = 240.0


@pytest.fixture
def rig(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Rig]:
    mode: Mode = request.node.callspec.params["mode"]
    with rig_up(tmp_path_factory, workers=2, concurrency=3, mode=mode, kill=True,
                GATEWAY_INBOX_CAP=str(PER_CHAT * 2)) as rig:
        yield rig


class Squeeze:
    """Holds Redis up for PAUSE_MS in every EVERY_S, from a connection of its own, for
    SQUEEZE_S (pacing a fault, not synchronising), and at least until the burst was sent."""

    def __init__(self, rig: Rig) -> None:
        self._client = rig.client()
        self._stop = threading.Event()
        self.pauses = 0
        self._thread = threading.Thread(target=self._run, name="squeeze", daemon=True)

    def __enter__(self) -> Squeeze:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(SQUEEZE_S + 10)
        self._client.close()

    def _run(self) -> None:
        until = time.monotonic() + SQUEEZE_S
        while not self._stop.is_set() or time.monotonic() < until:
            self._client.client_pause(PAUSE_MS, all=True)
            self.pauses += 1
            time.sleep(EVERY_S)


def send_burst(rig: Rig, run: str) -> dict[str, list[str]]:
    """Every chat's messages, in the order its user sent them."""
    chats = [f"oc_pressure_{run}_{n:02d}" for n in range(CHATS)]
    return rig.sim.send_burst({chat: [f"hang 0.005 <{chat[-2:]}#{n}>" for n in range(PER_CHAT)]
                               for chat in chats})


def first_starts(client: redis.Redis, chat: str) -> list[str]:
    started: list[str] = []
    for raw in client.lrange(events_key(chat), 0, -1):
        event = json.loads(raw)
        if event["event"] == "start":
            for message_id in event.get("message_ids") or [event["message_id"]]:
                if message_id not in started:
                    started.append(message_id)
    return started


@pytest.mark.chaos
@pytest.mark.timeout(420)
@pytest.mark.parametrize("mode", ["ws", "webhook"])
def test_a_burst_under_pressure_is_answered_in_time_once_and_in_order(
        rig: Rig, mode: str, request: pytest.FixtureRequest) -> None:
    sim, client = rig.sim, rig.client()
    run = f"{mode[0]}{int(time.time()) % 100000}"
    began = time.monotonic()
    with Squeeze(rig) as squeeze:
        sent = send_burst(rig, run)
        send_s = time.monotonic() - began
    ids = {m for ids in sent.values() for m in ids}

    def answered() -> set[str]:
        return {m.reply_to for m in sim.sent_messages() if m.reply_to in ids}

    with contextlib.suppress(TimeoutError):  # the figures below say what is missing
        wait_until(lambda: len(answered()) == len(ids) and not any(
            client.zscore("gw:chats", chat) is not None for chat in sent),
            QUIESCENCE_DEADLINE_S, "every message answered, every chat idle", interval_s=0.5)
    acks = [a for a in sim.acks if a.message_id in ids]
    replies: dict[str, int] = {}
    for message in sim.sent_messages():
        if message.reply_to in ids:
            replies[message.reply_to] = replies.get(message.reply_to, 0) + 1
    out_of_order = [chat for chat, order in sent.items() if first_starts(client, chat) != order]
    examples = [f"{chat}: started {[sent[chat].index(m) for m in first_starts(client, chat)]}"
                for chat in out_of_order[:2]]
    figures: dict[str, object] = {
        "faults": f"pressure-{mode}", "sent": len(ids), "send_s": round(send_s, 1),
        "redis_pauses": squeeze.pauses, "refused": sum(a.code != 200 for a in acks),
        "ack_max_ms": round(max(a.latency_ms for a in acks)),
        "unanswered_frames": sum(m in ids for _, m in sim.unacked_frames()),
        "lost": len(ids) - len(replies), "duplicated": sum(n > 1 for n in replies.values()),
        "out_of_order_chats": len(out_of_order), "examples": examples,
        "quiescence_s": round(time.monotonic() - began - send_s, 1)}
    line = "chaos " + json.dumps(figures, sort_keys=True)
    request.node.user_properties.append((FIGURES, line))
    assert len(ids) == CHATS * PER_CHAT
    assert (figures["lost"], figures["duplicated"], figures["out_of_order_chats"]) == \
        (0, 0, 0), line
    assert max(a.latency_ms for a in acks) < FEISHU_ACK_S * 1000, line
    assert figures["unanswered_frames"] == 0, "every event answered (none left to time out)"
    assert any(a.code != 200 for a in acks), f"the pressure made the listener refuse some: {line}"
