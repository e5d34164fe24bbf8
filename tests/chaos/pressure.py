"""A burst under pressure (test_chaos.py `test_a_burst_under_pressure_...`): Redis squeezed
from a side connection, the burst, and each chat's start order."""

from __future__ import annotations

import threading
import time

import redis

from tests.support.replies import agent_events
from tests.support.rig import Rig

CHATS = 60
PER_CHAT = 50
FIRST_PAUSE_MS = 1400
"""The first hold, as the burst begins: longer than the listener's Redis timeout (1 s), so
the first steps fail, and long enough that the backlog it leaves cannot all begin within
FEISHU_INGEST_WAIT_MAX_MS (1.5 s): both are refused (without it a fast host may take the
whole burst in time, and refusals would go untested), while every step caught in it is
still answered well within Feishu's 3 s."""
PAUSE_MS = 400
BETWEEN_S = 0.3
SQUEEZE_S = 8.0


class Squeeze:
    """Holds Redis up for FIRST_PAUSE_MS, then PAUSE_MS with BETWEEN_S between, from a
    connection of its own, for SQUEEZE_S (pacing a fault, not synchronising), and at least
    until the burst was sent."""

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
            pause_ms = PAUSE_MS if self.pauses else FIRST_PAUSE_MS
            self._client.client_pause(pause_ms, all=True)
            self.pauses += 1
            time.sleep(pause_ms / 1000 + BETWEEN_S)


def send_burst(rig: Rig, run: str) -> dict[str, list[str]]:
    """Every chat's messages, in the order its user sent them."""
    chats = [f"oc_pressure_{run}_{n:02d}" for n in range(CHATS)]
    return rig.sim.send_burst({chat: [f"hang 0.005 <{chat[-2:]}#{n}>" for n in range(PER_CHAT)]
                               for chat in chats})


def first_starts(client: redis.Redis, chat: str) -> list[str]:
    started: list[str] = []
    for event in agent_events(client, chat):
        if event["event"] == "start":
            for message_id in event.get("message_ids") or [event["message_id"]]:
                if message_id not in started:
                    started.append(message_id)
    return started
