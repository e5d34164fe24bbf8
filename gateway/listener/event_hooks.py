"""The listener's steps for the events besides a message, each a hook of its own module:
chat_changes (messages withdrawn or edited, the bot added or removed, a direct chat opened),
feedback (reactions), menu (the bot menu's clicks). The intake hands an event to the hook
that names its type; a hook's step is one Redis step on the ingest thread, as a message's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class EventHook(Protocol):
    event_types: frozenset[str]
    """The event types (header.event_type) this hook takes."""

    def handle(self, event_type: str, payload: Mapping[str, Any], app_id: str) -> str:
        """One event, judged and recorded before it is ACKed; what was done (counted as
        `gateway_changes_total`). Malformed: one line, dropped. A Redis failure propagates
        (ACK 500: Feishu delivers it again)."""
        ...


def by_type(hooks: Sequence[EventHook]) -> dict[str, EventHook]:
    """Each event type to the hook that takes it; ValueError when two hooks name one."""
    found: dict[str, EventHook] = {}
    for hook in hooks:
        for event_type in hook.event_types:
            if event_type in found:
                raise ValueError(f"two hooks take {event_type}")
            found[event_type] = hook
    return found
