"""Message objects of the messages API, read as an agent reads them: their text, as a
`ChatLine` (sender, time, text, attachments), and a merge_forward's children listed
(bounded in depth and count). Pure; gateway/worker/enricher.py and recent_reader.py read
the objects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gateway.core.model import ChatLine
from gateway.feishu.inbound.content import attachments_of, other_text, post_text
from gateway.feishu.inbound.listed import create_ms

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
                    tuple(replace(a, message_id=message_id) for a in found))


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
