"""The sweeper's steps: find the chats whose deadline passed on Redis's clock, and recover
each one: a new turn when its lease is gone, the same turn again when it waited too long in
the broker (lua/due.lua, recover.lua)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.keys import clock_key
from gateway.chats.store_types import TurnRef, claimed_turn, text_of

Recovered = tuple[Literal["claimed", "requeue"], TurnRef]
"""A turn to publish: newly claimed, or the same one again."""


def _recovered(chat_id: str, reply: Any) -> Recovered | None:
    outcome = text_of(reply[0])
    if outcome in ("claimed", "requeue"):
        return outcome, claimed_turn(chat_id, reply[1], reply[2])  # type: ignore[return-value]
    return None


class RecoverySteps(ChatScripts):
    def due_chats(self, limit: int = 500, *, claim_ms: int = 0) -> list[str]:
        """Chats whose sweeper deadline passed, by the Redis server's clock; with `claim_ms`,
        hidden from other sweepers that long (this caller recovers them)."""
        return self.due_batch(limit, claim_ms=claim_ms)[0]

    def due_batch(self, limit: int, *, claim_ms: int = 0) -> tuple[list[str], bool]:
        """`due_chats`, and whether more may be due now (a shard gave all it was asked)."""
        indexes = self.keyspace.indexes
        if len(indexes) == 1:
            due = self._scripts["due"](keys=[indexes[0], clock_key(indexes[0])],
                                       args=[limit, claim_ms])
            return [text_of(c) for c in due], len(due) >= limit
        share = -(-limit // len(indexes))  # each shard's part of the batch
        found = self._batch("due", [([index, clock_key(index)], [share, claim_ms])
                                    for index in indexes])
        return [text_of(c) for due in found for c in due], any(len(d) >= share for d in found)

    def _recover_call(self, chat_id: str, may_requeue: bool) -> tuple[list[str], list[Any]]:
        k = self.keys(chat_id)
        return [*k.all, k.done], [chat_id, "1" if may_requeue else "0", self.options("recover")]

    def recover(self, chat_id: str, *, may_requeue: bool = True) -> Recovered | None:
        """Look at a due chat: a new turn when its lease is gone, the same turn again when it
        waited too long in the broker (unless `may_requeue` is False: a broker backlog may
        still hold it), None when there is nothing to do."""
        keys, args = self._recover_call(chat_id, may_requeue)
        return _recovered(chat_id, self._scripts["recover"](keys=keys, args=args))

    def recover_many(self, chat_ids: Sequence[str], *,
                     may_requeue: bool = True) -> dict[str, Recovered]:
        """`recover` for each chat in one round trip; only the chats with a turn to publish."""
        replies = self._batch("recover", [self._recover_call(chat_id, may_requeue)
                                          for chat_id in chat_ids])
        found = {c: _recovered(c, r) for c, r in zip(chat_ids, replies, strict=True)}
        return {c: r for c, r in found.items() if r is not None}
