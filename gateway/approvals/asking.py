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
from typing import TypeVar

import redis

from gateway.approvals.book import ApprovalBook
from gateway.approvals.card import pending_card, resolved_card
from gateway.approvals.policy import DECISIONS, Outcome
from gateway.errors import GatewayError
from gateway.feishu.delivery import Replies, reply_uuid
from gateway.types import Message

logger = logging.getLogger(__name__)

POLL_S = 0.25
UPDATE_BUDGET_S = 30.0
T = TypeVar("T")


class Asker:
    def __init__(self, book: ApprovalBook, replies: Replies, *, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.book, self.replies = book, replies
        self.poll_s = poll_s
        self._clock = clock

    def ask(self, message: Message, prompt: str, timeout_s: float, key: str | None,
            stopped: threading.Event) -> Outcome:
        """Ask the chat; the decision, "expired" at the timeout, "deny" when the turn is
        stopped (`stopped` set). Redis failures while waiting are waited out until the
        timeout; one when asking raises (the turn fails, as for any Redis failure)."""
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
                in_thread=bool(message.thread_id), app_id=message.app_id,
                chat_id=message.chat_id, may_send=lambda: not stopped.is_set(), stopped=stopped)
        except GatewayError as error:
            logger.error("approval card for %s not sent (%s): denied", message.message_id,
                         error)
            self._settle(message.chat_id, request_id, "expired")
            return "deny"
        self._try(lambda: self.book.set_card(message.chat_id, request_id, card_id))
        logger.info("approval %s asked in chat %s (turn %s, %.0fs)", request_id,
                    message.chat_id, message.message_id, timeout_s)
        state, by, via = self._wait(message.chat_id, request_id, timeout_s, stopped)
        if via != "card" and card_id:  # a click's answer already updated the card
            try:
                self.replies.update_card(card_id, resolved_card(prompt, state, by),
                                         app_id=message.app_id, budget_s=UPDATE_BUDGET_S)
            except GatewayError as error:
                logger.warning("approval card %s not updated: %s", card_id, error)
        logger.info("approval %s in chat %s: %s%s", request_id, message.chat_id, state,
                    f" by {by}" if by else "")
        if state in DECISIONS:
            return state
        return "deny" if state == "stopped" else "expired"

    def _wait(self, chat_id: str, request_id: str, timeout_s: float,
              stopped: threading.Event) -> tuple[str, str, str]:
        deadline = self._clock() + timeout_s
        while True:
            request = self._try(lambda: self.book.get(chat_id, request_id))
            if request is not None and request.state != "pending":
                return request.state, request.by, request.via
            if stopped.is_set():
                return self._settle(chat_id, request_id, "stopped")
            if self._clock() >= deadline:
                return self._settle(chat_id, request_id, "expired")
            stopped.wait(self.poll_s)

    def _settle(self, chat_id: str, request_id: str, state: str) -> tuple[str, str, str]:
        """The request's end (a decision that came first wins); `state` if Redis cannot
        say (the request then expires with its keys)."""
        settled = self._try(lambda: self.book.settle(chat_id, request_id, state))
        return settled if settled is not None else (state, "", "")

    def _try(self, step: Callable[[], T]) -> T | None:
        """A Redis step of the wait: None (logged) when Redis failed; the wait goes on."""
        try:
            return step()
        except redis.RedisError as error:
            logger.warning("approval wait: Redis unavailable (%s); still waiting", error)
            return None
