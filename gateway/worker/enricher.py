"""What a worker adds to a message before its agent reads it: the message it replied to,
quoted, with the chain of messages above it (QUOTE_DEPTH), and the messages a merge_forward
carries, listed (gateway/feishu/inbound/enrich.py reads them). Each read is drawn from the
send quota like any call and retried within READ_BUDGET_S, in the worker (never on the
listener's ACK path): when Feishu cannot tell, the message goes on with what was read,
with one log line.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from gateway.core.errors import GatewayError
from gateway.core.model import ChatLine, Message
from gateway.feishu.inbound.enrich import chat_line, forwarded
from gateway.feishu.outbound.delivery import Replies
from gateway.worker.turn_hooks import TurnHook

logger = logging.getLogger(__name__)

QUOTE_CHARS = 500
"""`Message.quote` (the replied-to message's text) is cut to this."""
QUOTE_DEPTH = 5
"""`Message.quote_chain` follows replies up this many messages."""
READ_BUDGET_S = 5.0
"""Each read waits for the send quota and is retried within this, then given up."""


class Enricher(TurnHook):
    """A turn hook: what the agent is shown of a message, quoted and listed."""

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

    def shown(self, message: Message) -> Message:
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
