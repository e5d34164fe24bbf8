"""`Turn.recent`: the messages a chat (or a topic) held before the turn's, read from Feishu's
messages list API once per turn, newest first, under the send quota (a read counts like any
call), and given to the agent oldest first (gateway/feishu/inbound/recent.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.core.model import ChatLine, Message
from gateway.feishu.inbound.recent import chat_lines
from gateway.feishu.outbound.delivery import Replies

RECENT_MAX = 50
"""The most messages `Turn.recent` gives (one page of the list API)."""
WINDOW_S = 7 * 24 * 3600
"""How far back the read looks (the list API wants a start time)."""


class RecentReader:
    """One turn's reads of its chat's history: the first call reads, a later one for as
    many or fewer is answered from it."""

    def __init__(self, replies: Replies, message: Message) -> None:
        self._replies, self._message = replies, message
        self._read: tuple[int, tuple[ChatLine, ...]] | None = None

    def __call__(self, count: int) -> tuple[ChatLine, ...]:
        count = max(0, min(int(count), RECENT_MAX))
        if count == 0:
            return ()
        if self._read is not None and self._read[0] >= count:
            return self._read[1][-count:]
        m = self._message
        end_s = m.create_time_ms // 1000 + 1 if m.create_time_ms else 2**31 - 1
        thread = bool(m.thread_id)
        body = self._replies.call(
            f"recent messages of {m.chat_id}",
            lambda api: api.list_messages(m.thread_id if thread else m.chat_id,
                                          start_s=max(end_s - WINDOW_S, 0), end_s=end_s,
                                          page_size=min(count + 2, RECENT_MAX),
                                          newest_first=True, thread=thread),
            app_id=m.app_id, chat_id=m.chat_id)
        data = body.get("data")
        items = data.get("items") if isinstance(data, Mapping) else None
        lines = chat_lines(items if isinstance(items, list) else [], m, count)
        self._read = (count, lines)
        return lines
