"""A streamed answer shown as it grows: one CardKit card per answered message, its text set
at most once per FEISHU_STREAM_INTERVAL_MS while the agent writes, then replaced by the
final text (or the text so far with a "stopped" or "failed" mark).

The card entity's id is kept in Redis (gateway/state/streams.py) and the card is sent
under one stable uuid, so a re-run of the turn after a crash streams into the same card.
Each attempt numbers its card updates above the previous attempt's (Feishu orders them
by `sequence`). Updates while streaming draw from the quota at the low priority and a
failed one is skipped (the next carries the whole text); when no card can be made at all,
the answer goes out as ordinary replies once it is complete.

May import: gateway.errors, gateway.feishu, gateway.state.streams, gateway.types.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gateway.errors import GatewayError
from gateway.feishu.delivery import Replies, derived_uuid, reply_uuid
from gateway.feishu.render import card_json
from gateway.state.streams import StreamCards
from gateway.types import Message

logger = logging.getLogger(__name__)

ELEMENT_ID = "answer"
STOPPED_MARK = "⏹ Stopped."
FAILED_MARK = "⚠ The answer broke off here."
SEQUENCE_SPAN = 1_000_000
"""Each attempt's update numbers start this far above the previous attempt's."""
UPDATE_BUDGET_S = 2.0
CLOSE_BUDGET_S = 10.0


@dataclass
class Throttle:
    """At most one update per `interval_s` (the first is due at once). Pure."""

    interval_s: float
    _last: float = field(default=float("-inf"))

    def due(self, now: float) -> bool:
        if now - self._last < self.interval_s:
            return False
        self._last = now
        return True


class Stream:
    """One turn's streaming card. Not thread-safe: the turn's thread only."""

    def __init__(self, replies: Replies, cards: StreamCards, message: Message, *,
                 attempt: int, interval_s: float, limit_chars: int,
                 may_send: Callable[[], bool], stopped: threading.Event,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._replies, self._cards, self._message = replies, cards, message
        self._may_send, self._stopped, self._clock = may_send, stopped, clock
        self._throttle = Throttle(interval_s)
        self._limit = limit_chars
        self._sequence = attempt * SEQUENCE_SPAN
        self.card_id = ""
        self.broken = False
        """No card could be made: the answer goes out as ordinary replies."""
        self.text = ""
        self.updates = 0

    @property
    def live(self) -> bool:
        """A card shows (part of) the answer."""
        return bool(self.card_id) and not self.broken

    def consume(self, pieces: Iterable[str]) -> str:
        """Join the agent's pieces, showing the text as it grows; stops early when the
        turn is stopped. Returns the text (so far)."""
        for piece in pieces:
            self.text += str(piece)
            if self._stopped.is_set():
                break
            if not self.broken and self.text.strip() and self._throttle.due(self._clock()):
                self._show(self.text)
        return self.text

    def _visible(self, text: str) -> str:
        return text if len(text) <= self._limit else text[:self._limit].rstrip() + " …"

    def _next(self) -> tuple[int, str]:
        self._sequence += 1
        tag = f"stream-{self._sequence}"
        return self._sequence, derived_uuid(reply_uuid(self._message.message_id), tag)

    def _open(self, text: str) -> bool:
        m = self._message
        try:
            card_id = self._cards.card_of(m.chat_id, m.message_id)
            fresh = card_id is None
            if card_id is None:
                card = card_json(self._visible(text), element_id=ELEMENT_ID, streaming=True)
                made = self._replies.call("streaming card", lambda api: api.create_card(card),
                                          app_id=m.app_id, chat_id=m.chat_id,
                                          may_send=self._may_send, stopped=self._stopped)
                card_id = self._cards.keep(m.chat_id, m.message_id, made)
                fresh = card_id == made
            self._replies.send(m.message_id, "interactive",
                               {"type": "card", "data": {"card_id": card_id}},
                               uuid=reply_uuid(m.message_id, "stream"),
                               in_thread=bool(m.thread_id), app_id=m.app_id,
                               chat_id=m.chat_id, may_send=self._may_send,
                               stopped=self._stopped)
        except GatewayError as error:
            logger.warning("no streaming card for %s in chat %s (%s); the answer is sent "
                           "when it is complete", m.message_id, m.chat_id, error)
            self.broken = True
            return False
        self.card_id = card_id
        return fresh

    def _show(self, text: str) -> None:
        if not self.card_id and self._open(text):
            return  # the new card was made with this text
        if self.broken:
            return
        sequence, uuid = self._next()
        m, card_id, shown = self._message, self.card_id, self._visible(text)
        try:
            self._replies.call("streaming card text", lambda api: api.set_card_text(
                card_id, ELEMENT_ID, shown, sequence=sequence, uuid=uuid), app_id=m.app_id,
                chat_id=m.chat_id, low=True, budget_s=UPDATE_BUDGET_S,
                may_send=self._may_send, stopped=self._stopped)
            self.updates += 1
        except GatewayError as error:
            logger.info("streaming update of %s skipped: %s", m.message_id, error)

    def close(self, text: str, mark: str = "") -> bool:
        """Show `text` as the card's final content (with `mark` under it), streaming off.
        True when the card shows it; False when there is no card (then the caller sends
        the text as ordinary replies)."""
        if not self.card_id and not self.broken:
            self._open(text)
        if self.broken:
            return False
        sequence, uuid = self._next()
        m, card_id = self._message, self.card_id
        card = card_json(self._visible(text) or "…", element_id=ELEMENT_ID, footer=mark)
        try:
            self._replies.call("streaming card close", lambda api: api.replace_card(
                card_id, card, sequence=sequence, uuid=uuid), app_id=m.app_id,
                chat_id=m.chat_id, budget_s=CLOSE_BUDGET_S)
        except GatewayError as error:
            logger.warning("streaming card of %s not closed: %s", m.message_id, error)
            return False
        return True
