"""Pushes of one chat begin their steps in the order they arrived, within one `serve` process.

Feishu pushes a chat's messages one request each, and `serve` runs several steps at once on
its pool: without this, a later push of a chat could be admitted (and its turn start) before
an earlier one whose step merely began a moment later. So a push waits while the push of its
chat before it is being taken; a push refused meanwhile (it could not begin in time) keeps
its place in the line until the one before it is done (and is kept to take later only
then), so the chat's next push still waits for that one. Different chats never wait for
each other.

On the server's loop only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from gateway.feishu.inbound.events import chat_of


def chat_key(app_id: str, event: Mapping[str, Any]) -> str | None:
    """What orders a push: its app and chat (a message's, or a chat event's); None for an
    event of no chat."""
    chat = chat_of(event)
    return f"{app_id}|{chat}" if chat else None


class Turn:
    """A push's place in its chat's line: `in_order` once the push before it is done (False:
    the wait ran out, the push is refused); `finish(then)` once it was taken or refused
    (`then`: what to do first, when the push before it is done: keep a refused one)."""

    def __init__(self, order: ChatOrder, key: str | None, mine: asyncio.Future[None] | None,
                 before: asyncio.Future[None] | None, in_order: bool) -> None:
        self._order, self._key, self._mine, self._before = order, key, mine, before
        self.in_order = in_order

    def finish(self, then: Callable[[], object] | None = None) -> None:
        before = self._before
        if before is not None and not before.done():
            before.add_done_callback(lambda _: self._done(then))
        else:
            self._done(then)

    def _done(self, then: Callable[[], object] | None) -> None:
        if then is not None:
            then()
        mine = self._mine
        if mine is not None and not mine.done():
            mine.set_result(None)
        if self._key is not None and self._order._last.get(self._key) is mine:
            del self._order._last[self._key]


class ChatOrder:
    def __init__(self) -> None:
        self._last: dict[str, asyncio.Future[None]] = {}
        """Each chat's latest push: done once it was taken (or refused, and the one before
        it was done)."""
        self.waiting = 0
        """Pushes waiting for the push of their chat before them."""

    def place(self, key: str | None) -> Turn:
        """A push's place in its chat's line, last, without waiting: `in_order` when the
        chat's push before it is done already (a push refused at once, say, which is kept
        only once that one is)."""
        if key is None:
            return Turn(self, None, None, None, True)
        before = self._last.get(key)
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last[key] = mine
        return Turn(self, key, mine, before, before is None or before.done())

    async def turn(self, key: str | None, timeout_s: float | None) -> Turn:
        """Wait (up to `timeout_s`; None: as long as it takes) until the chat's push before
        this one is done; its Turn (`in_order` False when the wait ran out)."""
        turn = self.place(key)
        before = turn._before
        if turn.in_order or before is None:
            return turn
        self.waiting += 1
        try:
            await asyncio.wait_for(asyncio.shield(before), timeout_s)
            turn.in_order = True
        except TimeoutError:
            pass
        except asyncio.CancelledError:
            turn.finish()
            raise
        finally:
            self.waiting -= 1
        return turn
