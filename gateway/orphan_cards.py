"""Closing the card of a turn whose worker is gone.

A running turn closes its own streaming card when it is stopped (gateway/worker/sending.py).
When its worker is dead (SIGKILLed, its machine gone) the stop fences the turn off after the
cancel timeout, and nobody would close the card: it would stream forever with a Stop button
that no longer stops anything. So the canceller, once it fenced a turn off, closes the card
the turn recorded as live (gateway/chats/streams.py) with the text it last showed and the
stop's mark, as the turn would have. A card of a chat the bot left is not touched.

Its sequence number is above any the turn used: a worker that was only slow, and closes the
card itself later, is refused by Feishu and the card keeps the canceller's close.
"""

from __future__ import annotations

import logging

import redis

from gateway.chats.model import TurnRef
from gateway.chats.store import ChatStore
from gateway.chats.streams import StreamCards
from gateway.core.errors import GatewayError
from gateway.feishu.outbound.delivery import Replies, derived_uuid, reply_uuid
from gateway.feishu.outbound.stream_card import (
    ANSWER_ELEMENT_ID,
    INTERRUPTED_MARK,
    answer_of,
    closed_card,
    stopped_mark,
)

logger = logging.getLogger(__name__)

SEQUENCE_GAP = 100
"""The close's sequence is this far above the last one the turn recorded (it records each
call after making it: a call or two may not be recorded)."""
CLOSE_BUDGET_S = 10.0
LEFT_CHAT = "removed"
"""The outcome of a turn whose chat the bot left: its card is left alone."""


class OrphanCards:
    def __init__(self, store: ChatStore, cards: StreamCards, replies: Replies) -> None:
        self._store, self._cards, self._replies = store, cards, replies

    def close(self, turn: TurnRef, outcome: str) -> bool:
        """Close the card the fenced-off `turn` left streaming; whether one was closed.
        Best effort: a failure is one log line, never the stop's."""
        try:
            live = self._cards.live(turn)
            if live is None:
                return False
            self._cards.closed(turn)
            if outcome == LEFT_CHAT:
                return False
            mark = INTERRUPTED_MARK if self._store.interrupted(turn) else \
                stopped_mark(self._store.stopped_by(turn.chat_id, turn.fence))
            card = closed_card(answer_of(live.text) or "…", element_id=ANSWER_ELEMENT_ID,
                               footer=mark)
            sequence = live.sequence + SEQUENCE_GAP
            uuid = derived_uuid(reply_uuid(live.answers), f"orphan-close-{turn.fence}")
            self._replies.call("streaming card close", lambda api: api.replace_card(
                live.card_id, card, sequence=sequence, uuid=uuid), app_id=live.app_id,
                chat_id=live.chat_id, budget_s=CLOSE_BUDGET_S)
        except (GatewayError, redis.RedisError) as error:
            logger.warning("the card of the fenced-off turn (fence %d) of chat %s was not "
                           "closed: %s", turn.fence, turn.chat_id, error)
            return False
        logger.info("closed the card of the fenced-off turn (fence %d) of chat %s: its "
                    "worker was gone", turn.fence, turn.chat_id)
        return True
