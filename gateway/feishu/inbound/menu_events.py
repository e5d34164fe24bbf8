"""The bot's menu click events (`application.bot.menu_v6`; FEISHU_MENU, which key means
which command or text, is read by gateway/core/rules.py `parse_menu`). Pure: no I/O, no
logging. Feishu's event names the person and the key, not a chat: the listener's desk finds
the person's direct chat.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.errors import MalformedEvent
from gateway.feishu.inbound.fields import mapping, text_field, usable_id

MENU_EVENT = "application.bot.menu_v6"
ECHO_MARK = "☰ "
"""What the bot's echo of a clicked item starts with, in the person's direct chat."""


@dataclass(frozen=True, slots=True)
class MenuClick:
    event_id: str
    key: str
    open_id: str
    """Who clicked."""
    at_ms: int


def parse_menu_click(payload: Mapping[str, Any]) -> MenuClick:
    """A menu event (schema 2.0); MalformedEvent when it names no key or person."""
    event = mapping(payload.get("event"))
    key = event.get("event_key")
    if not usable_id(key):
        raise MalformedEvent(f"menu event without a usable event_key ({key!r:.40})")
    open_id = mapping(mapping(event.get("operator")).get("operator_id")).get("open_id")
    if not usable_id(open_id):
        raise MalformedEvent("menu event without the operator's open_id")
    try:
        at = int(event.get("timestamp") or 0)
    except (TypeError, ValueError, OverflowError):
        at = 0
    at_ms = at * 1000 if 0 < at < 10**11 else at  # (seconds or milliseconds)
    return MenuClick(text_field(mapping(payload.get("header")).get("event_id")), str(key),
                     str(open_id), max(at_ms, 0))


def menu_message_event(echo: Mapping[str, Any], open_id: str, text: str) -> dict[str, Any]:
    """The `im.message.receive_v1` payload of a menu click, as if the person had typed
    `text` in their direct chat: the message is the bot's echo of the click (`echo`, the
    message object the open API answered), so the answer replies to it."""
    content = json.dumps({"text": text}, ensure_ascii=False)
    return {"schema": "2.0", "header": {"event_type": "im.message.receive_v1"}, "event": {
        "sender": {"sender_id": {"open_id": open_id}, "sender_type": "user"},
        "message": {"message_id": echo.get("message_id"), "chat_id": echo.get("chat_id"),
                    "chat_type": "p2p", "message_type": "text", "content": content,
                    "create_time": echo.get("create_time")}}}
