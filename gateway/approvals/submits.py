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

from gateway.approvals.approval_book import ApprovalBook
from gateway.approvals.clicks import may_act, read_click, toast
from gateway.approvals.forms import check_submit, read_spec, resolved_form_card
from gateway.core.logs import shown

logger = logging.getLogger(__name__)


class FormSubmits:
    def __init__(self, book: ApprovalBook, *, admins: frozenset[str] = frozenset(),
                 allowed: frozenset[str] = frozenset()) -> None:
        self.book = book
        self.admins, self.allowed = admins, allowed

    def on_click(self, app_id: str, payload: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A `card.action.trigger` event → the callback's answer (None: not a form's
        submit)."""
        click = read_click(self.book, app_id, payload, "form_request")
        if click is None:
            return None
        request, clicker = click.request, click.clicker
        if request is None or not request.is_form:
            logger.warning("form submit by %s on unknown form %s (chat %s)", shown(clicker),
                           shown(click.request_id), shown(click.chat_id or "?"))
            return toast("error", "This form is unknown or too old.")
        if not may_act(clicker, request, admins=self.admins, allowed=self.allowed):
            logger.warning("form %s in chat %s: %s may not submit it; refused",
                           shown(click.request_id), shown(click.chat_id),
                           shown(clicker or "?"))
            return toast("error", "You may not submit this form.")
        spec = read_spec(request.prompt)
        if request.state != "pending":
            return self._ended(spec, request.state, request.by, request.form_values())
        checked = check_submit(spec, click.action.get("form_value"))
        if isinstance(checked, str):
            logger.info("form %s in chat %s: a submit by %s refused: %s",
                        shown(click.request_id), shown(click.chat_id), shown(clicker), checked)
            return toast("error", checked)
        values = json.dumps(checked, ensure_ascii=False, separators=(",", ":"))
        outcome, ended, by = self.book.submit(click.state, click.request_id, values, clicker,
                                              click.dedupe())
        if outcome == "submitted":
            logger.info("form %s in chat %s: submitted by %s", shown(click.request_id),
                        shown(click.chat_id), shown(clicker))
            return {**toast("success", "Submitted"), "card": {
                "type": "raw", "data": resolved_form_card(spec, "submitted", clicker, checked)}}
        if outcome == "expired":
            return self._ended(spec, "expired", "", {})
        now = self.book.get(click.state, click.request_id)
        return self._ended(spec, ended, by, now.form_values() if now is not None else {})

    @staticmethod
    def _ended(spec: Mapping[str, Any], state: str, by: str,
               values: Mapping[str, Any]) -> Mapping[str, Any]:
        text = {"submitted": "Already submitted.", "expired": "This form has expired.",
                "stopped": "This form was withdrawn: its answer was stopped."}
        return {**toast("info" if state == "submitted" else "warning",
                        text.get(state, f"This form is {state}.")),
                "card": {"type": "raw", "data": resolved_form_card(spec, state, by, values)}}
