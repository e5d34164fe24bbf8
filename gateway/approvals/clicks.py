"""A click on a request's card (an approval's button, a form's submit), read one way: who
clicked, in which chat and topic, with which token, on which request; who may act on a
request; the toast that answers. Approvals' verdicts.py and forms' submits.py share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.approvals.approval_book import ApprovalBook, Request
from gateway.approvals.policy import may_decide
from gateway.feishu.inbound.fields import clean_text, mapping, text_field


def toast(kind: str, text: str) -> dict[str, Any]:
    """A card callback's answer that shows `text` (kind: success, info, warning, error)."""
    return {"toast": {"type": kind, "content": text}}


@dataclass(frozen=True, slots=True)
class Click:
    request_id: str
    clicker: str
    """The clicker's open_id ('' unknown)."""
    chat_id: str
    """The chat the card was clicked in (or, unsaid, the one it was bound to)."""
    state: str
    """The state id of that chat (this bot's, in the card's topic) the request is kept in."""
    token: str
    """What dedupes the click (Feishu's token: a click delivered again counts once)."""
    action: Mapping[str, Any]
    request: Request | None
    """The request clicked; None when it is unknown, too old, or bound to another chat."""

    def dedupe(self) -> str:
        return self.token or f"{self.clicker}:{self.request_id}"


def read_click(book: ApprovalBook, app_id: str, payload: Mapping[str, Any],
               id_field: str) -> Click | None:
    """A `card.action.trigger` event on a request's card whose button value names the
    request under `id_field`; None when it names none (not such a card)."""
    event = mapping(payload.get("event"))
    action = mapping(event.get("action"))
    value = mapping(action.get("value"))
    request_id = value.get(id_field)
    if not isinstance(request_id, str):
        return None
    request_id = clean_text(request_id)  # (what Redis cannot carry is no id of ours)
    bound_to = text_field(value.get("chat_id"))
    chat_id = text_field(mapping(event.get("context")).get("open_chat_id")) or bound_to
    state = book.keyspace.scope.of(  # the clicked bot's requests (in its topic)
        chat_id, app_id, text_field(value.get("thread_id")))
    request = book.get(state, request_id) if chat_id else None
    if bound_to and bound_to != chat_id:
        request = None
    return Click(request_id, text_field(mapping(event.get("operator")).get("open_id")),
                 chat_id, state, text_field(
                     event.get("token") or mapping(payload.get("header")).get("event_id")),
                 action, request)


def may_act(clicker: str, request: Request, *, admins: frozenset[str],
            allowed: frozenset[str]) -> bool:
    """Whether `clicker` may decide (or submit) `request` (policy.may_decide: in a direct
    message, its user)."""
    dm_user = request.requester if request.chat_type == "p2p" else ""
    return may_decide(clicker, requester=request.requester, chat_type=request.chat_type,
                      dm_user=dm_user, admins=admins, allowed=allowed)
