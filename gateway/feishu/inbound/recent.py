"""`Turn.recent`'s lines from a page of the messages list API (newest first): the last ones
before the turn's, given to the agent oldest first. Deleted messages and those inside a
forward are left out; a bot's messages (this one's answers included) are in, marked
`from_app`. Pure; gateway/worker/recent_reader.py reads the page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gateway.core.model import ChatLine, Message
from gateway.feishu.inbound.enrich import chat_line
from gateway.feishu.inbound.listed import create_ms


def chat_lines(items: Sequence[Mapping[str, Any]], before: Message,
               count: int) -> tuple[ChatLine, ...]:
    """The last `count` of `items` (newest first, as listed) created before `before`,
    oldest first. Pure."""
    if count <= 0:
        return ()
    lines: list[ChatLine] = []
    for item in items:
        message_id = str(item.get("message_id") or "")
        created = create_ms(item)
        if (not message_id or message_id == before.message_id or item.get("deleted") is True
                or item.get("upper_message_id")
                or (before.create_time_ms and created > before.create_time_ms)):
            continue
        lines.append(chat_line(item))
        if len(lines) >= count:
            break
    return tuple(reversed(lines))
