"""A turn asks for approval, or asks a form: a card in reply to its message, then a durable
wait.

The request lives in Redis, so the click may reach any listener; the turn polls its state
while its heartbeat keeps the lease, and gives up at the timeout (the card then says
"expired") or when the turn is stopped (it says "stopped", and the answer is "deny").
A request belongs to its turn (the n-th question of the turn's message), not to one run of
it: a turn run again after its worker died waits on the same request and card.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import redis

from gateway.approvals.approval_book import ApprovalBook, Opened
from gateway.approvals.card import pending_card, resolved_card
from gateway.approvals.forms import (
    FORM_KEY,
    form_spec,
    pending_form_card,
    read_spec,
    resolved_form_card,
)
from gateway.approvals.policy import Outcome, parse_decision
from gateway.core.errors import GatewayError
from gateway.core.model import FormAnswer, FormField, FormValue, Message
from gateway.feishu.outbound.delivery import Replies, reply_uuid

logger = logging.getLogger(__name__)

POLL_S = 0.25
UPDATE_BUDGET_S = 30.0
T = TypeVar("T")


def request_id_of(chat_id: str, turn_key: str, index: int, question: str) -> str:
    """The id of a turn's `index`-th approval request: the same on every run of the turn
    (`turn_key`: its message's reply key, so a retry by the operator asks anew) that asks
    the same `question`. A run that asks another question there opens a request (and a
    card) of its own: a click on a card can only ever decide the question it shows."""
    return hashlib.sha256(f"{chat_id}\n{turn_key}\n{index}\n{question}".encode()
                          ).hexdigest()[:20]


UNSENT = "unsent"
"""How `_request` says its card could not be sent (the request was settled expired)."""
CardOf = Callable[[], dict[str, Any]]
"""The pending request's card."""
EndCard = Callable[[str, str], dict[str, Any]]
"""(state, by) → the card once the request ended."""


class Asker:
    def __init__(self, book: ApprovalBook, replies: Replies, *, poll_s: float = POLL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.book, self.replies = book, replies
        self.poll_s = poll_s
        self._clock = clock

    def ask(self, message: Message, prompt: str, timeout_s: float, key: str | None,
            stopped: threading.Event, index: int = 0, *,
            handed_back: Callable[[], bool] = lambda: False) -> Outcome:
        """Ask the chat the turn's `index`-th question; the decision, "expired" at the
        timeout, "deny" when the turn is stopped (`stopped` set; the request stays pending
        when `handed_back()`: its worker is leaving and its re-run asks again). A turn run
        again asks the same request: it waits on the same card, for what is left of the
        timeout, and a decision made meanwhile answers at once. Redis failures while
        waiting are waited out until the timeout; one when asking raises (the turn fails,
        as for any Redis failure)."""
        remember = key or hashlib.sha256(prompt.encode()).hexdigest()[:24]
        if remember == FORM_KEY:  # (a form's key: never a remembered approval's)
            remember = f"approval:{FORM_KEY}"
        request_id = request_id_of(message.chat_id, message.reply_key, index,
                                   f"{remember}\n{prompt}")
        ended = self._request(
            message, request_id, remember, prompt, timeout_s, stopped, handed_back,
            lambda: pending_card(request_id, prompt, message.chat_id, message.thread_id),
            lambda state, by: resolved_card(prompt, state, by))
        if ended is None or ended[0] == UNSENT:
            return "deny"
        if ended[0] in ("always", "session") and ended[2] == "remembered":
            return "always" if ended[0] == "always" else "session"
        decision = parse_decision(ended[0])
        if decision is not None:
            return decision
        return "deny" if ended[0] == "stopped" else "expired"

    def ask_form(self, message: Message, title: str, fields: Sequence[FormField],
                 timeout_s: float, stopped: threading.Event, index: int = 0, *,
                 handed_back: Callable[[], bool] = lambda: False) -> FormAnswer:
        """Ask the chat the turn's `index`-th form (`Turn.ask`), as `ask` asks a question:
        its values once submitted, or how it ended (expired, stopped)."""
        spec_json = form_spec(title, fields)  # (ValueError: the agent's fields make no form)
        spec = read_spec(spec_json)
        request_id = request_id_of(message.chat_id, message.reply_key, index,
                                   f"{FORM_KEY}\n{spec_json}")
        state = self.book.chat_of(message)
        submitted: dict[str, FormValue] = {}

        def values() -> dict[str, FormValue]:
            """The submitted values (read once; a Redis failure raises: the turn fails and
            its run again finds them, never a submitted form without its values)."""
            if not submitted:
                request = self.book.get(state, request_id)
                submitted.update(request.form_values() if request is not None else {})
            return submitted

        ended = self._request(
            message, request_id, FORM_KEY, spec_json, timeout_s, stopped, handed_back,
            lambda: pending_form_card(request_id, spec, message.chat_id, message.thread_id),
            lambda state, by: resolved_form_card(spec, state, by, values()))
        if ended is None:
            return FormAnswer("stopped")
        if ended[0] == UNSENT:
            return FormAnswer("stopped" if stopped.is_set() else "expired")
        if ended[0] == "submitted":
            return FormAnswer("submitted", values(), ended[1])
        return FormAnswer("stopped" if ended[0] == "stopped" else "expired", by=ended[1])

    def _request(self, message: Message, request_id: str, key: str, prompt: str,
                 timeout_s: float, stopped: threading.Event, handed_back: Callable[[], bool],
                 card: CardOf, end_card: EndCard) -> tuple[str, str, str] | None:
        """Open or find the request and wait for its end: (state, by, via); ('always' or
        'session', '', 'remembered') when an earlier decision answers it; None when the
        turn was stopped because its worker is leaving (nothing settled: the re-run asks
        again)."""
        state = self.book.chat_of(message)  # this bot's state of the chat
        opened = self.book.open(message, request_id, key, prompt,
                                max(int(timeout_s * 1000), 1))
        if opened.kind == "remembered":
            logger.info("approval in chat %s: %s allowed earlier (%s)", message.chat_id,
                        key, opened.state)
            return opened.state, "", "remembered"
        meanwhile = self._meanwhile(state, request_id, opened)
        if meanwhile is not None:
            return self._end(message, request_id, opened.card, meanwhile, end_card)
        if stopped.is_set() and handed_back():
            return None  # (nothing shown nor settled: the re-run asks)
        card_id = self._show(message, request_id, card, opened, stopped)
        if card_id is None:
            return UNSENT, "", ""
        left_s = opened.left_ms / 1000
        logger.info("%s %s asked in chat %s (turn %s, %.0fs left%s)",
                    "form" if key == FORM_KEY else "approval", request_id, message.chat_id,
                    message.message_id, left_s, ", again" if opened.kind == "again" else "")
        ended = self._wait(state, request_id, left_s, stopped, handed_back)
        if ended is None:  # the worker is leaving: the request waits on for the re-run
            return None
        return self._end(message, request_id, card_id, ended, end_card)

    def _meanwhile(self, chat_id: str, request_id: str,
                   opened: Opened) -> tuple[str, str, str] | None:
        """How a request asked before ended while no worker waited on it: decided, ended,
        or its time ran out (None: it still waits)."""
        if opened.state != "pending":
            return opened.state, opened.by, opened.via
        if opened.left_ms <= 0:
            return self._settle(chat_id, request_id, "expired")
        return None

    def _show(self, message: Message, request_id: str, card_of: CardOf, opened: Opened,
              stopped: threading.Event) -> str | None:
        """The pending request's card: the one it has, else sent (Feishu sends one card per
        uuid, so a resend after a crash between sending and recording finds the first);
        rewritten when the request asks another question now. None (the request expired)
        when it cannot be sent."""
        card = card_of()
        card_id = opened.card
        try:
            if not card_id:
                card_id = self.replies.send(
                    message.message_id, "interactive", card,
                    uuid=reply_uuid(message.reply_key, f"ask-{request_id}"),
                    in_thread=bool(message.thread_id), app_id=message.app_id,
                    chat_id=message.chat_id, may_send=lambda: not stopped.is_set(),
                    stopped=stopped)
            if opened.kind == "reopened":
                self.replies.update_card(card_id, card, app_id=message.app_id,
                                         budget_s=UPDATE_BUDGET_S)
        except GatewayError as error:
            logger.error("request card for %s not sent (%s): it expires", message.message_id,
                         error)
            self._settle(self.book.chat_of(message), request_id, "expired")
            return None
        if card_id != opened.card:
            self._try(lambda: self.book.set_card(self.book.chat_of(message), request_id,
                                                 card_id))
        return card_id

    def _end(self, message: Message, request_id: str, card_id: str,
             ended: tuple[str, str, str], end_card: EndCard) -> tuple[str, str, str]:
        """How the request `ended`; its card says so (a click's answer already did)."""
        state, by, via = ended
        if via != "card" and card_id:
            try:
                self.replies.update_card(card_id, end_card(state, by),
                                         app_id=message.app_id, budget_s=UPDATE_BUDGET_S)
            except GatewayError as error:
                logger.warning("request card %s not updated: %s", card_id, error)
        logger.info("request %s in chat %s: %s%s", request_id, message.chat_id, state,
                    f" by {by}" if by else "")
        return ended

    def _wait(self, chat_id: str, request_id: str, timeout_s: float,
              stopped: threading.Event,
              handed_back: Callable[[], bool]) -> tuple[str, str, str] | None:
        """How the request ended; None when the turn was stopped because its worker is
        leaving (the turn is handed back: its re-run waits on the same card)."""
        deadline = self._clock() + timeout_s
        while True:
            request = self._try(lambda: self.book.get(chat_id, request_id))
            if request is not None and request.state != "pending":
                return request.state, request.by, request.via
            if stopped.is_set():
                if handed_back():
                    return None
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
