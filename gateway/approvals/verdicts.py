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
from gateway.approvals.policy import DONE_LABELS, may_decide, parse_decision
from gateway.core.logs import shown
from gateway.core.model import Message
from gateway.feishu.inbound.fields import clean_text, mapping, text_field

logger = logging.getLogger(__name__)


def _toast(kind: str, text: str) -> dict[str, Any]:
    return {"type": kind, "content": text}


class Verdicts:
    def __init__(self, book: ApprovalBook, *, admins: frozenset[str] = frozenset(),
                 allowed: frozenset[str] = frozenset()) -> None:
        self.book = book
        self.admins, self.allowed = admins, allowed

    def _may(self, clicker: str, request: Request) -> bool:
        dm_user = request.requester if request.chat_type == "p2p" else ""
        return may_decide(clicker, requester=request.requester, chat_type=request.chat_type,
                          dm_user=dm_user, admins=self.admins, allowed=self.allowed)

    def on_click(self, app_id: str, payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A `card.action.trigger` event → the callback's answer (None: not our card)."""
        event = mapping(payload.get("event"))
        value = mapping(mapping(event.get("action")).get("value"))
        request_id, decision = value.get("request_id"), parse_decision(value.get("decision"))
        if not isinstance(request_id, str) or decision is None:
            logger.info("card click ignored: not an approval button")
            return None
        request_id = clean_text(request_id)  # (what Redis cannot carry is no id of ours)
        clicker = text_field(mapping(event.get("operator")).get("open_id"))
        context = mapping(event.get("context"))
        bound_to = text_field(value.get("chat_id"))
        chat_id = text_field(context.get("open_chat_id")) or bound_to
        state = self.book.keyspace.scope.of(  # the clicked bot's requests (in its topic)
            chat_id, app_id, text_field(value.get("thread_id")))
        token = text_field(event.get("token") or mapping(payload.get("header")).get("event_id"))
        request = self.book.get(state, request_id) if chat_id else None
        if request is None or request.is_form or (bound_to and bound_to != chat_id):
            logger.warning("card click by %s on unknown approval %s (chat %s)", shown(clicker),
                           shown(request_id), shown(chat_id or "?"))
            return {"toast": _toast("error", "This approval request is unknown or too old.")}
        if not self._may(clicker, request):
            logger.warning("approval %s in chat %s: %s may not decide it; refused",
                           shown(request_id), shown(chat_id), shown(clicker or "?"))
            return {"toast": _toast("error", "You may not decide this request.")}
        outcome, ended, by = self.book.decide(state, request_id, decision, clicker, "card",
                                              token or f"{clicker}:{request_id}")
        if outcome == "decided":
            logger.info("approval %s in chat %s: %s by %s (card)", shown(request_id),
                        shown(chat_id), decision, shown(clicker))
            return {"toast": _toast("success", DONE_LABELS[decision].capitalize()),
                    "card": {"type": "raw", "data": resolved_card(request.prompt, decision,
                                                                  clicker)}}
        if outcome == "expired":
            return {"toast": _toast("warning", "This request has expired."),
                    "card": {"type": "raw", "data": resolved_card(request.prompt, "expired",
                                                                  "")}}
        return {"toast": _toast("info", f"Already decided: {DONE_LABELS.get(ended, ended)}."),
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
