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
from gateway.core.logs import Tally
from gateway.feishu.inbound.events import chat_of, decode_event

logger = logging.getLogger(__name__)

CARD_EVENT = "card.action.trigger"
MESSAGE_EVENT = "im.message.receive_v1"


@dataclass(frozen=True, slots=True)
class Kept:
    """A refused event: its payload, its chat (None: an event of no chat) and its id (None:
    none could be read)."""

    payload: bytes
    chat: str | None
    event_id: str | None = None


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
    if decoded[0] == CARD_EVENT:
        return None
    header = decoded[1].get("header")
    event_id = header.get("event_id") if isinstance(header, Mapping) else None
    return Kept(payload, chat_of(decoded[1]), event_id if isinstance(event_id, str) else None)


class Refused:
    """The kept events: per app, a line (oldest first) and what is counted of them: every
    kept event's chat and id, from when it is kept until a step took it (taken out of the
    line for a step, it still counts until the step is `done` with it, or puts it back), so
    no message of its chat is taken while it is in flight."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._kept: dict[str, deque[Kept]] = {}
        self._chats: Counter[tuple[str, str]] = Counter()
        self._ids: Counter[tuple[str, str]] = Counter()
        """The ids of the events kept: Feishu's delivery again of one is not kept twice."""
        self._count = 0
        """Events kept, in flight included (what the cap bounds)."""
        self._lock = threading.Lock()
        self._left = Tally(logger)
        self._dropped_at: dict[str, float] = {}

    def __len__(self) -> int:
        return self._count

    def count(self, app_id: str) -> int:
        """Events of the app in the line, to take later."""
        kept = self._kept.get(app_id)
        return len(kept) if kept else 0

    def dropping(self, app_id: str, within_s: float) -> bool:
        """Whether an event of the app was left to Feishu (past the cap) within `within_s`:
        while it is, the app's listener cannot take every event."""
        return time.monotonic() - self._dropped_at.get(app_id, float("-inf")) < within_s

    def apps(self) -> list[str]:
        """The apps with events in the line."""
        with self._lock:
            return [app_id for app_id, kept in self._kept.items() if kept]

    def holds(self, app_id: str, chat: str | None, *, besides: int = 0) -> bool:
        """Whether an event of the app's chat is kept (or in flight), `besides` of them
        apart (those the asking step takes itself, ahead): the chat's later messages wait."""
        return chat is not None and self._chats[(app_id, chat)] > besides

    def keep(self, app_id: str, payload: bytes) -> bool:
        """Keep a refused event (`keep_all`); False when it is not kept (a card click, the
        cap)."""
        kept = kept_of(payload)
        return kept is not None and self.keep_all(app_id, [kept]) == 1

    def keep_all(self, app_id: str, events: Sequence[Kept]) -> int:
        """Newly refused events, kept last in the line (after those kept before them: a
        step takes its kept events ahead of its frames, so what is kept is older than what
        a later step refuses), each once (Feishu's delivery again of one kept already, in
        the line or in flight, is as it is); over the cap the newest go. How many are
        kept."""
        if not events:
            return 0
        if self.cap <= 0:
            self.left_to_feishu(app_id, len(events))
            return 0
        with self._lock:
            new: list[Kept] = []
            for event in events:
                if event.event_id is None or self._ids[(app_id, event.event_id)] == 0:
                    self._count_in(app_id, event, 1)
                    new.append(event)
            kept = self._line(app_id, new, last=True)
            dropped = 0
            while self._count > self.cap and kept and dropped < len(new):
                self._count_in(app_id, kept.pop(), -1)
                dropped += 1
        metrics.later("kept", len(new) - dropped)
        if dropped:
            self.left_to_feishu(app_id, dropped)
        return len(events) - dropped

    def take(self, app_id: str, most: int) -> list[Kept]:
        """Up to `most` of the app's kept events, oldest first, out of the line and in
        flight: the step taking them is `done` with them, or puts them back."""
        with self._lock:
            kept = self._kept.get(app_id)
            if not kept:
                return []
            return [kept.popleft() for _ in range(min(most, len(kept)))]

    def put_back(self, app_id: str, events: Sequence[Kept]) -> None:
        """Events in flight a step could not take after all: first in the line again."""
        if events:
            with self._lock:
                self._line(app_id, events, last=False)

    def done(self, app_id: str, events: Sequence[Kept]) -> None:
        """Events in flight a step took: no longer kept."""
        if events:
            with self._lock:
                for event in events:
                    self._count_in(app_id, event, -1)

    def _line(self, app_id: str, events: Sequence[Kept], *, last: bool) -> deque[Kept]:
        kept = self._kept.setdefault(app_id, deque())
        if last:
            kept.extend(events)
        else:
            kept.extendleft(reversed(events))
        return kept

    def _count_in(self, app_id: str, event: Kept, by: int) -> None:
        self._count += by
        for counter, key in ((self._chats, event.chat), (self._ids, event.event_id)):
            if key is not None:
                counter[(app_id, key)] += by
                if counter[(app_id, key)] <= 0:
                    del counter[(app_id, key)]

    def left_to_feishu(self, app_id: str, count: int = 1) -> None:
        """Refused events of the app that could not be kept (past the cap, here or in the
        line of its gate): Feishu's delivery again, or catch-up, brings them."""
        metrics.later("dropped", count)
        self._dropped_at[app_id] = time.monotonic()
        self._left.note("%d refused event(s) of app %s not kept to take later (%d kept, "
                        "FEISHU_INGEST_LATER_CAP): Feishu delivers them again", app_id,
                        self._count, count=count)


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
    try:
        results = step(app_id, [("event", e.payload) for e in earlier] + list(frames),
                       len(earlier))
    except BaseException:
        refused.put_back(app_id, earlier)
        raise
    now = results[len(earlier):]
    refused.keep_all(app_id, [kept for (_, payload), result in zip(frames, now, strict=True)
                              if isinstance(result, TakeLater)
                              and (kept := kept_of(payload)) is not None])
    again = [e for e, result in zip(earlier, results, strict=False)
             if isinstance(result, TakeLater)]
    refused.put_back(app_id, again)  # (first: older than those still kept, and the frames)
    refused.done(app_id, [e for e, result in zip(earlier, results, strict=False)
                          if not isinstance(result, TakeLater)])
    if len(earlier) > len(again):
        metrics.later("taken", len(earlier) - len(again))
    return now
