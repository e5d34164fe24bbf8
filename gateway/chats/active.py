"""The chats active lately, for catch-up: which chats to read back after an outage.

`lua/ingest.lua` marks each admitted message's chat in its shard's index of its app
(`keys.active_key`: `<app_id>|<chat_type>|<chat_id>` → the server time of its last message),
in the step that admits it, and keeps the newest FEISHU_CATCHUP_MAX_CHATS per shard and
app (the app's newest N overall are among them). This module reads them back, newest
first, and forgets the ones older than the catch-up window.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.chats.keys import Keyspace
from gateway.chats.routing import route
from gateway.chats.store_types import text_of


@dataclass(frozen=True, slots=True)
class ActiveChat:
    chat_id: str
    chat_type: str
    """`p2p` or `group` (the list API does not say: admission needs it)."""
    app_id: str
    """The app its last message came to."""
    at_ms: int
    """When (Redis's clock) its last message was admitted."""


def parse_member(member: str, score: float) -> ActiveChat | None:
    """An index member `<app_id>|<chat_type>|<chat_id>` (pure); None when it is not one."""
    parts = member.rsplit("|", 2)
    if len(parts) != 3 or not parts[2] or parts[1] not in ("p2p", "group"):
        return None
    app_id, chat_type, chat_id = parts
    return ActiveChat(chat_id, chat_type, app_id, int(score))


def newest_for_app(found: list[ActiveChat], app_id: str, limit: int) -> list[ActiveChat]:
    """The `limit` chats of `app_id` active most recently, newest first, one entry per chat
    (pure)."""
    seen: set[str] = set()
    out: list[ActiveChat] = []
    for chat in sorted(found, key=lambda c: c.at_ms, reverse=True):
        if chat.app_id == app_id and chat.chat_id not in seen:
            seen.add(chat.chat_id)
            out.append(chat)
    return out[:limit]


class ActiveChats:
    def __init__(self, client: Any, keyspace: Keyspace | None = None) -> None:
        self.redis = client
        self.keyspace = keyspace or Keyspace()

    def recent(self, app_id: str, since_ms: int, limit: int) -> list[ActiveChat]:
        """The chats of `app_id` with a message admitted since `since_ms` (Redis's clock),
        newest first, at most `limit`; entries older than `since_ms` are forgotten on the
        way (one round trip per master)."""
        with self.redis.pipeline(transaction=False) as pipe:
            for key in self.keyspace.actives(app_id):
                pipe.execute_command("ZREMRANGEBYSCORE", key, "-inf", f"({since_ms}",
                                     **route(self.redis, key))
                pipe.execute_command("ZREVRANGEBYSCORE", key, "+inf", since_ms, "WITHSCORES",
                                     withscores=True, **route(self.redis, key))
            replies = pipe.execute()
        found = [chat for members in replies[1::2] for member, score in members
                 if (chat := parse_member(text_of(member), float(score))) is not None]
        return newest_for_app(found, app_id, limit)
