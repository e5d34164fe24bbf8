"""The events a listener refused and takes later, in their chats' order.

An event that cannot begin its Redis step in time (the ingest gate: gateway/feishu/gate.py),
or whose step could not take it now (Redis failed, the broker is not taking turns, the bot's
identity is not known yet: `TakeLater`), is answered with a failure, so Feishu's 3 s never
pass and nothing is ACKed that was not taken. It is kept here, per app, oldest first: the
intake's next step takes the kept events first, ahead of what arrived after them, and a
message of a chat with an event still kept waits behind it (it is refused and kept too), so
a refused message keeps its place in its chat. Feishu's delivery of it again then finds it
taken: a duplicate.

A card click is never kept (its clicker saw it fail and may click again). Bounded: past
`cap` events kept in all, a refused event is left to Feishu's delivery of it again alone
(counted, and logged now and then); so is what is kept when the listener stops.

Thread-safe: the connections' loop keeps what its gate refused, an ingest thread (a pool
thread in webhook mode) takes and puts back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.core import metrics
from gateway.core.errors import TakeLater
from gateway.feishu.inbound.events import decode_event

logger = logging.getLogger(__name__)

CARD_EVENT = "card.action.trigger"
MESSAGE_EVENT = "im.message.receive_v1"
LOG_EVERY_S = 5.0


@dataclass(frozen=True, slots=True)
class Kept:
    """A refused event: its payload and its chat (None: an event of no chat)."""

    payload: bytes
    chat: str | None


def chat_of(event: Mapping[str, Any]) -> str | None:
    """The chat an event is about: a message's, or a chat event's (pure)."""
    body = event.get("event")
    if not isinstance(body, Mapping):
        return None
    message = body.get("message")
    chat = message.get("chat_id") if isinstance(message, Mapping) else None
    chat = chat or body.get("chat_id")
    return chat if isinstance(chat, str) and chat else None


def chat_of_payload(payload: bytes) -> str | None:
    """The chat of a message event's payload (None: another event, or no JSON)."""
    decoded = decode_event(payload)
    if isinstance(decoded, str) or decoded[0] != MESSAGE_EVENT:
        return None
    return chat_of(decoded[1])


def kept_of(payload: bytes) -> Kept | None:
    """A refused event as it is kept (None: a card click, never kept)."""
    decoded = decode_event(payload)
    if isinstance(decoded, str):
        return Kept(payload, None)
    return None if decoded[0] == CARD_EVENT else Kept(payload, chat_of(decoded[1]))


class Refused:
    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._kept: dict[str, deque[Kept]] = {}
        self._chats: Counter[tuple[str, str]] = Counter()
        self._count = 0
        self._lock = threading.Lock()
        self._dropped_since_log = 0
        self._logged_at = float("-inf")
        self._dropped_at: dict[str, float] = {}

    def __len__(self) -> int:
        return self._count

    def count(self, app_id: str) -> int:
        """Events of the app kept to take later."""
        kept = self._kept.get(app_id)
        return len(kept) if kept else 0

    def dropping(self, app_id: str, within_s: float) -> bool:
        """Whether an event of the app was left to Feishu (past the cap) within `within_s`:
        while it is, the app's listener cannot take every event."""
        return time.monotonic() - self._dropped_at.get(app_id, float("-inf")) < within_s

    def apps(self) -> list[str]:
        """The apps with events kept."""
        with self._lock:
            return list(self._kept)

    def holds(self, app_id: str, chat: str | None) -> bool:
        """Whether an event of the app's chat is kept: the chat's later messages wait."""
        return chat is not None and self._chats[(app_id, chat)] > 0

    def keep(self, app_id: str, payload: bytes) -> bool:
        """Keep a refused event, last; False when it is not kept (a card click, the cap)."""
        kept = kept_of(payload)
        return kept is not None and self.put_back(app_id, [kept], last=True) == 1

    def put_back(self, app_id: str, events: Sequence[Kept], *, last: bool = False) -> int:
        """Events a step took but could not take after all, first again in their order
        (`last`: newly refused ones, after the rest); over the cap the newest ones go.
        How many of `events` are kept."""
        if not events:
            return 0
        if self.cap <= 0:
            metrics.later("dropped", len(events))
            self._dropped_at[app_id] = time.monotonic()
            return 0
        with self._lock:
            kept = self._kept.setdefault(app_id, deque())
            if last:
                kept.extend(events)
            else:
                kept.extendleft(reversed(events))
            for event in events:
                self._count += 1
                if event.chat is not None:
                    self._chats[(app_id, event.chat)] += 1
            dropped = 0
            while self._count > self.cap and kept:
                self._forget(app_id, kept.pop())
                dropped += 1
        if last:
            metrics.later("kept", len(events) - dropped)
        if dropped:
            metrics.later("dropped", dropped)
            self._dropped_at[app_id] = time.monotonic()
            self._dropped(dropped)
        return len(events) - dropped

    def take(self, app_id: str, most: int) -> list[Kept]:
        """Up to `most` of the app's kept events, oldest first (taken out: put back what a
        step could not take)."""
        with self._lock:
            kept = self._kept.get(app_id)
            if not kept:
                return []
            taken = [kept.popleft() for _ in range(min(most, len(kept)))]
            for event in taken:
                self._forget(app_id, event)
            if not kept:
                del self._kept[app_id]
            return taken

    def _forget(self, app_id: str, event: Kept) -> None:
        self._count -= 1
        if event.chat is not None:
            key = (app_id, event.chat)
            self._chats[key] -= 1
            if self._chats[key] <= 0:
                del self._chats[key]

    def _dropped(self, count: int) -> None:
        self._dropped_since_log += count
        now = time.monotonic()
        if now - self._logged_at >= LOG_EVERY_S:
            logger.warning("%d refused event(s) not kept to take later (%d kept, "
                           "FEISHU_INGEST_LATER_CAP): Feishu delivers them again",
                           self._dropped_since_log, self._count)
            self._dropped_since_log, self._logged_at = 0, now


Outcome = Mapping[str, Any] | None | Exception
Frames = Sequence[tuple[str, bytes]]
Step = Callable[[str, Frames, int], list[Outcome]]
"""(app_id, frames, how many of the first are kept events taken now) → each one's outcome
(the intake's step)."""


def first(refused: Refused, app_id: str, frames: Frames, step: Step,
          most: int) -> list[Outcome]:
    """One step of `frames` with up to `most` of the app's kept events taken first: those
    that still cannot be taken go back first, then the frames refused now (TakeLater);
    the frames' own outcomes."""
    earlier = refused.take(app_id, most)
    results = step(app_id, [("event", e.payload) for e in earlier] + list(frames), len(earlier))
    again = [e for e, result in zip(earlier, results, strict=False)
             if isinstance(result, TakeLater)]
    now = results[len(earlier):]
    refused_now = [kept for (_, payload), result in zip(frames, now, strict=True)
                   if isinstance(result, TakeLater) and (kept := kept_of(payload)) is not None]
    refused.put_back(app_id, again + refused_now)
    if len(earlier) > len(again):
        metrics.later("taken", len(earlier) - len(again))
    if refused_now:
        metrics.later("kept", len(refused_now))
    return now
