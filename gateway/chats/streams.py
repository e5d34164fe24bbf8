"""Which card entity streams the answer to a message, so that a re-run of the turn (after
a crash mid-stream) streams into the same card instead of sending a second one."""

from __future__ import annotations

import redis

from gateway.chats.keys import Keyspace
from gateway.core.model import Message

TTL_S = 86_400


class StreamCards:
    def __init__(self, client: redis.Redis, keyspace: Keyspace | None = None) -> None:
        self._redis = client
        self._keyspace = keyspace or Keyspace()

    def chat_of(self, message: Message) -> str:
        """The state id (gateway/chats/scope.py) the cards of `message`'s answers are kept
        under: each bot answering it streams its own card. The others take it as
        `chat_id`."""
        return self._keyspace.scope.of_message(message)

    def _key(self, chat_id: str, message_id: str) -> str:
        return self._keyspace.chat(chat_id).stream(message_id)

    def card_of(self, chat_id: str, message_id: str) -> str | None:
        value = self._redis.get(self._key(chat_id, message_id))
        return value.decode() if isinstance(value, bytes) else value

    def keep(self, chat_id: str, message_id: str, card_id: str) -> str:
        """Record `card_id` unless another run recorded one first; the one to use."""
        key = self._key(chat_id, message_id)
        if self._redis.set(key, card_id, nx=True, ex=TTL_S):
            return card_id
        return self.card_of(chat_id, message_id) or card_id
