"""The listener's steps: a message enters its chat's inbox (or is recorded as a command, a
"not queued" or a "late" notice), a refused person is told (lua/ingest.lua, refuse.lua).
A claimed turn's lease already says it is queued: publishing it takes no second step."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from gateway.chats.chat_scripts import ChatScripts
from gateway.chats.keys import day_of, mark_field, marks_expire_at
from gateway.chats.store_types import Admission, NotDurable, claimed_turn, text_of
from gateway.core.model import OUTBOUND, OUTBOUND_CARD, Message
from gateway.core.redis_client import refused_outright

_NOT_BEGUN = redis.TimeoutError("not begun: Redis failed an event before it in its batch")
"""The answer of the events after one Redis failed in a batch: not tried (each taken later,
after it, so none comes before an earlier message of its chat)."""


def _not_begun(before: object, deadline: float | None) -> redis.RedisError | None:
    """Why an event's step of a batch is not begun (None: it is): Redis failed the one
    before it (unless Redis refused that one outright: the rest go on), so it waits behind
    it and none comes first; or the batch's deadline (time.monotonic()) passed."""
    if isinstance(before, redis.RedisError) and not refused_outright(before):
        return before if isinstance(before, (redis.ConnectionError, redis.TimeoutError)) \
            else _NOT_BEGUN
    if deadline is not None and time.monotonic() > deadline:
        return redis.TimeoutError("not begun before its batch's deadline")
    return None


def active_member(app_id: str, chat_type: str, chat_id: str) -> str:
    """A chat's member of the index of recently active chats: `<app_id>|<chat_type>|<chat_id>`
    (chat_type `p2p` or `group`; gateway/chats/active.py reads it back)."""
    return f"{app_id}|{'p2p' if chat_type == 'p2p' else 'group'}|{chat_id}"


def _admission(chat_id: str, reply: Any) -> Admission:
    outcome = text_of(reply[0])
    if outcome == "claimed":
        return Admission("claimed", int(reply[1]), claimed_turn(chat_id, reply[2], reply[3]))
    if outcome in ("queued", "full"):
        return Admission(outcome, int(reply[1]))  # type: ignore[arg-type]
    if outcome == "late":
        return Admission("late", late_ms=int(reply[1]))
    return Admission(outcome)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Entry:
    """A message to ingest, with its command (parsed), its chat's busy mode and its app."""

    message: Message
    command: str = ""
    busy: str = "queue"
    app_id: str = ""


