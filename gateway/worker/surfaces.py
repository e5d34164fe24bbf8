"""Where a streamed answer shows while it grows: a CardKit card (FEISHU_REPLY_FORMAT auto or
card), or, where cards are off (text or post), one message of that form edited in place.

A card's entity id is kept in Redis (gateway/chats/streams.py) and the card is sent under one
stable uuid, so a re-run of the turn after a crash streams into the same card; each attempt
numbers its card updates above the previous attempt's (Feishu orders them by `sequence`).
An edited message is sent under one stable uuid too (Feishu answers a repeated uuid with the
message it already sent), and since Feishu edits one message at most 20 times, a first
attempt edits it at most EDITS_WHILE_STREAMING times and every attempt keeps one edit for
the final text.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

import redis

from gateway.chats.store_types import TurnRef
from gateway.chats.streams import LiveCard, StreamCards
from gateway.core.errors import GatewayError, Yielded
from gateway.core.model import Message
from gateway.feishu.outbound.delivery import Replies, derived_uuid, reply_uuid
from gateway.feishu.outbound.render import render
from gateway.feishu.outbound.stream_card import ANSWER_ELEMENT_ID, closed_card, streaming_card
from gateway.worker.progress import Done

logger = logging.getLogger(__name__)

ELEMENT_ID = ANSWER_ELEMENT_ID
SEQUENCE_SPAN = 1_000_000
"""Each attempt's card update numbers start this far above the previous attempt's."""
UPDATE_BUDGET_S = 2.0
CLOSE_BUDGET_S = 10.0
CARD_OP_GAP_S = 0.12
"""Feishu takes at most 10 operations per second on one card: each waits this long after
the previous one on the same card (a margin over 0.1 s: calls reach Feishu with jitter)."""
STREAMING_TIMEOUT = 200850
"""Feishu closed the card's streaming mode by itself (it does some minutes after it was
turned on): turned on again, and the text sent again."""
EDITS_MAX = 20
"""Feishu edits one text or post message at most this often."""
EDITS_WHILE_STREAMING = EDITS_MAX - 4
"""Edits a first attempt makes while the answer grows: the rest are kept for the final
text of this attempt and of re-runs after a crash."""


class Surface(Protocol):
    """One turn's streaming surface. Not thread-safe: the turn's thread only."""

    updates: int

    def open(self, text: str) -> bool:
        """Show `text` on a new surface: True when it was made now, with this text; False
        when an earlier attempt's was found (it shows older text). Raises GatewayError when
        none can be made."""

    def update(self, text: str) -> bool:
        """Show `text` (best effort: a failed update is logged and skipped, and so is one
        that yields to replies waiting for the send quota); whether it was shown."""

    def finish(self, text: str, mark: str, done: Done | None = None) -> bool:
        """Show `text` (with the finished steps `done` and `mark` under it) as the final
        content; False when it could not be shown (the caller then sends the text as
        ordinary replies)."""


class _Sender:
    """What both surfaces share: the message answered and the rules of sending for it."""

    def __init__(self, replies: Replies, message: Message, *, may_send: Callable[[], bool],
                 stopped: threading.Event) -> None:
        self._replies, self._message = replies, message
        self._may_send, self._stopped = may_send, stopped
        self.updates = 0

    def _reply(self, msg_type: str, content: dict[str, object]) -> str:
        m = self._message
        return self._replies.send(m.message_id, msg_type, dict(content),
                                  uuid=reply_uuid(m.reply_key, "stream"),
                                  in_thread=bool(m.thread_id), app_id=m.app_id,
                                  chat_id=m.chat_id, may_send=self._may_send,
                                  stopped=self._stopped)


class CardSurface(_Sender):
    """A CardKit card in streaming mode, its one markdown element set as the text grows,
    with a Stop button (`stop`: its callback value). Its calls are spaced CARD_OP_GAP_S
    apart; a text update Feishu refuses because streaming closed by itself turns streaming
    on again and is sent again, once."""

    def __init__(self, replies: Replies, cards: StreamCards, message: Message, *,
                 attempt: int, may_send: Callable[[], bool], stopped: threading.Event,
                 stop: Mapping[str, str] | None = None, turn: TurnRef | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(replies, message, may_send=may_send, stopped=stopped)
        self._cards, self._turn = cards, turn
        self._sequence = attempt * SEQUENCE_SPAN
        self._stop, self._clock = stop, clock
        self._last_op = float("-inf")
        self.card_id = ""

    def _pace(self) -> None:
        """Wait until CARD_OP_GAP_S passed since this card's previous call."""
        wait_s = self._last_op + CARD_OP_GAP_S - self._clock()
        if wait_s > 0:
            time.sleep(wait_s)  # pacing Feishu's per-card rate, not synchronising
        self._last_op = self._clock()

    def _next(self) -> tuple[int, str]:
        self._sequence += 1
        tag = f"stream-{self._sequence}"
        return self._sequence, derived_uuid(reply_uuid(self._message.reply_key), tag)

    def open(self, text: str) -> bool:
        m = self._message
        chat = self._cards.chat_of(m)  # this bot's state of the chat
        card_id = self._cards.card_of(chat, m.reply_key)
        fresh = card_id is None
        if card_id is None:
            card = streaming_card(text, element_id=ELEMENT_ID, stop=self._stop)
            made = self._replies.call("streaming card", lambda api: api.create_card(card),
                                      app_id=m.app_id, chat_id=m.chat_id,
                                      may_send=self._may_send, stopped=self._stopped)
            card_id = self._cards.keep(chat, m.reply_key, made)
            fresh = card_id == made
            self._last_op = self._clock()
        self._reply("interactive", {"type": "card", "data": {"card_id": card_id}})
        self.card_id = card_id
        self._showing(text, opened=True)
        return fresh

    def _showing(self, text: str, *, opened: bool = False) -> None:
        """Record the card as the turn's live card with `text` (best effort: it serves only
        a stop that finds this worker gone)."""
        if self._turn is None:
            return
        m = self._message
        try:
            self._cards.streaming(self._turn, LiveCard(self.card_id, m.app_id, m.chat_id,
                                                       m.reply_key, text, self._sequence),
                                  opened=opened)
        except redis.RedisError as error:
            logger.info("live card of %s not recorded: %s", m.message_id, error)

    def _closed(self) -> None:
        if self._turn is None:
            return
        try:
            self._cards.closed(self._turn)
        except redis.RedisError as error:
            logger.info("live card of %s not forgotten: %s", self._message.message_id, error)

    def _set_text(self, text: str) -> None:
        self._pace()
        sequence, uuid = self._next()
        m, card_id = self._message, self.card_id
        self._replies.call("streaming card text", lambda api: api.set_card_text(
            card_id, ELEMENT_ID, text, sequence=sequence, uuid=uuid), app_id=m.app_id,
            chat_id=m.chat_id, low=True, budget_s=UPDATE_BUDGET_S,
            may_send=self._may_send, stopped=self._stopped)

    def _streaming_on(self) -> None:
        self._pace()
        sequence, uuid = self._next()
        m, card_id = self._message, self.card_id
        self._replies.call("streaming card settings", lambda api: api.set_card_settings(
            card_id, {"config": {"streaming_mode": True}}, sequence=sequence, uuid=uuid),
            app_id=m.app_id, chat_id=m.chat_id, low=True, budget_s=UPDATE_BUDGET_S,
            may_send=self._may_send, stopped=self._stopped)

    def update(self, text: str) -> bool:
        m = self._message
        try:
            try:
                self._set_text(text)
            except GatewayError as error:
                if getattr(error, "code", None) != STREAMING_TIMEOUT:
                    raise
                logger.info("streaming of the card answering %s closed on Feishu's side; "
                            "turned on again", m.message_id)
                self._streaming_on()
                self._set_text(text)
        except Yielded:
            return False
        except GatewayError as error:
            logger.info("streaming update of %s skipped: %s", m.message_id, error)
            return False
        self.updates += 1
        self._showing(text)
        return True

    def finish(self, text: str, mark: str, done: Done | None = None) -> bool:
        self._pace()
        sequence, uuid = self._next()
        m, card_id = self._message, self.card_id
        card = closed_card(text, element_id=ELEMENT_ID, footer=mark) if done is None else \
            closed_card(text, element_id=ELEMENT_ID, footer=mark,
                        steps=[(step.text, step.took_s) for step in done.steps],
                        dropped=done.dropped, elapsed_s=done.elapsed_s)
        self._closed()  # first: a stop that finds the record closes the card (as it was)
        try:
            self._replies.call("streaming card close", lambda api: api.replace_card(
                card_id, card, sequence=sequence, uuid=uuid), app_id=m.app_id,
                chat_id=m.chat_id, budget_s=CLOSE_BUDGET_S)
        except GatewayError as error:
            logger.warning("streaming card of %s not closed: %s", m.message_id, error)
            return False
        return True


