"""Every long-lived thread survives any exception with one log line."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
import redis

from gateway.chats.store import ChatStore
from gateway.chats.store_types import StoreConfig, TurnRef
from gateway.chats.sweeper import Sweeper
from gateway.core.loops import Periodic
from gateway.core.model import Message
from gateway.ops.processes import wait_until
from tests.support.rig import start_redis, stop_redis


def test_a_thread_goes_on_after_any_exception(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []

    def step() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise TypeError("an entry with one more field")

    with caplog.at_level(logging.ERROR):
        loop = Periodic("test-loop", step, 0.01).start()
        try:
            wait_until(lambda: len(calls) >= 3, 5, "rounds after the failure")
            assert loop.alive
        finally:
            loop.stop()
    [record] = [r for r in caplog.records if "round failed" in r.getMessage()]
    assert "TypeError: an entry with one more field (test_loops.py:" in record.getMessage()
    assert record.exc_info is None, "one line, no traceback"


def test_the_sweeper_survives_a_failing_publish(chat_id: str) -> None:
    server = start_redis()  # of its own: no other sweeper may take the chat
    client = redis.Redis.from_url(server.url)
    store = ChatStore(client, StoreConfig(claim_ttl_ms=50, running_ttl_ms=50))
    store.inbox.ingest(Message("om_1", chat_id, "p2p", "ou", "text", "hi"))  # claimed, never sent
    published: list[TurnRef] = []

    def publish(turn: TurnRef) -> bool:
        published.append(turn)
        if len(published) == 1:
            raise RuntimeError("a bug in publish")
        return True

    class Publisher:
        def publish_many(self, turns: Sequence[TurnRef]) -> int:
            return sum(publish(turn) for turn in turns)

        def backlog(self) -> int:
            return 0

    sweeper = Sweeper(store, Publisher(), 0.05).start()
    try:
        wait_until(lambda: len(published) >= 2, 5, "a publish after the failure")
        assert sweeper.alive
    finally:
        sweeper.stop()
        client.close()
        stop_redis(server)
