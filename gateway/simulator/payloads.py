"""Pure builders for Feishu event payloads (schema 2.0) and open-API message objects."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

TENANT_KEY = "sim_tenant"
VERIFICATION_TOKEN = "sim-verification-token"


def new_id(prefix: str) -> str:
    """A Feishu-looking random id, e.g. "om_3f2a..." for messages."""
    return f"{prefix}{uuid.uuid4().hex}"


def now_ms() -> int:
    """Wall-clock milliseconds, as Feishu stamps create_time."""
    return int(time.time() * 1000)


def user_ids(open_id: str) -> dict[str, str]:
    """The open/user/union id triple Feishu sends for a user, derived from the open_id."""
    suffix = open_id.removeprefix("ou_")
    return {"open_id": open_id, "user_id": f"u_{suffix}", "union_id": f"on_{suffix}"}


def mention(key: str, open_id: str, name: str, *, is_bot: bool = False) -> dict[str, Any]:
    """One entry of message.mentions; the text carries `key` as a placeholder."""
    ids = user_ids(open_id)
    if is_bot:
        ids["user_id"] = ""
    return {
        "key": key,
        "id": ids,
        "name": name,
        "tenant_key": TENANT_KEY,
        "mentioned_type": "bot" if is_bot else "user",
    }


def event_header(event_type: str, app_id: str) -> dict[str, str]:
    """The schema-2.0 header with a fresh event_id."""
    return {
        "event_id": uuid.uuid4().hex,
        "event_type": event_type,
        "create_time": str(now_ms()),
        "token": VERIFICATION_TOKEN,
        "app_id": app_id,
        "tenant_key": TENANT_KEY,
    }


@dataclass(frozen=True)
class IncomingMessage:
    """What a user sends to the bot; turned into an im.message.receive_v1 event."""

    message_id: str
    chat_id: str
    chat_type: str
    message_type: str
    content: str
    sender_open_id: str
    create_time_ms: int
    mentions: Sequence[dict[str, Any]] = ()
    root_id: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None


def message_receive_event(msg: IncomingMessage, *, app_id: str) -> dict[str, Any]:
    """Build the im.message.receive_v1 event payload for one incoming message."""
    message: dict[str, Any] = {
        "message_id": msg.message_id,
        "create_time": str(msg.create_time_ms),
        "update_time": str(msg.create_time_ms),
        "chat_id": msg.chat_id,
        "chat_type": msg.chat_type,
        "message_type": msg.message_type,
        "content": msg.content,
    }
    for key in ("root_id", "parent_id", "thread_id"):
        value = getattr(msg, key)
        if value:
            message[key] = value
    if msg.mentions:
        message["mentions"] = [dict(m) for m in msg.mentions]
    sender = {"sender_id": user_ids(msg.sender_open_id), "sender_type": "user",
              "tenant_key": TENANT_KEY}
    return {
        "schema": "2.0",
        "header": event_header("im.message.receive_v1", app_id),
        "event": {"sender": sender, "message": message},
    }


def event_message(payload: dict[str, Any]) -> dict[str, Any] | None:
    """The event.message object of a raw payload when it has message_id and chat_id."""
    event = payload.get("event")
    message = event.get("message") if isinstance(event, dict) else None
    if not isinstance(message, dict):
        return None
    if not all(isinstance(message.get(k), str) for k in ("message_id", "chat_id")):
        return None
    return message


def event_sender(payload: dict[str, Any]) -> str | None:
    """The open_id of a raw event's sender, if it names one."""
    event = payload.get("event")
    sender = event.get("sender") if isinstance(event, dict) else None
    ids = sender.get("sender_id") if isinstance(sender, dict) else None
    open_id = ids.get("open_id") if isinstance(ids, dict) else None
    return open_id if isinstance(open_id, str) else None


