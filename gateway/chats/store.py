"""`ChatStore`: the Python face of the chat scripts. One per process and Redis client.

Its steps come from one class per part of a turn's life, each over the same registered
scripts, keys and limits (`ChatScripts`): the listener's (inbox.py), a worker's (turn.py),
the sweeper's (recovery.py), a stop's (cancel_step.py), the changes users make
(changes.py), their reactions and menu clicks (feedback.py). What is defined here reads the
state for the operator, and keeps the replies that were given up.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from gateway.chats.cancel_step import CancelSteps
from gateway.chats.change_steps import ChangeSteps
from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.feedback_steps import FeedbackSteps
from gateway.chats.inbox import InboxSteps
from gateway.chats.keys import UNDELIVERED_KEY, Keyspace
from gateway.chats.recovery import RecoverySteps
from gateway.chats.stop_clicks import StopClickSteps
from gateway.chats.store_types import StoreConfig, entry_message, entry_parts, text_of
from gateway.chats.turn import TurnSteps
from gateway.core import metrics
from gateway.core.model import Message

UNDELIVERED_CAP = 1000
UNDELIVERED_TTL_S = 7 * 86_400


class ChatStore(ChatScripts):
    """The chat state's steps, in parts, each on this one script runner: a call site names
    the part it runs (`store.inbox.ingest`, `store.turns.start`), so what a process does
    to a chat reads off its code (the listener takes messages in and stops turns; a worker
    runs them)."""

    def __init__(self, client: redis.Redis, config: StoreConfig | None = None,
                 keyspace: Keyspace | None = None, *, runner: str = "") -> None:
        super().__init__(client, config, keyspace, runner=runner)
        self.inbox = self.part(InboxSteps)
        """The listener's: a message in (dedupe, admission, the next turn claimed)."""
        self.turns = self.part(TurnSteps)
        """A worker's: a turn started, kept alive, its answer kept, completed or handed
        back; whether a turn still holds its chat."""
        self.recovery = self.part(RecoverySteps)
        """The sweeper's: turns whose lease ran out, run again."""
        self.cancels = self.part(CancelSteps)
        """A stop's step."""
        self.changes = self.part(ChangeSteps)
        """Messages withdrawn or edited, the bot removed from a chat."""
        self.clicks = self.part(StopClickSteps)
        """A streaming card's Stop button."""
        self.feedback = self.part(FeedbackSteps)
        """Reactions and menu clicks noted, reactions recorded."""

    # reading, for the operator
    def pending(self, chat_id: str) -> list[tuple[str, Message | None]]:
        """Waiting messages in the order they will run (the running one included)."""
        return [(entry_parts(e)[0], entry_message(e)) for e in self.pending_entries(chat_id)]

    def pending_entries(self, chat_id: str) -> list[str]:
        """The chat's raw inbox entries in the order they will run (see lua/include/chat.lua)."""
        return [text_of(e) for e in self.redis.zrange(self.keys(chat_id).inbox, 0, -1)]

    def lease(self, chat_id: str) -> dict[str, str]:
        raw = self.redis.hgetall(self.keys(chat_id).lease)
        return {text_of(k): text_of(v) for k, v in raw.items()}

    def server_ms(self) -> int:
        seconds, micros = self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    # replies that were given up
    def record_undelivered(self, chat_id: str, message_id: str, purpose: str,
                           error: str) -> None:
        """`chat_id`: the state id of the turn (gateway/chats/scope.py): it names the bot."""
        metrics.undelivered()
        record = json.dumps({"chat_id": chat_id, "message_id": message_id, "purpose": purpose,
                             "error": error, "at_ms": int(time.time() * 1000)})
        with self.redis.pipeline() as pipe:
            pipe.lpush(UNDELIVERED_KEY, record)
            pipe.ltrim(UNDELIVERED_KEY, 0, UNDELIVERED_CAP - 1)
            pipe.expire(UNDELIVERED_KEY, UNDELIVERED_TTL_S)
            pipe.execute()

    def undelivered(self, chat_id: str | None = None) -> list[dict[str, Any]]:
        """The newest given-up replies first (of one chat, or all)."""
        records = [json.loads(r) for r in self.redis.lrange(UNDELIVERED_KEY, 0, -1)]
        return [r for r in records if chat_id is None or r.get("chat_id") == chat_id]
