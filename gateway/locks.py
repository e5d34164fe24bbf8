"""An LRU-bounded registry of process-local per-chat lock handles.

A handle is held while a turn of its chat runs in this process (its heartbeat and
lease fence live on it). Unheld handles are kept for reuse up to `cap`, least
recently used first out; a held handle is never evicted, so the registry may stand
above its cap only by the number of turns running right now.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass(slots=True)
class ChatLock:
    chat_id: str
    holders: int = 0
    fence: int = 0
    stopped: threading.Event = field(default_factory=threading.Event)
    """Set once the turn was cancelled or lost its lease."""

    @property
    def held(self) -> bool:
        return self.holders > 0


class LockRegistry:
    def __init__(self, cap: int) -> None:
        if cap < 1:
            raise ValueError("cap must be at least 1")
        self.cap = cap
        self._locks: OrderedDict[str, ChatLock] = OrderedDict()
        self._guard = threading.Lock()

    def __len__(self) -> int:
        return len(self._locks)

    def __contains__(self, chat_id: object) -> bool:
        return chat_id in self._locks

    @contextmanager
    def hold(self, chat_id: str, fence: int) -> Iterator[ChatLock]:
        """Hold the chat's handle for one turn (fence); released on exit."""
        with self._guard:
            lock = self._locks.get(chat_id)
            if lock is None:
                lock = self._locks[chat_id] = ChatLock(chat_id)
            self._locks.move_to_end(chat_id)
            lock.holders += 1
            lock.fence = fence
            lock.stopped.clear()
            self._evict()
        try:
            yield lock
        finally:
            with self._guard:
                lock.holders -= 1
                self._evict()

    def _evict(self) -> None:
        """Drop least recently used unheld handles while over the cap."""
        excess = len(self._locks) - self.cap
        if excess <= 0:
            return
        victims: list[str] = []
        for chat_id, lock in self._locks.items():
            if len(victims) == excess:
                break
            if not lock.held:
                victims.append(chat_id)
        for chat_id in victims:
            del self._locks[chat_id]
