"""Pushes of one chat begin their steps in the order they arrived, within one `serve` process.

Feishu pushes a chat's messages one request each, and `serve` runs several steps at once on
its pool: without this, a later push of a chat could be admitted (and its turn start) before
an earlier one whose step merely began a moment later. So a push waits while the push of its
chat before it is being taken; a push refused meanwhile (it could not begin in time) keeps
its place in the line until the one before it is done, so the chat's next push still waits
for that one. Different chats never wait for each other.

On the server's loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any


def chat_key(app_id: str, event: Mapping[str, Any]) -> str | None:
    """What orders a push: its app and chat (a message's, or a chat event's); None for an
    event of no chat."""
    body = event.get("event")
    if not isinstance(body, Mapping):
        return None
    message = body.get("message")
    chat = message.get("chat_id") if isinstance(message, Mapping) else None
    chat = chat or body.get("chat_id")
    return f"{app_id}|{chat}" if isinstance(chat, str) and chat else None


def _nothing() -> None:
    return None


class ChatOrder:
    def __init__(self) -> None:
        self._last: dict[str, asyncio.Future[None]] = {}
        """Each chat's latest push: done once it was taken (or refused, and the one before
        it was done)."""
        self.waiting = 0
        """Pushes waiting for the push of their chat before them."""

    async def turn(self, key: str | None,
                   timeout_s: float | None) -> tuple[bool, Callable[[], None]]:
        """Wait (up to `timeout_s`; None: as long as it takes) until the chat's push before
        this one is done: (True, done), `done` to be called once this push is taken; or
        (False, a no-op) when the wait ran out (the push is refused: its place is kept)."""
        if key is None:
            return True, _nothing
        before = self._last.get(key)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last[key] = mine

        def done(_: object = None) -> None:
            if not mine.done():
                mine.set_result(None)
            if self._last.get(key) is mine:
                del self._last[key]

        if before is None or before.done():
            return True, done
        self.waiting += 1
        try:
            await asyncio.wait_for(asyncio.shield(before), timeout_s)
        except TimeoutError:
            before.add_done_callback(done)
            return False, _nothing
        except asyncio.CancelledError:
            before.add_done_callback(done)
            raise
        finally:
            self.waiting -= 1
        return True, done
