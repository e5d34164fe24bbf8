"""A chat's last finished turns and how each ended (lua/include/history.lua writes them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from gateway.chats.keys import ChatKeys, turn_task_id
from gateway.core.model import Message

RETRYABLE = frozenset({"failed", "stopped", "gave-up"})
"""Outcomes whose message is kept, so that `feishu-gateway retry` can run it again."""


@dataclass(frozen=True, slots=True)
class TurnRecord:
    message_id: str
    outcome: str
    """replied, resent, silent, failed, stopped, gave-up, unreadable, greeted (a greeting
    sent), withdrawn (its sender recalled it) or removed (the bot left the chat)."""
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
    """One stored record of `chat_id` (layout in lua/include/history.lua; an older version's object
    too); None when it is not one (a newer or damaged writer)."""
    try:
        data = json.loads(raw)
        if isinstance(data, dict):  # an older version's record
            data = [data["mid"], data["outcome"], data["at_ms"], data.get("fence"),
                    data.get("attempts"), data.get("task"), data.get("entry")]
        message_id, outcome, at_ms, fence, attempts = data[:5]
        task, entry = (data[5:] + [None, None])[:2]
        fence = str(fence or "")
        if task is None:  # the turn's own task
            task = turn_task_id(chat_id, str(message_id), fence) if fence else ""
        return TurnRecord(str(message_id), str(outcome), int(at_ms), str(task), fence,
                          int(attempts or 0), str(entry or ""))
    except (ValueError, KeyError, TypeError):
        return None


def read_history(client: redis.Redis, keys: ChatKeys) -> list[TurnRecord]:
    """The chat's finished turns, newest first."""
    records = (parse_record(raw, keys.chat_id) for raw in client.lrange(keys.done, 0, -1))
    return [r for r in records if r is not None]


def find_turn(history: list[TurnRecord], message_id: str) -> TurnRecord | None:
    """The newest record of `message_id`."""
    return next((r for r in history if r.message_id == message_id), None)
