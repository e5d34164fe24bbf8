"""A turn asks for approval: a card in reply to its message, then a durable wait.

The request lives in Redis, so the click may reach any listener; the turn polls its state
while its heartbeat keeps the lease, and gives up at the timeout (the card then says
"expired") or when the turn is stopped (it says "stopped", and the answer is "deny").

May import: gateway.approvals, gateway.errors, gateway.feishu.delivery, gateway.types.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable

from gateway.approvals.book import ApprovalBook
from gateway.approvals.card import pending_card, resolved_card
from gateway.approvals.policy import DECISIONS, Outcome
from gateway.errors import GatewayError
from gateway.feishu.delivery import Replies, reply_uuid
from gateway.types import Message

logger = logging.getLogger(__name__)

POLL_S = 0.25


class Asker:
    def __init__(self, book: ApprovalBook, replies: Replies, *, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.book, self.replies = book, replies
        self.poll_s = poll_s
        self._clock = clock

    def ask(self, message: Message, prompt: str, timeout_s: float, key: str | None,
            cancelled: Callable[[], bool]) -> Outcome:
        """Ask the chat; the decision, "expired" at the timeout, "deny" when stopped."""
        remember = key or hashlib.sha256(prompt.encode()).hexdigest()[:24]
        request_id = uuid.uuid4().hex[:20]
        kind, value = self.book.open(message, request_id, remember, prompt,
                                     max(int(timeout_s * 1000), 1))
        if kind == "remembered":
            logger.info("approval in chat %s: %s allowed earlier (%s)", message.chat_id,
                        remember, value)
            return "always" if value == "always" else "session"
        try:
            card_id = self.replies.send(
                message.message_id, "interactive",
                pending_card(request_id, prompt, message.chat_id),
                uuid=reply_uuid(message.message_id, f"ask-{request_id}"),
                in_thread=bool(message.thread_id), app_id=message.app_id)
        except GatewayError as error:
            logger.error("approval card for %s not sent (%s): denied", message.message_id,
                         error)
            self.book.settle(message.chat_id, request_id, "expired")
            return "deny"
        self.book.set_card(message.chat_id, request_id, card_id)
        logger.info("approval %s asked in chat %s (turn %s, %.0fs)", request_id,
                    message.chat_id, message.message_id, timeout_s)
        state, by, via = self._wait(message.chat_id, request_id, timeout_s, cancelled)
        if via != "card" and card_id:  # a click's answer already updated the card
            try:
                self.replies.update_card(card_id, resolved_card(prompt, state, by),
                                         app_id=message.app_id)
            except GatewayError as error:
                logger.warning("approval card %s not updated: %s", card_id, error)
        logger.info("approval %s in chat %s: %s%s", request_id, message.chat_id, state,
                    f" by {by}" if by else "")
        if state in DECISIONS:
            return state
        return "deny" if state == "stopped" else "expired"

    def _wait(self, chat_id: str, request_id: str, timeout_s: float,
              cancelled: Callable[[], bool]) -> tuple[str, str, str]:
        deadline = self._clock() + timeout_s
        pause = threading.Event()
        while True:
            state = self.book.state(chat_id, request_id)
            if state != "pending":
                request = self.book.get(chat_id, request_id)
                if request is not None:
                    return request.state, request.by, request.via
                return state or "expired", "", ""
            if cancelled():
                return self.book.settle(chat_id, request_id, "stopped")
            if self._clock() >= deadline:
                return self.book.settle(chat_id, request_id, "expired")
            pause.wait(self.poll_s)
