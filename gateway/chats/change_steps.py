"""What a chat's users and members change after a message came: a message withdrawn
(recalled) or edited by its sender, the bot removed from the chat (lua/withdraw.lua,
revise.lua, evict.lua; the shared steps in lua/include/drop.lua).

A running turn whose message is withdrawn, or whose chat the bot left, is stopped as /stop
stops one: its flag goes up in the same step, and a `stopping` control job lets a listener's
desk fence it after GATEWAY_CANCEL_TIMEOUT (gateway/chats/cancel.py)."""

from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass
from typing import Literal

from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.keys import DAY_MS, ChatKeys, day_of, mark_field, marks_expire_at
from gateway.chats.scope import TOPIC, topic_of
from gateway.chats.store_types import TurnRef, claimed_turn, text_of
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
        `chat_id`: the state id (gateway/chats/scope.py), as for every step below. A recall
        does not say its message's topic: under the order scope `thread` the chat's own
        state is asked first (its tombstone goes into the marks every topic shares), then
        each live topic (`live_topics`) until one held the message."""
        change = Change("unknown")
        for state in self._chat_and_topics(chat_id):
            change = self._withdraw(state, message_id)
            if change.how != "unknown":
                break
        return change

    def _withdraw(self, chat_id: str, message_id: str) -> Change:
        k = self.keys(chat_id)
        candidates, expiries = self._marks(k, message_id, None)  # (a recall has no date)
        reply = self._scripts["withdraw"](
            keys=[*k.all, k.seen(message_id), k.done, *candidates],
            args=[message_id, chat_id, self.options("withdraw"), mark_field(message_id),
                  expiries])
        return _change(chat_id, [text_of(v) for v in reply])

    def revise(self, message: Message, update_ms: int) -> Revised:
        """The sender edited the message: a waiting one takes the new version, one that
        came no earlier gets it when it comes (see lua/revise.lua). An edit that does not
        say its topic (under the order scope `thread`) goes to the chat's own state first,
        then, while the message waits no more there, to each live topic."""
        chat_id = self.keyspace.scope.of_message(message)
        outcome: Revised = "answered"
        for state in self._chat_and_topics(chat_id) if not message.thread_id else [chat_id]:
            outcome = self._revise(
                dataclasses.replace(message, thread_id=topic_of(state)), state, update_ms)
            if outcome != "answered":
                break
        return outcome

    def _revise(self, message: Message, chat_id: str, update_ms: int) -> Revised:
        k = self.keys(chat_id)
        mid = message.message_id
        candidates, expiries = self._marks(k, mid, day_of(message.create_time_ms))
        reply = self._scripts["revise"](
            keys=[*k.all, k.edit(mid), k.seen(mid), *candidates],
            args=[mid, update_ms, message.to_json(), self.config.dedupe_ttl_s, mark_field(mid),
                  expiries])
        return text_of(reply[0])  # type: ignore[return-value]

    def live_topics(self, chat_id: str) -> list[str]:
        """The state ids of the chat's topics with a turn or waiting messages (those its
        sweeper index holds: a state that holds a lease is in it), for what must reach every
        topic of a chat (a recall, an edit or a removal that does not say its topic, the
        operator's view). [] for a topic's own state, or where topics are no states."""
        if not self.keyspace.scope.per_thread or topic_of(chat_id):
            return []
        pattern = re.sub(r"([*?\[\]\\])", r"\\\1", chat_id) + TOPIC + "*"
        index = self.keys(chat_id).index  # (a topic's shard is its chat's)
        return sorted(text_of(m) for m, _ in self.redis.zscan_iter(index, match=pattern,
                                                                   count=1000))

    def _chat_and_topics(self, chat_id: str) -> list[str]:
        return [chat_id, *self.live_topics(chat_id)]

    def evict_all(self, chat_id: str, at_ms: int) -> list[Change]:
        """`evict` the chat's own state and each of its live topics: the chat's first."""
        return [self.evict(state, at_ms) for state in self._chat_and_topics(chat_id)]

    def _marks(self, k: ChatKeys, message_id: str, day: int | None) -> tuple[list[str], str]:
        """The dedupe marks a message's may be in (lua/include/marks.lua), and when each
        expires (JSON): its day's; or, its day unknown, every day's that may still be kept
        (by this host's clock, with two days' margin: the script keeps to Redis's) and its
        own."""
        ttl_s = self.config.dedupe_ttl_s
        if day is not None:
            return [k.marks(day, message_id)], json.dumps([marks_expire_at(day, ttl_s)])
        today = day_of(int(time.time() * 1000)) or 0
        days = range(today - ttl_s * 1000 // DAY_MS - 2, today + 2)
        return ([*(k.marks(d, message_id) for d in days), k.marks(None, message_id)],
                json.dumps([*(marks_expire_at(d, ttl_s) for d in days), 0]))

    def evict(self, chat_id: str, at_ms: int) -> Change:
        """The bot was removed from the chat at `at_ms` (Feishu's clock; 0 unknown: now): its
        messages created until then are dropped, their turn released or stopped; what was
        sent since (it is back) stays, and gets a turn (see lua/evict.lua)."""
        k = self.keys(chat_id)
        dropped, *reply = self._scripts["evict"](keys=[*k.all, k.left, k.done], args=[
            chat_id, at_ms, self.options("evict")])
        return dataclasses.replace(_change(chat_id, [text_of(v) for v in reply]),
                                   dropped=int(dropped))
