"""A chat's last finished turns and how each ended (lua/history.lua writes them).

May import: gateway.types, gateway.state.keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from gateway.state.keys import ChatKeys
from gateway.types import Message

RETRYABLE = frozenset({"failed", "stopped", "gave-up"})
"""Outcomes whose message is kept, so that `feishu-gateway retry` can run it again."""


@dataclass(frozen=True, slots=True)
class TurnRecord:
    message_id: str
    outcome: str
    """replied, resent, silent, failed, stopped, gave-up or unreadable."""
    at_ms: int
    task_id: str
    fence: str
    attempts: int
    entry: str = ""
    """The stored message (JSON), kept only for a retryable outcome."""

    @property
    def message(self) -> Message | None:
        try:
            return Message.from_json(self.entry) if self.entry else None
        except ValueError:
            return None

    def to_dict(self) -> dict[str, Any]:
        message = self.message
        return {"message_id": self.message_id, "outcome": self.outcome, "at_ms": self.at_ms,
                "task_id": self.task_id, "fence": self.fence, "attempts": self.attempts,
                "retryable": message is not None,
                "text": message.text[:60] if message is not None else None}


def parse_record(raw: str | bytes, chat_id: str) -> TurnRecord | None:
    """One stored record of `chat_id`; None when it is not one (a newer or damaged writer).
    A record without a task id ran in its turn's own task."""
    try:
        data = json.loads(raw)
        message_id, fence = str(data["mid"]), str(data.get("fence") or "")
        task = data.get("task")
        if task is None:
            task = f"turn:{chat_id}:{message_id}:{fence}" if fence else ""
        return TurnRecord(message_id, str(data["outcome"]), int(data["at_ms"]), str(task),
                          fence, int(data.get("attempts") or 0), str(data.get("entry") or ""))
    except (ValueError, KeyError, TypeError):
        return None


def read_history(client: redis.Redis, keys: ChatKeys) -> list[TurnRecord]:
    """The chat's finished turns, newest first."""
    records = (parse_record(raw, keys.chat_id) for raw in client.lrange(keys.done, 0, -1))
    return [r for r in records if r is not None]


def find_turn(history: list[TurnRecord], message_id: str) -> TurnRecord | None:
    """The newest record of `message_id`."""
    return next((r for r in history if r.message_id == message_id), None)
