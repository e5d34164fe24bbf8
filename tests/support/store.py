"""A chat store on a test Redis, and the messages and turns the store's suites feed it."""

from __future__ import annotations

from typing import Any

import redis

from gateway.chats.store import ChatStore
from gateway.chats.store_types import MergeWait, Started, StoreConfig, TurnRef
from gateway.core.model import Message
from gateway.ops.processes import wait_until


def store_for(client: redis.Redis, **overrides: Any) -> ChatStore:
    options: dict[str, Any] = {"claim_ttl_ms": 5000, "queued_ttl_ms": 60_000,
                               "running_ttl_ms": 5000, "inbox_cap": 3, **overrides}
    return ChatStore(client, StoreConfig(**options))


def msg(chat_id: str, n: int, create_ms: int = 0, text: str = "") -> Message:
    return Message(f"om_{n}", chat_id, "p2p", "ou_u", "text", text or f"text {n}",
                   create_time_ms=create_ms)


def pending_ids(store: ChatStore, chat_id: str) -> list[str]:
    return [message_id for message_id, _ in store.pending(chat_id)]


def lease_gone(store: ChatStore, chat_id: str) -> None:
    wait_until(lambda: not store.lease(chat_id), 5, "the lease to expire")


def first_turn(store: ChatStore, chat_id: str, messages: int = 1) -> TurnRef:
    """Admit messages om_1..om_<messages> to an idle chat: the turn of om_1."""
    turn = store.inbox.ingest(msg(chat_id, 1)).claimed
    for n in range(2, messages + 1):
        store.inbox.ingest(msg(chat_id, n))
    assert turn is not None
    return turn


def started(store: ChatStore, turn: TurnRef) -> Started:
    """Start the turn once its merge window passed (polled: Redis says how long to wait)."""
    out: list[Started | MergeWait | None] = []

    def go() -> bool:
        out.append(store.turns.start_or_wait(turn, "task", "w"))
        return not isinstance(out[-1], MergeWait)

    wait_until(go, 10, "the merge window to pass", interval_s=0.02)
    assert isinstance(out[-1], Started)
    return out[-1]
