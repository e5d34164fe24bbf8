"""What a chat's users and members change after a message came: a message withdrawn
(recalled) or edited by its sender, the bot removed from the chat (lua/withdraw.lua,
revise.lua, evict.lua; the shared steps in lua/include/drop.lua).

A running turn whose message is withdrawn, or whose chat the bot left, is stopped as /stop
stops one: its flag goes up in the same step, and a `stopping` control job lets a listener's
desk fence it after GATEWAY_CANCEL_TIMEOUT (gateway/chats/cancel.py)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Literal

from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.keys import DAY_MS, day_of, mark_field, marks_expire_at
from gateway.chats.model import TurnRef, claimed_turn, text_of
from gateway.core.model import Message

Revised = Literal["revised", "kept", "started", "answered", "older"]


@dataclass(frozen=True, slots=True)
class Change:
    """What withdrawing a message, or leaving a chat, did: `dropped` (it waited), `claimed`
    (it was the turn's, not started: the chat's next turn, `following`, is to be published),
    `idle` (nothing waits now), `stopping` (a running turn was flagged), `unknown` (nothing
    waited: not admitted yet or answered already) or `none` (no turn held the chat)."""

    how: Literal["dropped", "claimed", "idle", "stopping", "unknown", "none"]
    following: TurnRef | None = None
    dropped: int = 0
    """Messages dropped (leaving a chat)."""


def _change(chat_id: str, reply: list[str]) -> Change:
    how = reply[0]
    if how == "claimed":
        return Change("claimed", claimed_turn(chat_id, reply[1], reply[2]))
    return Change(how)  # type: ignore[arg-type]


class ChangeSteps(ChatScripts):
    def withdraw(self, chat_id: str, message_id: str) -> Change:
        """The sender withdrew the message: it is never answered (see lua/withdraw.lua).
        `chat_id`: the state id (gateway/chats/scope.py), as for every step below."""
        k = self.keys(chat_id)
        ttl_s = self.config.dedupe_ttl_s
        # (a recall does not say when its message was created: every day whose marks may
        # still be kept, by this host's clock a day either way; the script keeps to Redis's)
        today = day_of(int(time.time() * 1000)) or 0
        days = range(today - ttl_s * 1000 // DAY_MS - 2, today + 2)
        candidates = [*(k.marks(day, message_id) for day in days), k.marks(None, message_id)]
        expiries = [*(marks_expire_at(day, ttl_s) for day in days), 0]
        reply = self._scripts["withdraw"](
            keys=[*k.all, k.seen(message_id), k.done, *candidates],
            args=[message_id, chat_id, self.options("withdraw"), mark_field(message_id),
                  json.dumps(expiries)])
        return _change(chat_id, [text_of(v) for v in reply])

    def revise(self, message: Message, update_ms: int) -> Revised:
        """The sender edited the message: a waiting one takes the new version, one that
        came no earlier gets it when it comes (see lua/revise.lua)."""
        k = self.keys(self.keyspace.scope.of_message(message))
        mid = message.message_id
        day = day_of(message.create_time_ms)
        reply = self._scripts["revise"](
            keys=[*k.all, k.marks(day, mid), k.edit(mid), k.seen(mid)],
            args=[mid, update_ms, message.to_json(), self.config.dedupe_ttl_s, mark_field(mid),
                  marks_expire_at(day, self.config.dedupe_ttl_s)])
        return text_of(reply[0])  # type: ignore[return-value]

    def evict(self, chat_id: str, at_ms: int) -> Change:
        """The bot was removed from the chat at `at_ms` (Feishu's clock; 0 unknown): its
        waiting messages are dropped, its turn released or stopped (see lua/evict.lua)."""
        k = self.keys(chat_id)
        dropped, how = self._scripts["evict"](keys=[*k.all, k.left, k.done], args=[
            chat_id, at_ms, self.options("evict")])
        return Change(text_of(how), dropped=int(dropped))  # type: ignore[arg-type]
