"""Feishu event payloads → frozen `Message` values. Pure: no I/O, no logging."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gateway.core.errors import MalformedEvent
from gateway.core.model import Attachment, Message
from gateway.feishu.inbound.content import attachments_of, other_text, post_text
from gateway.feishu.inbound.fields import (
    clean_text,
    required_id,
    required_mapping,
    text_field,
)

TRUNCATION_MARK = " …[truncated]"


def _field(obj: Mapping[str, Any], key: str, where: str) -> Any:
    value = obj.get(key)
    if value is None or value == "":
        raise MalformedEvent(f"event without {where}.{key}")
    return value


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _resolve_mentions(text: str, mentions: list[Any], bot_open_id: str) -> tuple[str, list[str]]:
    """Strip the bot's @placeholder, turn the others into @name; return mentioned open_ids."""
    ids: list[str] = []
    for mention in mentions:
        if not isinstance(mention, Mapping):
            continue
        key = str(mention.get("key", ""))
        ident = mention.get("id") or {}
        open_id = str(ident.get("open_id", "")) if isinstance(ident, Mapping) else ""
        if open_id:
            ids.append(open_id)
        if not key:
            continue
        is_bot = bool(bot_open_id) and open_id == bot_open_id
        text = _without(text, key) if is_bot else text.replace(
            key, f"@{mention.get('name', '')}")
    return text.strip(), ids


def _without(text: str, key: str) -> str:
    """`text` without the @placeholder `key` and one space next to it; every other space,
    newline and indent stays (code blocks keep their layout)."""
    for spaced in (f"{key} ", f" {key}", key):
        text = text.replace(spaced, "")
    return text


def message_text(message_type: str, raw_content: Any) -> str:
    """The text an agent sees for one message, before mentions are resolved."""
    return message_content(message_type, raw_content)[0]


def message_content(message_type: str, raw_content: Any) -> tuple[str, tuple[Attachment, ...]]:
    """The text an agent sees for one message (before mentions are resolved) and its
    attachments."""
    try:
        content = json.loads(raw_content) if isinstance(raw_content, str) else raw_content
    except (ValueError, RecursionError) as error:  # a number too long for int(), too deep
        if message_type in ("text", "post"):
            reason = error.msg if isinstance(error, json.JSONDecodeError) else \
                "nested too deeply or a number too long"
            raise MalformedEvent(f"message content is not JSON ({reason})") from None
        content = {}  # the placeholder needs no content (merge_forward's is plain text)
    if not isinstance(content, Mapping):
        if message_type in ("text", "post"):
            raise MalformedEvent("message content is not a JSON object")
        content = {}
    if message_type == "post":
        return post_text(content), attachments_of(message_type, content)
    if message_type != "text":
        return other_text(message_type, content), attachments_of(message_type, content)
    text = content.get("text")
    if not isinstance(text, str):
        raise MalformedEvent("text message without a text field")
    return text, ()


def parse_message(
    payload: Mapping[str, Any], *, bot_open_id: str = "", max_text_chars: int = 16_000
) -> Message:
    """Normalise an `im.message.receive_v1` payload (schema 2.0, or its `event` part)."""
    event = required_mapping(payload.get("event", payload), "event")
    message = required_mapping(event.get("message"), "event.message")
    sender = required_mapping(event.get("sender"), "event.sender")
    sender_id = required_mapping(sender.get("sender_id") or {}, "event.sender.sender_id")
    message_type = str(_field(message, "message_type", "message"))
    text, attachments = message_content(message_type, _field(message, "content", "message"))
    text, mentioned = _resolve_mentions(text, _list(message.get("mentions")), bot_open_id)
    text = clean_text(text)
    if not text:
        raise MalformedEvent("message with empty text")
    if len(text) > max_text_chars:
        text = text[:max_text_chars] + TRUNCATION_MARK
    try:
        create_time_ms = int(message.get("create_time") or 0)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
        create_time_ms = 0
    return Message(
        message_id=required_id(message, "message_id", "message"),
        chat_id=required_id(message, "chat_id", "message"),
        chat_type=text_field(message.get("chat_type")) or "p2p",
        sender_open_id=text_field(sender_id.get("open_id")),
        message_type=clean_text(message_type),
        text=text,
        create_time_ms=create_time_ms,
        thread_id=text_field(message.get("thread_id")),
        root_id=text_field(message.get("root_id")),
        parent_id=text_field(message.get("parent_id")),
        mentioned_open_ids=tuple(clean_text(open_id) for open_id in mentioned),
        attachments=tuple(Attachment(clean_text(a.kind), clean_text(a.key),
                                     clean_text(a.name), a.size, a.duration_ms)
                          for a in attachments),
    )


COMMANDS = {"/stop": "stop", "/new": "new", "/reset": "new", "/approve": "approve",
            "/deny": "deny"}


def parse_command(text: str) -> str | None:
    """`stop`, `new`, `approve` or `deny` when the message is a control command, else None."""
    words = text.split()
    return COMMANDS.get(words[0].lower()) if len(words) == 1 else None


def chat_of(event: Mapping[str, Any]) -> str | None:
    """The chat an event is about: its message's, or a chat event's (None: no chat)."""
    body = event.get("event")
    if not isinstance(body, Mapping):
        return None
    message = body.get("message")
    chat = message.get("chat_id") if isinstance(message, Mapping) else None
    chat = chat or body.get("chat_id")
    return chat if isinstance(chat, str) and chat else None


def decode_event(payload: bytes) -> tuple[str, Mapping[str, Any]] | str:
    """(event_type, event) of a frame's JSON payload, or why it is not one."""
    try:
        event = json.loads(payload)
    except (ValueError, RecursionError) as error:  # (UnicodeDecodeError is a ValueError)
        return f"not JSON ({error})"
    if not isinstance(event, dict):
        return "not a JSON object"
    header = event.get("header")
    kind = header.get("event_type") if isinstance(header, dict) else None
    if not isinstance(kind, str):
        return "no header.event_type"
    return kind, event
