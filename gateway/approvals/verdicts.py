"""A person decides: a card click (answered within Feishu's 3 s with the updated card and
a toast) or /approve, /deny in the chat. Authorised by `policy.may_decide`; bound to the
chat and the request; deduped by token.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from gateway.approvals.approval_book import ApprovalBook, Request
from gateway.approvals.card import resolved_card
from gateway.approvals.clicks import may_act, read_click, toast
from gateway.approvals.policy import DONE_LABELS, parse_decision
from gateway.core.logs import shown
from gateway.core.model import Message
from gateway.feishu.inbound.fields import mapping

logger = logging.getLogger(__name__)


class Verdicts:
    def __init__(self, book: ApprovalBook, *, admins: frozenset[str] = frozenset(),
                 allowed: frozenset[str] = frozenset()) -> None:
        self.book = book
        self.admins, self.allowed = admins, allowed

    def _may(self, clicker: str, request: Request) -> bool:
        return may_act(clicker, request, admins=self.admins, allowed=self.allowed)

    def on_click(self, app_id: str, payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A `card.action.trigger` event → the callback's answer (None: not our card)."""
        value = mapping(mapping(mapping(payload.get("event")).get("action")).get("value"))
        decision = parse_decision(value.get("decision"))
        click = read_click(self.book, app_id, payload, "request_id") \
            if decision is not None else None
        if click is None or decision is None:
            logger.info("card click ignored: not an approval button")
            return None
        request = click.request
        if request is None or request.is_form:
            logger.warning("card click by %s on unknown approval %s (chat %s)",
                           shown(click.clicker), shown(click.request_id),
                           shown(click.chat_id or "?"))
            return toast("error", "This approval request is unknown or too old.")
        if not self._may(click.clicker, request):
            logger.warning("approval %s in chat %s: %s may not decide it; refused",
                           shown(click.request_id), shown(click.chat_id),
                           shown(click.clicker or "?"))
            return toast("error", "You may not decide this request.")
        outcome, ended, by = self.book.decide(click.state, click.request_id, decision,
                                              click.clicker, "card", click.dedupe())
        if outcome == "decided":
            logger.info("approval %s in chat %s: %s by %s (card)", shown(click.request_id),
                        shown(click.chat_id), decision, shown(click.clicker))
            return {**toast("success", DONE_LABELS[decision].capitalize()),
                    "card": {"type": "raw", "data": resolved_card(request.prompt, decision,
                                                                  click.clicker)}}
        if outcome == "expired":
            return {**toast("warning", "This request has expired."),
                    "card": {"type": "raw", "data": resolved_card(request.prompt, "expired",
                                                                  "")}}
        return {**toast("info", f"Already decided: {DONE_LABELS.get(ended, ended)}."),
                "card": {"type": "raw", "data": resolved_card(request.prompt, ended, by)}}

    def by_text(self, message: Message, decision: str) -> str:
        """/approve or /deny from `message`'s sender → what to reply ('' when it was
        decided: the card shows it)."""
        chat = self.book.chat_of(message)
        request = self.book.pending(chat)
        if request is None:
            return "There is no pending approval request in this chat."
        if request.is_form:
            return "What is pending here is a form: fill it in on its card."
        if not self._may(message.sender_open_id, request):
            logger.warning("approval %s in chat %s: %s may not decide it; refused",
                           request.request_id, message.chat_id, shown(message.sender_open_id))
            return "You may not decide this approval request."
        outcome, state, _ = self.book.decide(chat, request.request_id, decision,
                                             message.sender_open_id, "text",
                                             f"text:{message.message_id}")
        if outcome == "decided":
            logger.info("approval %s in chat %s: %s by %s (text)", request.request_id,
                        message.chat_id, decision, shown(message.sender_open_id))
            return ""  # the card shows the decision: the command gets a reaction
        if outcome == "expired":
            return "That approval request has expired."
        return f"That approval request was already decided: {DONE_LABELS.get(state, state)}."