class EditedMessage(_Sender):
    """One text or post message (`form`), edited in place as the text grows."""

    def __init__(self, replies: Replies, message: Message, *, form: str, attempt: int,
                 may_send: Callable[[], bool], stopped: threading.Event) -> None:
        super().__init__(replies, message, may_send=may_send, stopped=stopped)
        self._form = form
        self._edits_left = EDITS_WHILE_STREAMING if attempt <= 1 else 0
        self.sent_id = ""

    def open(self, text: str) -> bool:
        rendered = render(text, self._form)
        self.sent_id = self._reply(rendered.msg_type, rendered.content)
        return True  # a re-run's edits replace whatever an earlier attempt showed

    def _edit(self, text: str, *, low: bool, budget_s: float) -> None:
        m, sent_id, rendered = self._message, self.sent_id, render(text, self._form)
        self._replies.call("streaming message edit", lambda api: api.edit_message(
            sent_id, msg_type=rendered.msg_type, content=rendered.content),
            app_id=m.app_id, chat_id=m.chat_id, low=low, budget_s=budget_s,
            may_send=self._may_send if low else _always, stopped=self._stopped if low
            else None)

    def update(self, text: str) -> bool:
        if self._edits_left <= 0:
            return False
        self._edits_left -= 1  # (a failed attempt may still have edited it)
        try:
            self._edit(text, low=True, budget_s=UPDATE_BUDGET_S)
        except Yielded:
            self._edits_left += 1  # nothing was sent
            return False
        except GatewayError as error:
            logger.info("streaming edit of the answer to %s skipped: %s",
                        self._message.message_id, error)
            return False
        self.updates += 1
        return True

    def finish(self, text: str, mark: str, done: Done | None = None) -> bool:
        try:
            self._edit(f"{text}\n\n{mark}" if mark else text, low=False,
                       budget_s=CLOSE_BUDGET_S)
        except GatewayError as error:
            logger.warning("the streamed answer to %s was not edited to its end: %s",
                           self._message.message_id, error)
            return False
        return True


def _always() -> bool:
    return True
