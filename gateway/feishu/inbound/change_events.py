"""Events about messages and chats after the fact → plain values. Pure: no I/O, no logging.

- `im.message.recalled_v1`: the sender withdrew a message (event.message_id, chat_id).
- `im.message.updated_v1`: the sender edited one; its event carries the message as
  `im.message.receive_v1` does (event.sender, event.message with its new content), and
  event.message.update_time orders edits.
- `im.chat.member.bot.added_v1` / `deleted_v1`: the bot was added to / removed from a group
  (event.chat_id, event.operator_id).
- `im.chat.access_event.bot_p2p_chat_entered_v1`: a user opened the bot's direct chat
  (event.chat_id, event.operator_id).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.core.model import GREETING, Message
from gateway.feishu.inbound.events import parse_message
from gateway.feishu.inbound.fields import clean_text, required_id, required_mapping

RECALLED = "im.message.recalled_v1"
UPDATED = "im.message.updated_v1"
BOT_ADDED = "im.chat.member.bot.added_v1"
BOT_REMOVED = "im.chat.member.bot.deleted_v1"
P2P_ENTERED = "im.chat.access_event.bot_p2p_chat_entered_v1"
CHANGES = frozenset({RECALLED, UPDATED, BOT_ADDED, BOT_REMOVED, P2P_ENTERED})


@dataclass(frozen=True, slots=True)
class ChatEvent:
    """The parts of a recall or membership event the gateway acts on."""

    event_id: str
    chat_id: str
    message_id: str = ""
    operator_open_id: str = ""
    at_ms: int = 0
    """When it happened, on Feishu's clock (0: not said)."""
    last_message_id: str = ""
    """A direct chat opened: the last message in it ('' when there is none: a first visit)."""


def _ms(value: Any) -> int:
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def parse_chat_event(payload: Mapping[str, Any]) -> ChatEvent:
    """A recall or a membership event; MalformedEvent when it names no chat (or, for a
    recall, no message)."""
    header = required_mapping(payload.get("header"), "header")
    event = required_mapping(payload.get("event"), "event")
    operator = event.get("operator_id")
    open_id = operator.get("open_id") if isinstance(operator, Mapping) else None
    recalled = header.get("event_type") == RECALLED
    return ChatEvent(
        event_id=required_id(header, "event_id", "header"),
        chat_id=required_id(event, "chat_id", "event"),
        message_id=required_id(event, "message_id", "event") if recalled else "",
        operator_open_id=clean_text(open_id) if isinstance(open_id, str) else "",
        at_ms=_ms(event.get("recall_time") if recalled else header.get("create_time")),
        last_message_id=str(event.get("last_message_id") or ""))


def parse_edit(payload: Mapping[str, Any], *, bot_open_id: str = "",
               max_text_chars: int = 16_000) -> tuple[Message, int]:
    """An edit: the message as it reads now, and its update_time (ms)."""
    event = required_mapping(payload.get("event"), "event")
    message = required_mapping(event.get("message"), "event.message")
    edited = parse_message(payload, bot_open_id=bot_open_id, max_text_chars=max_text_chars)
    return edited, _ms(message.get("update_time"))


def greeting(chat: ChatEvent, text: str, chat_type: str) -> Message:
    """The greeting the bot sends once for this event, as a message of its chat's inbox
    (its id: the event's, so a redelivered event is a duplicate)."""
    return Message(message_id=chat.event_id, chat_id=chat.chat_id, chat_type=chat_type,
                   sender_open_id=chat.operator_open_id, message_type=GREETING, text=text)