def card_action_event(
    *,
    app_id: str,
    chat_id: str,
    open_message_id: str,
    operator_open_id: str,
    value: dict[str, Any],
    tag: str = "button",
    form_value: dict[str, Any] | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """Build a card.action.trigger callback payload (delivered as a type=event frame);
    event.token is fresh unless `token` is given."""
    operator = {"tenant_key": TENANT_KEY, **user_ids(operator_open_id)}
    action: dict[str, Any] = {"value": value, "tag": tag}
    if form_value is not None:
        action["form_value"] = form_value
    return {
        "schema": "2.0",
        "header": event_header("card.action.trigger", app_id),
        "event": {
            "operator": operator,
            "token": token or new_id("c-"),
            "action": action,
            "host": "im_message",
            "context": {"open_message_id": open_message_id, "open_chat_id": chat_id},
        },
    }


def api_message_object(
    *,
    message_id: str,
    chat_id: str,
    msg_type: str,
    content: str,
    app_id: str,
    create_time_ms: int,
    update_time_ms: int,
    root_id: str | None = None,
    parent_id: str | None = None,
    thread_id: str | None = None,
    updated: bool = False,
    sender_open_id: str | None = None,
    user_id_type: str = "open_id",
    mentions: Sequence[dict[str, Any]] = (),
    upper_message_id: str | None = None,
) -> dict[str, Any]:
    """A message as the im/v1 APIs return it (create, reply, update, get): sent by the
    app's bot, or by the user `sender_open_id` (named by `user_id_type`)."""
    sender = {"id": app_id, "id_type": "app_id", "sender_type": "app"}
    if sender_open_id is not None:
        ids = user_ids(sender_open_id)
        sender = {"id": ids.get(user_id_type, sender_open_id), "id_type": user_id_type,
                  "sender_type": "user"}
    obj: dict[str, Any] = {
        "message_id": message_id,
        "msg_type": msg_type,
        "create_time": str(create_time_ms),
        "update_time": str(update_time_ms),
        "deleted": False,
        "updated": updated,
        "chat_id": chat_id,
        "sender": {**sender, "tenant_key": TENANT_KEY},
        "body": {"content": content},
    }
    for key, value in (("root_id", root_id), ("parent_id", parent_id), ("thread_id", thread_id),
                       ("upper_message_id", upper_message_id)):
        if value:
            obj[key] = value
    if mentions:
        obj["mentions"] = [api_mention(m, user_id_type) for m in mentions]
    return obj


def api_mention(event_mention: dict[str, Any], user_id_type: str = "open_id") -> dict[str, Any]:
    """An event's mentions entry as the get-message API lists it (one id, its type)."""
    ids = event_mention.get("id")
    ident = ids.get(user_id_type, "") if isinstance(ids, dict) else str(ids or "")
    return {"key": event_mention.get("key", ""), "id": ident, "id_type": user_id_type,
            "name": event_mention.get("name", ""), "tenant_key": TENANT_KEY}


def _collect_strings(node: Any, out: list[str]) -> None:
    """Depth-first collection of human-readable strings in a post or card tree."""
    if isinstance(node, list):
        for item in node:
            _collect_strings(item, out)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key in ("text", "content", "title", "user_name") and isinstance(value, str):
                if value:
                    out.append(value)
            elif isinstance(value, (dict, list)):
                _collect_strings(value, out)


def _post_text(content: dict[str, Any]) -> str:
    """Title, then one line per paragraph with its inline elements concatenated."""
    body: Any = content.get("post", content)
    if isinstance(body, dict) and "content" not in body:  # {"zh_cn": {...}}: first language
        body = next((v for v in body.values() if isinstance(v, dict)), {})
    if not isinstance(body, dict):
        return ""
    lines = [str(body["title"])] if body.get("title") else []
    paragraphs = body.get("content")
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
        line = ""
        for element in paragraph if isinstance(paragraph, list) else []:
            if not isinstance(element, dict):
                continue
            if element.get("tag") == "at":
                line += "@" + str(element.get("user_name") or element.get("user_id", ""))
            else:
                line += str(element.get("text", ""))
        lines.append(line)
    return "\n".join(lines)


def flatten_text(msg_type: str, content: dict[str, Any]) -> str:
    """Best-effort plain text: exact for text, per-paragraph for post, joined strings for cards."""
    if msg_type == "text":
        return str(content.get("text", ""))
    if msg_type == "post":
        return _post_text(content)
    parts: list[str] = []
    _collect_strings(content, parts)
    return "\n".join(parts)
