"""Which card entity streams the answer to a message, so that a re-run of the turn (after
a crash mid-stream) streams into the same card instead of sending a second one; and the
card a turn is streaming now (its live card), so that when a stop has to fence the turn
off because its worker is gone, the canceller can still close the card with the text it
showed and the stop's mark."""

from __future__ import annotations

from dataclasses import dataclass

import redis

from gateway.chats.keys import Keyspace
from gateway.chats.store_types import TurnRef, text_of
from gateway.core.model import Message

TTL_S = 86_400


@dataclass(frozen=True, slots=True)
class LiveCard:
    """A turn's card while it streams: where it is and the last text it showed."""

    card_id: str
    app_id: str
    chat_id: str
    """The Feishu chat it was sent to."""
    answers: str
    """The message it answers (its reply key)."""
    text: str
    sequence: int
    """The last sequence number used on the card (each call takes a higher one)."""


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

    def _live_key(self, turn: TurnRef) -> str:
        return self._keyspace.chat(turn.chat_id).live_card(turn.fence)

    def streaming(self, turn: TurnRef, card: LiveCard, *, opened: bool = False) -> None:
        """The turn's card as it shows now (one round trip, written after each update).
        `opened`: the turn just took the card up, so an earlier run of the same answer
        (gone: the chat runs one turn at a time) no longer holds it."""
        key, index = self._live_key(turn), self._keyspace.chat(turn.chat_id).live_cards
        if opened:
            for raw in self._redis.smembers(index):
                earlier = TurnRef(turn.chat_id, "", int(text_of(raw)))
                if earlier.fence != turn.fence and text_of(self._redis.hget(
                        self._live_key(earlier), "card_id") or "") == card.card_id:
                    self.closed(earlier)
        pipe = self._redis.pipeline(transaction=True)  # (never a record without its TTL)
        pipe.hset(key, mapping={"card_id": card.card_id, "app_id": card.app_id,
                                "chat_id": card.chat_id, "answers": card.answers,
                                "text": card.text, "sequence": card.sequence})
        pipe.expire(key, TTL_S)
        pipe.sadd(index, turn.fence)
        pipe.expire(index, TTL_S)
        pipe.execute()

    def closed(self, turn: TurnRef) -> None:
        """The turn's card no longer streams: it closed it (or is about to)."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(self._live_key(turn))
        pipe.srem(self._keyspace.chat(turn.chat_id).live_cards, turn.fence)
        pipe.execute()

    def claim_left(self, chat_id: str, running: int | None) -> list[tuple[TurnRef, LiveCard]]:
        """The live cards of the chat's turns other than the one running now (fence
        `running`), taken out of the record: whoever gets one closes it."""
        keys = self._keyspace.chat(chat_id)
        left = []
        for raw in self._redis.smembers(keys.live_cards):
            fence = int(text_of(raw))
            if fence == running:
                continue
            turn = TurnRef(chat_id, "", fence)
            pipe = self._redis.pipeline(transaction=True)
            pipe.hgetall(self._live_key(turn))
            pipe.delete(self._live_key(turn))
            pipe.srem(keys.live_cards, fence)
            got, _, _ = pipe.execute()
            card = _card_of(got)
            if card is not None:
                left.append((turn, card))
        return left


def _card_of(raw: dict[bytes | str, bytes | str]) -> LiveCard | None:
    got = {text_of(k): text_of(v) for k, v in raw.items()}
    try:
        return LiveCard(got["card_id"], got["app_id"], got["chat_id"], got["answers"],
                        got["text"], int(got["sequence"]))
    except (KeyError, ValueError):
        return None
