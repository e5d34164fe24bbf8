"""Closing the cards of turns whose worker is gone.

A running turn closes its own streaming card when it is stopped (gateway/worker/sending.py).
When its worker is dead (SIGKILLed, its machine gone) nobody would: the card would stream
forever with a Stop button that no longer stops anything. So once a stop ended a chat's
turn (it ended by itself, was fenced off after the cancel timeout, ran out its lease, or a
re-run of it was dropped before it started), the canceller closes every card of the chat
that a turn other than the one running now left live (each records its card and the text it
last showed: gateway/chats/streams.py), with that text and the stop's mark, as the turn
would have. Taking a record is one Redis step, so a card is closed by one side only. A card
of a chat the bot left is not touched.

Its sequence number is above any the turn used: a worker that was only slow, and closes the
card itself later, is refused by Feishu and the card keeps this close. In the listener the
close runs on a thread of its own, after the stop's reply, never holding up the desk.
"""

from __future__ import annotations

import logging
from concurrent.futures import Executor

from gateway.chats.store import ChatStore
from gateway.chats.store_types import TurnRef
from gateway.chats.streams import LiveCard, StreamCards
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
CLOSE_BUDGET_S = 5.0
LEFT_CHAT = "removed"
"""The outcome of a turn whose chat the bot left: its card is left alone."""


class OrphanCards:
    def __init__(self, store: ChatStore, cards: StreamCards, replies: Replies, *,
                 executor: Executor | None = None) -> None:
        self._store, self._cards, self._replies = store, cards, replies
        self._executor = executor

    def settle(self, chat_id: str, outcome: str, fence: int) -> None:
        """After a stop ended the turn of `fence` in chat `chat_id` (state id): close the
        cards its gone turns left live (on the executor, when there is one). Never
        raises."""
        if self._executor is None:
            self.close_left(chat_id, outcome, fence)
            return
        try:
            self._executor.submit(self.close_left, chat_id, outcome, fence)
        except RuntimeError:  # shutting down: the next stop in the chat closes them
            logger.info("cards left live in chat %s not closed: shutting down", chat_id)

    def close_left(self, chat_id: str, outcome: str, stopped: int) -> int:
        """Close the cards of the chat's turns other than the one running now, marked as
        the stop of the turn of fence `stopped` ended it (that turn, or a run again of the
        same answer); how many were closed. Its boundary: a failure is one log line."""
        try:
            held = self._store.lease(chat_id).get("fence", "")
            left = self._cards.claim_left(chat_id, int(held) if held.isdigit() else None)
            closed = 0
            for turn, card in left:
                if outcome != LEFT_CHAT and self._close(turn, card, self._mark(turn, stopped)):
                    closed += 1
            return closed
        except Exception:  # the close's boundary: never the stop's failure
            logger.exception("cards left live in chat %s not closed", chat_id)
            return 0

    def _mark(self, turn: TurnRef, stopped: int) -> str:
        """The stop's mark: interrupted, or who stopped the turn (its own stop's, else the
        one that ended `stopped`)."""
        ended = TurnRef(turn.chat_id, "", stopped)
        if self._store.turns.interrupted(turn) or self._store.turns.interrupted(ended):
            return INTERRUPTED_MARK
        return stopped_mark(self._store.clicks.stopped_by(turn.chat_id, turn.fence)
                            or self._store.clicks.stopped_by(turn.chat_id, stopped))

    def _close(self, turn: TurnRef, live: LiveCard, mark: str) -> bool:
        card = closed_card(answer_of(live.text) or "…", element_id=ANSWER_ELEMENT_ID,
                           footer=mark)
        sequence = live.sequence + SEQUENCE_GAP
        uuid = derived_uuid(reply_uuid(live.answers), f"orphan-close-{turn.fence}")
        try:
            self._replies.call("streaming card close", lambda api: api.replace_card(
                live.card_id, card, sequence=sequence, uuid=uuid), app_id=live.app_id,
                chat_id=live.chat_id, budget_s=CLOSE_BUDGET_S)
        except GatewayError as error:  # the card stays as it was
            logger.warning("the card left live by the turn (fence %d) of chat %s was not "
                           "closed: %s", turn.fence, turn.chat_id, error)
            return False
        logger.info("closed the card left live by the turn (fence %d) of chat %s: its "
                    "worker was gone", turn.fence, turn.chat_id)
        return True
