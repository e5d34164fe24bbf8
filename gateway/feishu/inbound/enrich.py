"""What a worker adds to a message before its agent reads it: the message it replied to,
quoted, and the messages a merge_forward carries, listed (bounded in depth and count).
One attempt each (reads: not drawn from the send quota), in the worker (never on the
listener's ACK path): when Feishu cannot tell, the message goes on as it came, with one
log line.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.model import Message
from gateway.feishu.inbound.content import other_text, post_text
from gateway.feishu.outbound.delivery import Replies

logger = logging.getLogger(__name__)

QUOTE_CHARS = 500
FORWARDED_MAX = 50
"""At most this many forwarded messages are listed (the rest are counted)."""
FORWARDED_DEPTH = 3
"""A merge_forward inside a merge_forward is listed this deep, then named only."""


def item_text(item: Mapping[str, Any]) -> str:
    """The readable text of one message object of the messages API. Pure."""
    kind = str(item.get("msg_type") or "")
    body = item.get("body")
    raw = body.get("content") if isinstance(body, Mapping) else None
    try:
        content = json.loads(raw) if isinstance(raw, str) else {}
    except json.JSONDecodeError:
        content = {}
    if not isinstance(content, Mapping):
        content = {}
    if kind == "text":
        return str(content.get("text") or "")
    if kind == "post":
        return post_text(content)
    return other_text(kind or "unknown", content)


def _sender(item: Mapping[str, Any]) -> str:
    sender = item.get("sender")
    ident = sender.get("id") if isinstance(sender, Mapping) else ""
    return str(ident or "someone")


def forwarded(items: Sequence[Mapping[str, Any]], root: str, depth: int = 1) -> list[str]:
    """The lines listing the children of merge_forward `root`, in order. Pure."""
    children = [i for i in items if i.get("upper_message_id") == root]
    lines: list[str] = []
    for item in children[:FORWARDED_MAX]:
        indent = "  " * (depth - 1)
        lines.append(f"{indent}- {_sender(item)}: {item_text(item)}")
        if item.get("msg_type") == "merge_forward" and depth < FORWARDED_DEPTH:
            lines.extend(forwarded(items, str(item.get("message_id") or ""), depth + 1))
    if len(children) > FORWARDED_MAX:
        lines.append(f"  … and {len(children) - FORWARDED_MAX} more")
    return lines


class Enricher:
    def __init__(self, replies: Replies) -> None:
        self._replies = replies

    def _items(self, message: Message, message_id: str) -> list[dict[str, Any]]:
        return self._replies.api_for(message.app_id).get_message(message_id)

    def enrich(self, message: Message) -> Message:
        """`message` with its parent quoted and its forwarded messages listed."""
        try:
            if message.parent_id and not message.quote:
                items = self._items(message, message.parent_id)
                quote = item_text(items[0]) if items else ""
                if len(quote) > QUOTE_CHARS:
                    quote = quote[:QUOTE_CHARS] + " …"
                message = dataclasses.replace(message, quote=quote)
            if message.message_type == "merge_forward":
                lines = forwarded(self._items(message, message.message_id),
                                  message.message_id)
                if lines:
                    message = dataclasses.replace(
                        message, text="\n".join([message.text, *lines]))
        except GatewayError as error:
            logger.warning("message %s of chat %s goes to its agent as it came: %s",
                           message.message_id, message.chat_id, error)
        return message
