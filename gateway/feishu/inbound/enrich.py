"""What a worker adds to a message before its agent reads it: the message it replied to,
quoted, with the chain of messages above it (QUOTE_DEPTH), and the messages a merge_forward
carries, listed (bounded in depth and count). Each read is drawn from the send quota like
any call and retried within READ_BUDGET_S, in the worker (never on the listener's ACK
path): when Feishu cannot tell, the message goes on with what was read, with one log line.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.model import Attachment, ChatLine, Message
from gateway.feishu.inbound.content import attachments_of, other_text, post_text
from gateway.feishu.inbound.listed import create_ms
from gateway.feishu.outbound.delivery import Replies

logger = logging.getLogger(__name__)

QUOTE_CHARS = 500
"""`Message.quote` (the replied-to message's text) is cut to this."""
QUOTE_DEPTH = 5
"""`Message.quote_chain` follows replies up this many messages."""
READ_BUDGET_S = 5.0
"""Each read waits for the send quota and is retried within this, then given up."""
FORWARDED_MAX = 50
"""At most this many forwarded messages are listed (the rest are counted)."""
FORWARDED_DEPTH = 3
"""A merge_forward inside a merge_forward is listed this deep, then named only."""


def _content(item: Mapping[str, Any]) -> Mapping[str, Any]:
    body = item.get("body")
    raw = body.get("content") if isinstance(body, Mapping) else None
    try:
        content = json.loads(raw) if isinstance(raw, str) else {}
    except (ValueError, RecursionError):
        content = {}
    return content if isinstance(content, Mapping) else {}


def item_text(item: Mapping[str, Any]) -> str:
    """The readable text of one message object of the messages API. Pure."""
    kind = str(item.get("msg_type") or "")
    content = _content(item)
    if kind == "text":
        return str(content.get("text") or "")
    if kind == "post":
        return post_text(content)
    return other_text(kind or "unknown", content)


def chat_line(item: Mapping[str, Any]) -> ChatLine:
    """One message object of the messages API as an agent reads it: sender, time, text and
    attachments (each naming the message, for `Turn.fetch`). Pure."""
    message_id = str(item.get("message_id") or "")
    sender = item.get("sender")
    sender = sender if isinstance(sender, Mapping) else {}
    found = attachments_of(str(item.get("msg_type") or ""), _content(item))
    return ChatLine(message_id, str(sender.get("id") or ""),
                    sender.get("sender_type") == "app", item_text(item), create_ms(item),
                    tuple(Attachment(a.kind, a.key, a.name, a.size, a.duration_ms,
                                     message_id=message_id) for a in found))


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
        return self._replies.call(f"message {message_id}",
                                  lambda api: api.get_message(message_id),
                                  app_id=message.app_id, chat_id=message.chat_id,
                                  budget_s=READ_BUDGET_S)

    def _quoted(self, message: Message) -> Message:
        """`message` with the chain of messages it replied to (nearest first) and the
        nearest's text as `quote`; as far as Feishu told when a read fails (one line)."""
        chain: list[ChatLine] = []
        parent, seen = message.parent_id, {message.message_id}
        try:
            while parent and parent not in seen and len(chain) < QUOTE_DEPTH:
                seen.add(parent)
                items = self._items(message, parent)
                item = next((i for i in items if i.get("message_id") == parent),
                            items[0] if items else None)
                if item is None:
                    break
                chain.append(chat_line(item))
                parent = str(item.get("parent_id") or "")
        except GatewayError as error:
            logger.warning("message %s of chat %s: %d quoted message(s) read, then %s",
                           message.message_id, message.chat_id, len(chain), error)
        if not chain:
            return message
        quote = chain[0].text
        if len(quote) > QUOTE_CHARS:
            quote = quote[:QUOTE_CHARS] + " …"
        return dataclasses.replace(message, quote=quote, quote_chain=tuple(chain))

    def enrich(self, message: Message) -> Message:
        """`message` with the chain of messages it replied to quoted and its forwarded
        messages listed."""
        if message.parent_id and not message.quote_chain:
            message = self._quoted(message)
        try:
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
