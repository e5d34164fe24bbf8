"""Messages read back from Feishu's messages list API (`GET /open-apis/im/v1/messages`, what
catch-up reads after an outage) → the `im.message.receive_v1` payload a push would have
carried, so they take exactly the path of pushed events (admission, parsing, ingest).
Pure: no I/O, no logging.

A list item differs from an event's message: `msg_type` (not message_type), the content
under `body.content`, the sender as `{id, id_type, sender_type}`, each mention's `id` a
plain string with its `id_type`, and no chat_type (the caller knows it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MESSAGE_EVENT = "im.message.receive_v1"


@dataclass(frozen=True, slots=True)
class Page:
    """One page of the list API's answer."""

    items: tuple[Mapping[str, Any], ...]
    has_more: bool
    token: str


def page_of(body: Mapping[str, Any]) -> Page:
    """The `data` of a list answer (lenient: what is missing is empty)."""
    data = body.get("data")
    data = data if isinstance(data, Mapping) else {}
    items = data.get("items")
    token = data.get("page_token")
    return Page(tuple(i for i in items if isinstance(i, Mapping))
                if isinstance(items, list) else (),
                data.get("has_more") is True, token if isinstance(token, str) else "")


def query_window(since_ms: int, until_ms: int) -> tuple[int, int]:
    """The list API's start_time and end_time (seconds) covering [since_ms, until_ms]."""
    return since_ms // 1000, -(-until_ms // 1000)


def create_ms(item: Mapping[str, Any]) -> int:
    try:
        return int(item.get("create_time") or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def _ids(ident: Any, id_type: Any) -> dict[str, str]:
    """A list API id (a plain string and its type) as an event's id object."""
    if not isinstance(ident, str) or not ident:
        return {}
    return {id_type if isinstance(id_type, str) and id_type else "open_id": ident}


def _mention(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping):
        return None
    return {"key": str(raw.get("key") or ""), "id": _ids(raw.get("id"), raw.get("id_type")),
            "name": str(raw.get("name") or "")}


def skipped(item: Mapping[str, Any]) -> str:
    """Why catch-up leaves an item alone ('' when it does not): a message sent by an app
    (the bot's own included; Feishu pushes no other bot's message either), a deleted one,
    one inside a forward (its forward is the message)."""
    sender = item.get("sender")
    kind = sender.get("sender_type") if isinstance(sender, Mapping) else None
    if kind != "user":
        return f"sent by {kind or 'no one known'}"
    if item.get("deleted") is True:
        return "deleted"
    if item.get("upper_message_id"):
        return "inside a forward"
    return ""


def event_of(item: Mapping[str, Any], chat_type: str) -> dict[str, Any]:
    """The `im.message.receive_v1` payload (schema 2.0) a push of `item` would have carried,
    in a chat of `chat_type` (`p2p` or `group`)."""
    sender = item.get("sender")
    sender = sender if isinstance(sender, Mapping) else {}
    body = item.get("body")
    body = body if isinstance(body, Mapping) else {}
    mentions = item.get("mentions")
    message: dict[str, Any] = {
        "message_id": item.get("message_id"),
        "chat_id": item.get("chat_id"),
        "chat_type": chat_type,
        "message_type": item.get("msg_type"),
        "content": body.get("content"),
        "create_time": str(create_ms(item)),
        "mentions": [m for m in (_mention(x) for x in mentions) if m is not None]
        if isinstance(mentions, list) else [],
    }
    for key in ("root_id", "parent_id", "thread_id"):
        if item.get(key):
            message[key] = item[key]
    return {
        "schema": "2.0",
        "header": {"event_id": f"listed-{item.get('message_id')}", "event_type": MESSAGE_EVENT},
        "event": {"sender": {"sender_id": _ids(sender.get("id"), sender.get("id_type")),
                             "sender_type": "user"},
                  "message": message},
    }
