"""`feishu-gateway chat`'s view of a chat under busy mode merge: its mode and the messages its
turn merges (against a real redis-server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from rich.console import Console

from gateway.chats.store_types import MergeWait, Started
from gateway.ops.cli import show
from gateway.ops.cli.views import chat_view
from gateway.ops.embedded_redis import EmbeddedRedis
from gateway.ops.processes import wait_until
from tests.support.rig import client_of
from tests.support.store import msg, store_for


@pytest.fixture
def redis_client(private_redis: EmbeddedRedis) -> Iterator[redis.Redis]:
    yield from client_of(private_redis)


def test_the_chat_view_shows_the_mode_and_the_merged_messages(redis_client: redis.Redis,
                                                              chat_id: str) -> None:
    store = store_for(redis_client, merge_window_ms=100)
    turn = store.inbox.ingest(msg(chat_id, 1), busy="merge").claimed
    store.inbox.ingest(msg(chat_id, 2), busy="merge")
    assert turn is not None
    wait_until(lambda: not isinstance(store.turns.start_or_wait(turn, "t", "w"), MergeWait), 5,
               "the merge window to pass", interval_s=0.02)
    assert not isinstance(store.turns.start_or_wait(turn, "t", "w"), Started), "started once"
    view = chat_view(store, chat_id, busy_here="queue")  # (a shell without the setting)
    assert view["busy"] == "merge", "the mode Redis keeps, not this shell's"
    assert view["turn"]["busy"] == "merge" and view["turn"]["merged"] == ["om_1", "om_2"]
    console = Console(width=200, record=True)
    show.chat(console, view)
    text = console.export_text()
    assert "busy mode: merge" in text and "answers 2 messages together: om_1 om_2" in text


def test_an_idle_chat_keeps_no_mode_and_says_so(redis_client: redis.Redis, chat_id: str) -> None:
    store = store_for(redis_client)
    view = chat_view(store, chat_id, busy_here="interrupt")
    assert view["busy"] is None
    console = Console(width=200, record=True)
    show.chat(console, view)
    text = console.export_text()
    assert "busy mode: none kept (the chat is idle" in text
    assert "this shell's settings say interrupt" in text
