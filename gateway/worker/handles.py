"""In-process turn handles: an LRU-bounded registry of per-chat handles.

A chat's handle is held while one of its turns runs in this process; each turn holds it
through a `TurnHandle` of its own (fence, start time, stop event), so a stale turn of the
same chat (threads pool: a re-dispatched turn beside the one that lost its lease) can never
stop the current one. The process's heartbeat thread walks the held handles. Unheld handles
are kept for reuse up to `cap`, least recently used first out; a held handle is never
evicted, so the registry stands above its cap only by the number of turns running now.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gateway.chats.store_types import TurnRef

TIME_LIMIT = "ran past the time limit"
SHUTDOWN = "its worker is shutting down"
"""The worker is leaving: the turn is asked to stop and handed back, unless its agent
answers whole without looking."""


@dataclass(eq=False, slots=True)
class TurnHandle:
    """One running turn in this process."""

    turn: TurnRef
    started_at: float = field(default_factory=time.monotonic)
    stopped: threading.Event = field(default_factory=threading.Event)
    reason: str = ""
    """Why it was stopped: cancelled, lost its lease, time limit."""
    extended_at: float = field(default_factory=time.monotonic)
    """When its lease was last extended (the start script extended it first)."""
    answering: bool = False
    """Its agent runs now (a worker leaving asks it to stop; a turn sending goes on)."""
    seen: bool = False
    """Its agent saw the stop (`Turn.cancelled()` said so): what it answers is partial."""

    def stop(self, reason: str) -> None:
        """Stop the turn; a stop for a reason of its own outranks a shutdown's (the turn
        is then not handed back, nor its answer sent)."""
        if not self.stopped.is_set() or self.reason == SHUTDOWN:
            self.reason = reason
            self.stopped.set()

    def resume(self) -> None:
        """Take back a shutdown's stop the agent never saw (its answer is whole): the turn
        goes on to send it. A stop for another reason stays."""
        if self.reason == SHUTDOWN:
            self.reason = ""
            self.stopped.clear()


@dataclass(slots=True)
class ChatLock:
    chat_id: str
    turns: dict[int, TurnHandle] = field(default_factory=dict)

    @property
    def held(self) -> bool:
        return bool(self.turns)


class ChatHandles:
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
    def hold(self, turn: TurnRef) -> Iterator[TurnHandle]:
        """Hold the chat's handle for one turn; released on exit."""
        handle = TurnHandle(turn)
        with self._guard:
            lock = self._locks.get(turn.chat_id)
            if lock is None:
                lock = self._locks[turn.chat_id] = ChatLock(turn.chat_id)
            self._locks.move_to_end(turn.chat_id)
            lock.turns[id(handle)] = handle
            self._evict()
        try:
            yield handle
        finally:
            with self._guard:
                lock.turns.pop(id(handle), None)
                self._evict()

    def running(self) -> list[TurnHandle]:
        """Every turn running in this process now."""
        with self._guard:
            return [h for lock in self._locks.values() for h in lock.turns.values()]

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
