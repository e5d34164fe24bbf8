"""A person submits a form (`Turn.ask`): a card's submit (answered within Feishu's 3 s with
the card showing the values, or a toast saying what to fix). Authorised as an approval's
decision is (`policy.may_decide`), bound to the chat and the request, checked against the
form's fields (forms.py `check_submit`), deduped by token.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from gateway.approvals.approval_book import ApprovalBook, Request
from gateway.approvals.forms import check_submit, read_spec, resolved_form_card
from gateway.approvals.policy import may_decide
from gateway.core.logs import shown
from gateway.feishu.inbound.fields import clean_text, mapping, text_field

logger = logging.getLogger(__name__)


def _toast(kind: str, text: str) -> dict[str, Any]:
    return {"toast": {"type": kind, "content": text}}


def _values(request: Request) -> dict[str, Any]:
    try:
        read = json.loads(request.values) if request.values else {}
    except ValueError:
        return {}
    return read if isinstance(read, dict) else {}


class FormSubmits:
    def __init__(self, book: ApprovalBook, *, admins: frozenset[str] = frozenset(),
                 allowed: frozenset[str] = frozenset()) -> None:
        self.book = book
        self.admins, self.allowed = admins, allowed

    def on_click(self, app_id: str, payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A `card.action.trigger` event → the callback's answer (None: not a form's
        submit)."""
        event = mapping(payload.get("event"))
        action = mapping(event.get("action"))
        value = mapping(action.get("value"))
        request_id = value.get("form_request")
        if not isinstance(request_id, str):
            return None
        request_id = clean_text(request_id)
        clicker = text_field(mapping(event.get("operator")).get("open_id"))
        bound_to = text_field(value.get("chat_id"))
        chat_id = text_field(mapping(event.get("context")).get("open_chat_id")) or bound_to
        state = self.book.keyspace.scope.of(chat_id, app_id, text_field(value.get("thread_id")))
        token = text_field(event.get("token") or mapping(payload.get("header")).get("event_id"))
        request = self.book.get(state, request_id) if chat_id else None
        if request is None or not request.is_form or (bound_to and bound_to != chat_id):
            logger.warning("form submit by %s on unknown form %s (chat %s)", shown(clicker),
                           shown(request_id), shown(chat_id or "?"))
            return _toast("error", "This form is unknown or too old.")
        dm_user = request.requester if request.chat_type == "p2p" else ""
        if not may_decide(clicker, requester=request.requester, chat_type=request.chat_type,
                          dm_user=dm_user, admins=self.admins, allowed=self.allowed):
            logger.warning("form %s in chat %s: %s may not submit it; refused",
                           shown(request_id), shown(chat_id), shown(clicker or "?"))
            return _toast("error", "You may not submit this form.")
        spec = read_spec(request.prompt)
        if request.state != "pending":
            return self._ended(spec, request.state, request.by, _values(request))
        checked = check_submit(spec, action.get("form_value"))
        if isinstance(checked, str):
            logger.info("form %s in chat %s: a submit by %s refused: %s", shown(request_id),
                        shown(chat_id), shown(clicker), checked)
            return _toast("error", checked)
        values = json.dumps(checked, ensure_ascii=False, separators=(",", ":"))
        outcome, ended, by = self.book.submit(state, request_id, values, clicker,
                                              token or f"{clicker}:{request_id}")
        if outcome == "submitted":
            logger.info("form %s in chat %s: submitted by %s", shown(request_id),
                        shown(chat_id), shown(clicker))
            return {**_toast("success", "Submitted"), "card": {
                "type": "raw", "data": resolved_form_card(spec, "submitted", clicker, checked)}}
        if outcome == "expired":
            return self._ended(spec, "expired", "", {})
        now = self.book.get(state, request_id)
        return self._ended(spec, ended, by, _values(now) if now is not None else {})

    @staticmethod
    def _ended(spec: Mapping[str, Any], state: str, by: str,
               values: Mapping[str, Any]) -> Mapping[str, Any]:
        text = {"submitted": "Already submitted.", "expired": "This form has expired.",
                "stopped": "This form was withdrawn: its answer was stopped."}
        return {**_toast("info" if state == "submitted" else "warning",
                         text.get(state, f"This form is {state}.")),
                "card": {"type": "raw", "data": resolved_form_card(spec, state, by, values)}}