class InboxSteps(ChatScripts):
    def ingest(self, message: Message, command: str = "", *, busy: str = "queue",
               app_id: str = "") -> Admission:
        """Dedupe + admit (or record a command / a "not queued" or "late" notice) in one
        atomic step; with durable ACKs on, also wait until that step is durable. `busy`: the
        chat's busy mode (queue, merge, interrupt), written into its state for the workers.
        `app_id`: the app it came to, marked with its chat in the index of recently active
        chats that catch-up reads (`active_member`). A message read back after an outage
        (`message.caught_up`) that is a command is late: never run."""
        c = self.config
        chat, keys, args = self._ingest_call(Entry(message, command, busy, app_id))
        if c.durable_ack == "none":
            return _admission(chat, self._scripts["ingest"](keys=keys, args=args))
        with self.redis.pipeline(transaction=False) as pipe:
            # WAIT / WAITAOF count the writes of their own connection: pipeline them
            self._scripts["ingest"](keys=keys, args=args, client=pipe)
            if c.durable_ack == "aof":
                pipe.execute_command("WAITAOF", 1, 0, c.durable_ack_timeout_ms)  # type: ignore[no-untyped-call]
            else:
                pipe.execute_command("WAIT", 1, c.durable_ack_timeout_ms)  # type: ignore[no-untyped-call]
            reply, durable = pipe.execute()
        admission = _admission(chat, reply)
        self._check_durable(durable, admission)
        return admission

    def _ingest_call(self, entry: Entry) -> tuple[str, list[str], list[Any]]:
        """(chat state id, keys, args) of the ingest script for `entry`."""
        message = entry.message
        chat = self.keyspace.scope.of_message(message)  # the state it enters (scope.py)
        k = self.keys(chat)
        day = day_of(message.create_time_ms)
        keys = [*k.all, k.marks(day, message.message_id), k.done, k.edit(message.message_id),
                k.left, k.active(entry.app_id), k.seen(message.message_id), k.late_noted]
        own: dict[str, Any] = {}
        if entry.busy != "queue":
            own["busy"] = entry.busy
        if message.caught_up:
            own["caught_up"] = True
        if message.message_type in (OUTBOUND, OUTBOUND_CARD):  # (the bot's own: outbound.py)
            own["own"] = True
        args: list[Any] = [message.message_id, chat, message.create_time_ms,
                           entry.command, message.to_json(), self.options("ingest", **own),
                           active_member(entry.app_id, message.chat_type, message.chat_id),
                           mark_field(message.message_id),
                           marks_expire_at(day, self.config.dedupe_ttl_s)]
        return chat, keys, args

    def ingest_many(self, entries: Sequence[Entry], *,
                    deadline: float | None = None) -> list[Admission | Exception]:
        """`ingest` for each entry, in order, in one round trip (group commit: the events
        that arrived while the listener's previous step ran); each gets its admission, or
        the error its own step met (a Redis failure: a RedisError for each). With durable
        ACKs on (each waits for its WAIT) or on a cluster, one step each. Those not begun by
        `deadline` (time.monotonic()), or after Redis failed one (a Redis that cannot take
        it now; one it refused outright apart), get an error: never is a later one taken
        while an earlier one waits."""
        if self.config.durable_ack != "none" or self.keyspace.shards or len(entries) == 1:
            out: list[Admission | Exception] = []
            for e in entries:
                held = _not_begun(out[-1], deadline) if out else None
                if held is not None:
                    out.append(held)
                    continue
                try:
                    out.append(self.ingest(e.message, e.command, busy=e.busy, app_id=e.app_id))
                except (redis.RedisError, NotDurable) as error:
                    out.append(error)
            return out
        script = self._scripts["ingest"]
        try:
            calls = [self._ingest_call(e) for e in entries]  # (the first reads Redis's clock)
            with self.redis.pipeline(transaction=False) as pipe:
                for _, keys, args in calls:  # (not script(client=pipe): a SCRIPT EXISTS a time)
                    pipe.evalsha(script.sha, len(keys), *keys, *args)
                replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as error:
            return [error for _ in entries]
        out = []
        loaded: object = None  # (the last step loaded again: its answer, or its error)
        for (chat, keys, args), reply in zip(calls, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError):  # Redis restarted: load it
                held = _not_begun(loaded, deadline)
                if held is not None:
                    reply = held
                else:
                    try:
                        reply = script(keys=keys, args=args)
                    except redis.RedisError as error:
                        reply = error
                loaded = reply
            out.append(reply if isinstance(reply, Exception) else _admission(chat, reply))
        return out

    def _check_durable(self, answer: Any, admission: Admission) -> None:
        timeout = self.config.durable_ack_timeout_ms
        if self.config.durable_ack == "aof":
            if int(answer[0]) < 1:
                raise NotDurable(f"WAITAOF: not fsynced to the AOF within {timeout} ms",
                                 admission)
        elif int(answer) < 1:
            raise NotDurable(f"WAIT: no replica acknowledged within {timeout} ms", admission)

    def refuse(self, message: Message, reason: str, every_s: int) -> bool:
        """A person's refused direct message: a 'refused' notice for the desk, unless the
        chat's user was told within `every_s`. True when a notice was recorded."""
        chat = self.keyspace.scope.of_message(message)
        k = self.keys(chat)
        return bool(self._scripts["refuse"](
            keys=[k.told, k.control],
            args=[every_s, chat, message.to_json(), self.config.control_cap,
                  reason]))
