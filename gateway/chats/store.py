"""`ChatStore`: the Python face of the chat scripts. One per process and Redis client."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, overload

import redis

from gateway.chats.keys import (
    KEYSPACE_KEY,
    UNDELIVERED_KEY,
    ChatKeys,
    Keyspace,
    clock_key,
)
from gateway.chats.routing import route
from gateway.chats.scripts import register
from gateway.core import metrics
from gateway.core.errors import RetryableError, SettingsError
from gateway.core.model import Message

HeartbeatState = Literal["lost", "held", "stopped"]
_BEATS: tuple[HeartbeatState, ...] = ("lost", "held", "stopped")
UNDELIVERED_CAP = 1000
UNDELIVERED_TTL_S = 7 * 86_400


@dataclass(frozen=True, slots=True)
class StoreConfig:
    """The lease TTLs and caps the scripts enforce (see Settings for what each means)."""

    claim_ttl_ms: int = 15_000
    queued_ttl_ms: int = 900_000
    running_ttl_ms: int = 30_000
    requeue_cap_ms: int = 240_000
    dedupe_ttl_s: int = 172_800
    inbox_cap: int = 100
    max_attempts: int = 3
    session_ttl_ms: int = 30 * 86_400_000
    control_cap: int = 100_000
    durable_ack: Literal["none", "aof", "replica"] = "none"
    """Wait for the admission to be on disk (WAITAOF) or on a replica (WAIT) before ACK."""
    durable_ack_timeout_ms: int = 1000
    history_cap: int = 10
    """A chat's finished turns kept for `feishu-gateway chat` and `retry` (0: none)."""
    history_ttl_ms: int = 86_400_000
    """How long a chat's history is kept after its last turn ended (the retry retention)."""
    late_after_ms: int = 0
    """A message whose create_time is older than this on Redis's clock is late (0: never)."""
    late_events: Literal["note", "drop"] = "note"
    """A late message's chat is told so (`note`), or it is only logged (`drop`)."""
    ran_ttl_ms: int = 3_720_000
    """How long a chat's marks of which process started each session's last turn live after
    its last mark: as long as an idle agent can stay cached (GATEWAY_AGENT_IDLE_TTL_S and a
    sweep)."""
    ran_cap: int = 1000
    """The sessions of one chat whose marks are kept (past it, the oldest go)."""


@dataclass(frozen=True, slots=True)
class TurnRef:
    """A turn to publish: the chat's head message under its fence."""

    chat_id: str
    message_id: str
    fence: int
    preview: str = field(default="", compare=False)
    """The start of the message's text, for Flower's view of the task (when known)."""


@dataclass(frozen=True, slots=True)
class Admission:
    outcome: Literal["dispatch", "queued", "duplicate", "full", "command", "late"]
    waiting: int = 0
    dispatch: TurnRef | None = None
    late_ms: int = 0
    """How late a late message was, on Redis's clock."""


@dataclass(frozen=True, slots=True)
class Answer:
    """What a turn says, kept before it is sent: `reply`, `stream` (its first chunk closes
    the streaming card), `failure` or `gave-up`."""

    kind: str
    chunks: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Started:
    """A turn that may run. `message` is None when its stored entry cannot be read;
    `exhausted` when earlier attempts used up GATEWAY_MAX_ATTEMPTS; `answer` when an earlier
    attempt already produced one (resend it, do not ask the agent again)."""

    message_id: str
    message: Message | None
    generation: int
    attempt: int
    exhausted: bool = False
    answer: Answer | None = None


class NotDurable(RetryableError):
    """The admission was not confirmed durable in time: do not ACK it (Feishu redelivers).
    `admission` is what the step did meanwhile (a turn to publish, maybe)."""

    def __init__(self, detail: str, admission: Admission) -> None:
        super().__init__(detail)
        self.admission = admission


@dataclass(frozen=True, slots=True)
class CancelStep:
    """What the cancel script did (see lua/cancel.lua)."""

    how: Literal["again", "debounced", "nothing", "not-started", "running"]
    fence: int | None
    task_id: str
    waiting: int
    following: TurnRef | None = None
    recorded_how: str = ""


def text_of(value: Any) -> str:
    """A Redis reply as str (bytes decoded)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def entry_parts(entry: str) -> tuple[str, str]:
    """An inbox entry `<arrival>|<message_id>|<json>` → (message_id, json)."""
    _, message_id, raw = entry.split("|", 2)
    return message_id, raw


def entry_message(entry: str) -> Message | None:
    try:
        return Message.from_json(entry_parts(entry)[1])
    except (ValueError, TypeError, KeyError):
        return None


PREVIEW_CHARS = 40


def dispatch_of(chat_id: str, fence: Any, entry: Any) -> TurnRef:
    message_id, raw = entry_parts(text_of(entry))
    try:
        text = json.loads(raw).get("text")
    except (ValueError, AttributeError):
        text = None
    preview = text[:PREVIEW_CHARS] if isinstance(text, str) else ""
    return TurnRef(chat_id, message_id, int(fence), preview)


Recovered = tuple[Literal["dispatch", "requeue"], TurnRef]
Completed = TurnRef | tuple[TurnRef, Started] | None | Literal[False]


def _recovered(chat_id: str, reply: Any) -> Recovered | None:
    outcome = text_of(reply[0])
    if outcome in ("dispatch", "requeue"):
        return outcome, dispatch_of(chat_id, reply[1], reply[2])  # type: ignore[return-value]
    return None


def _started(reply: Sequence[Any]) -> Started:
    """start.lua's (and chat.lua's `begin`) reply: outcome, entry, gen, attempt, answer."""
    outcome, entry = text_of(reply[0]), text_of(reply[1])
    answer = None
    if reply[4] is not None and reply[5] is not None:
        answer = Answer(text_of(reply[4]), tuple(json.loads(text_of(reply[5]))))
    return Started(entry_parts(entry)[0], entry_message(entry), int(reply[2]), int(reply[3]),
                   exhausted=outcome == "poison", answer=answer)


def _admission(chat_id: str, reply: Any) -> Admission:
    outcome = text_of(reply[0])
    if outcome == "dispatch":
        return Admission("dispatch", int(reply[1]), dispatch_of(chat_id, reply[2], reply[3]))
    if outcome in ("queued", "full"):
        return Admission(outcome, int(reply[1]))  # type: ignore[arg-type]
    if outcome == "late":
        return Admission("late", late_ms=int(reply[1]))
    return Admission(outcome)  # type: ignore[arg-type]


class ChatStore:
    def __init__(self, client: redis.Redis, config: StoreConfig | None = None,
                 keyspace: Keyspace | None = None, *, runner: str = "") -> None:
        """`client` is a `redis.Redis`, or a `redis.RedisCluster` with a sharded `keyspace`.
        `runner`: this process's id, marked on each turn it starts (`mark_runner`; workers
        whose agents keep a session in memory only)."""
        self.redis = client
        self.config = config or StoreConfig()
        self.runner = runner
        self.keyspace = keyspace or Keyspace()
        self._scripts = register(client)

    def keys(self, chat_id: str) -> ChatKeys:
        return self.keyspace.chat(chat_id)

    def _run(self, name: str, chat_id: str, *args: Any) -> Any:
        return self._scripts[name](keys=self.keys(chat_id).all, args=list(args))

    def run_script(self, name: str, chat_id: str, args: Sequence[Any],
                   more_keys: Sequence[str] = ()) -> Any:
        """Script `name` on the chat's keys (then `more_keys`), for the state's other
        modules (gateway/chats/admin.py)."""
        return self._scripts[name](keys=[*self.keys(chat_id).all, *more_keys], args=list(args))

    def _batch(self, name: str, calls: Sequence[tuple[Sequence[Any], Sequence[Any]]]) -> list[Any]:
        """Run script `name` once per (keys, args) in one round trip (one per master on a
        cluster). A cluster pipeline cannot load a script first: a master that lost it (a
        restart, a failover) answers NOSCRIPT, and that call runs again on its own (it did
        nothing the first time)."""
        script = self._scripts[name]
        with self.redis.pipeline(transaction=False) as pipe:
            for keys, args in calls:
                if self.keyspace.shards:  # redis-py blocks its evalsha() in a cluster pipeline
                    pipe.execute_command("EVALSHA", script.sha, len(keys), *keys, *args,  # type: ignore[no-untyped-call]
                                         **route(self.redis, keys[0]))
                else:
                    script(keys=keys, args=args, client=pipe)
            replies = pipe.execute(raise_on_error=False)
        out = []
        for (keys, args), reply in zip(calls, replies, strict=True):
            if isinstance(reply, redis.exceptions.NoScriptError):
                reply = script(keys=keys, args=args)
            elif isinstance(reply, Exception):
                raise reply
            out.append(reply)
        return out

    def claim_keyspace(self) -> None:
        """Record the key layout in Redis (`gw:keyspace`: the shard count, 0 for one Redis)
        the first time; refuse a process whose layout differs, since every chat's keys would
        be looked for elsewhere (two leases for one chat, dedupe marks not found)."""
        mine = str(self.keyspace.shards)
        self.redis.set(KEYSPACE_KEY, mine, nx=True)
        recorded = text_of(self.redis.get(KEYSPACE_KEY) or mine)
        if recorded != mine:
            raise SettingsError(
                f"this Redis keeps the chat state for GATEWAY_STATE_SHARDS={recorded} (0: one "
                f"Redis, not a cluster) but this process has {mine}: use the same layout "
                "everywhere, or drain and move the state first (docs/scaling.md)")

    # the listener's step
    def ingest(self, message: Message, command: str = "") -> Admission:
        """Dedupe + admit (or record a command / a "not queued" or "late" notice) in one
        atomic step; with durable ACKs on, also wait until that step is durable."""
        c = self.config
        k = self.keys(message.chat_id)
        keys = [*k.all, k.seen(message.message_id), k.done]
        args: list[Any] = [message.message_id, message.create_time_ms, message.to_json(),
                           c.dedupe_ttl_s, c.inbox_cap, c.claim_ttl_ms, message.chat_id, command,
                           c.control_cap, c.session_ttl_ms, c.history_cap, c.history_ttl_ms,
                           c.late_after_ms, c.late_events]
        if c.durable_ack == "none":
            reply = self._scripts["ingest"](keys=keys, args=args)
        else:  # WAIT / WAITAOF count the writes of their own connection: pipeline them
            with self.redis.pipeline(transaction=False) as pipe:
                self._scripts["ingest"](keys=keys, args=args, client=pipe)
                if c.durable_ack == "aof":
                    pipe.execute_command("WAITAOF", 1, 0, c.durable_ack_timeout_ms)  # type: ignore[no-untyped-call]
                else:
                    pipe.execute_command("WAIT", 1, c.durable_ack_timeout_ms)  # type: ignore[no-untyped-call]
                reply, durable = pipe.execute()
            admission = _admission(message.chat_id, reply)
            self._check_durable(durable, admission)
            return admission
        return _admission(message.chat_id, reply)

    def _check_durable(self, answer: Any, admission: Admission) -> None:
        timeout = self.config.durable_ack_timeout_ms
        if self.config.durable_ack == "aof":
            if int(answer[0]) < 1:
                raise NotDurable(f"WAITAOF: not fsynced to the AOF within {timeout} ms",
                                 admission)
        elif int(answer) < 1:
            raise NotDurable(f"WAIT: no replica acknowledged within {timeout} ms", admission)

    def confirm(self, turn: TurnRef, task_id: str) -> bool:
        """After a publish: the turn waits in the broker; requeued if not picked up in time."""
        c = self.config
        return bool(self._run("confirm", turn.chat_id, turn.fence, task_id, c.queued_ttl_ms,
                              c.running_ttl_ms, turn.chat_id))

    def confirm_many(self, confirmed: Sequence[tuple[TurnRef, str]]) -> None:
        """`confirm` for many published turns in one round trip."""
        c = self.config
        self._batch("confirm", [(self.keys(turn.chat_id).all, [
            turn.fence, task_id, c.queued_ttl_ms, c.running_ttl_ms, turn.chat_id])
            for turn, task_id in confirmed])

    # a worker's steps
    def start(self, turn: TurnRef, task_id: str, worker: str) -> Started | None:
        """Mark the turn running; None when its fence is stale or it already started. On
        a first attempt it runs the oldest waiting message (`Started.message_id`), which is
        not `turn.message_id` when an older one arrived after the claim."""
        c = self.config
        reply = self._run("start", turn.chat_id, turn.fence, task_id, worker,
                          c.running_ttl_ms, turn.chat_id, c.max_attempts, c.session_ttl_ms)
        return None if text_of(reply[0]) == "stale" else _started(reply)

    def mark_runner(self, chat_id: str, session: str) -> str:
        """This process starts a turn of the chat's `session` (an agent cache key): the mark
        moves here. Returns the process that started the session's previous turn ('' when
        none is remembered)."""
        c = self.config
        return text_of(self._scripts["mark"](keys=[self.keys(chat_id).runners],
                                             args=[session, self.runner, c.ran_ttl_ms,
                                                   c.ran_cap]))

    def heartbeat(self, turns: Sequence[TurnRef],
                  extend: Sequence[bool] | None = None) -> list[HeartbeatState]:
        """Report which running turns may go on (one round trip); extend the leases of those
        marked in `extend` (all of them by default)."""
        beat = self._scripts["heartbeat"]
        flags = ["1" if e else "0" for e in (extend or [True] * len(turns))]
        ttl = self.config.running_ttl_ms
        if len(turns) == 1:  # the usual case (prefork): no pipeline, no SCRIPT EXISTS
            turn = turns[0]
            return [_BEATS[int(beat(keys=self.keys(turn.chat_id).all,
                                    args=[turn.fence, ttl, flags[0], turn.chat_id]))]]
        states = self._batch("heartbeat", [
            (self.keys(turn.chat_id).all, [turn.fence, ttl, flag, turn.chat_id])
            for turn, flag in zip(turns, flags, strict=True)])
        return [_BEATS[int(state)] for state in states]

    def keep_answer(self, turn: TurnRef, answer: Answer) -> bool:
        """Store the answer before sending it; False when the turn may not reply."""
        return bool(self._run("answer", turn.chat_id, turn.fence, turn.message_id, answer.kind,
                              json.dumps(list(answer.chunks), ensure_ascii=False)))

    def hand_back(self, turn: TurnRef) -> TurnRef | None:
        """Give back a running turn whose reply this worker could not send before it shuts
        down: the chat is claimed again at once (a new fence) and returned, for the caller
        to publish; its re-run resends the kept answer. None when the turn no longer held
        the chat or nothing waits any more (it was stopped meanwhile)."""
        c = self.config
        k = self.keys(turn.chat_id)
        reply = self._scripts["handback"](keys=[*k.all, k.done], args=[
            turn.fence, c.claim_ttl_ms, turn.chat_id, c.history_cap, c.history_ttl_ms])
        if text_of(reply[0]) != "dispatch":
            return None
        return dispatch_of(turn.chat_id, reply[1], reply[2])

    @overload
    def complete(self, turn: TurnRef, run_next: None = None, *,
                 outcome: str = "") -> TurnRef | None | Literal[False]:
        ...

    @overload
    def complete(self, turn: TurnRef, run_next: tuple[str, str] | None, *,
                 outcome: str = "") -> Completed: ...

    def complete(self, turn: TurnRef, run_next: tuple[str, str] | None = None, *,
                 outcome: str = "") -> Completed:
        """Drop the finished message and claim the next one. Returns the next turn to
        publish, None when idle, False when the fence was stale (nothing was touched); with
        `run_next` = (task_id, worker) the next turn is started too, for the caller to run
        now: then (its TurnRef, its Started). `outcome` (replied, failed, stopped, ...) goes
        into the chat's history ('' records nothing)."""
        c = self.config
        go_on = run_next or ("", "")
        k = self.keys(turn.chat_id)
        reply = self._scripts["complete"](keys=[*k.all, k.done], args=[
            turn.fence, c.claim_ttl_ms, turn.chat_id, "1" if run_next else "0", go_on[0],
            go_on[1], c.running_ttl_ms, c.max_attempts, c.session_ttl_ms, outcome,
            c.history_cap, c.history_ttl_ms])
        outcome = text_of(reply[0])
        if outcome == "dispatch":
            return dispatch_of(turn.chat_id, reply[1], reply[2])
        if outcome == "started":
            return dispatch_of(turn.chat_id, reply[1], reply[3]), _started(reply[2:])
        return None if outcome == "idle" else False

    def holds(self, turn: TurnRef) -> bool:
        """True while this turn's fence is the chat's current one."""
        fence = self.redis.hget(self.keys(turn.chat_id).lease, "fence")
        return fence is not None and int(fence) == turn.fence

    def holds_many(self, turns: Sequence[TurnRef]) -> list[bool]:
        """`holds` for many turns in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for turn in turns:
                pipe.hget(self.keys(turn.chat_id).lease, "fence")
            fences = pipe.execute()
        return [f is not None and int(f) == t.fence for f, t in zip(fences, turns, strict=True)]

    def may_reply(self, turn: TurnRef) -> bool:
        """True while this turn holds the chat and was not asked to stop (one round trip)."""
        k = self.keys(turn.chat_id)
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(k.lease, "fence")
            pipe.hget(k.stop, "fence")
            fence, stopped = pipe.execute()
        return fence is not None and int(fence) == turn.fence and (
            stopped is None or text_of(stopped) != str(turn.fence))

    # the sweeper's steps
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

    def _recover_args(self, chat_id: str, may_requeue: bool) -> list[Any]:
        c = self.config
        return [c.claim_ttl_ms, chat_id, c.running_ttl_ms, c.requeue_cap_ms, c.queued_ttl_ms,
                "1" if may_requeue else "0", c.history_cap, c.history_ttl_ms]

    def recover(self, chat_id: str, *, may_requeue: bool = True) -> Recovered | None:
        """Look at a due chat: a new turn when its lease is gone, the same turn again when it
        waited too long in the broker (unless `may_requeue` is False: a broker backlog may
        still hold it), None when there is nothing to do."""
        return _recovered(chat_id, self.run_script("recover", chat_id,
                                                   self._recover_args(chat_id, may_requeue),
                                                   [self.keys(chat_id).done]))

    def recover_many(self, chat_ids: Sequence[str], *,
                     may_requeue: bool = True) -> dict[str, Recovered]:
        """`recover` for each chat in one round trip; only the chats with a turn to publish."""
        replies = self._batch("recover", [
            ([*self.keys(chat_id).all, self.keys(chat_id).done],
             self._recover_args(chat_id, may_requeue))
            for chat_id in chat_ids])
        found = {c: _recovered(c, r) for c, r in zip(chat_ids, replies, strict=True)}
        return {c: r for c, r in found.items() if r is not None}

    # cancelling
    def cancel(self, chat_id: str, command_id: str, *, debounce_ms: int, flag_ttl_ms: int,
               target_fence: int | str = "*", new_session: bool = False,
               only_queued: bool = False) -> CancelStep:
        """The state change of a stop (see lua/cancel.lua). `target_fence`: the turn the
        command is about ("" none held the chat when it was sent, "*" whatever holds it);
        `only_queued`: a running turn is left alone ('nothing')."""
        c = self.config
        k = self.keys(chat_id)
        keys = [*k.all, k.command(command_id), k.done]
        reply = [text_of(v) for v in self._scripts["cancel"](keys=keys, args=[
            command_id, debounce_ms, flag_ttl_ms, c.claim_ttl_ms, chat_id, target_fence,
            "1" if new_session else "0", c.session_ttl_ms, c.history_cap, c.history_ttl_ms,
            "1" if only_queued else "0"])]
        how = reply[0]
        if how == "again":
            return CancelStep("again", int(reply[2]) if reply[2] else None, reply[3],
                              int(reply[4]), recorded_how=reply[1])
        following = dispatch_of(chat_id, reply[4], reply[5]) if len(reply) > 5 else None
        return CancelStep(how, int(reply[1]) if reply[1] else None,  # type: ignore[arg-type]
                          reply[2], int(reply[3]), following)

    # reading, for the operator
    def active_chats(self, limit: int) -> list[str]:
        """Chats with pending messages, soonest sweeper deadline first."""
        with self.redis.pipeline(transaction=False) as pipe:
            for index in self.keyspace.indexes:
                pipe.execute_command("ZRANGE", index, 0, limit - 1, "WITHSCORES",  # type: ignore[no-untyped-call]
                                     withscores=True, **route(self.redis, index))
            found = [(score, text_of(c)) for chats in pipe.execute() for c, score in chats]
        return [chat for _, chat in sorted(found)[:limit]]

    def pending(self, chat_id: str) -> list[tuple[str, Message | None]]:
        """Waiting messages in the order they will run (the running one included)."""
        return [(entry_parts(e)[0], entry_message(e)) for e in self.pending_entries(chat_id)]

    def pending_entries(self, chat_id: str) -> list[str]:
        """The chat's raw inbox entries in the order they will run (see lua/chat.lua)."""
        return [text_of(e) for e in self.redis.zrange(self.keys(chat_id).inbox, 0, -1)]

    def pending_count(self, chat_id: str) -> int:
        return int(self.redis.zcard(self.keys(chat_id).inbox))

    def lease(self, chat_id: str) -> dict[str, str]:
        raw = self.redis.hgetall(self.keys(chat_id).lease)
        return {text_of(k): text_of(v) for k, v in raw.items()}

    def server_ms(self) -> int:
        seconds, micros = self.redis.time()
        return int(seconds) * 1000 + int(micros) // 1000

    def refuse(self, message: Message, reason: str, every_s: int) -> bool:
        """A person's refused direct message: a 'refused' notice for the desk, unless the
        chat's user was told within `every_s`. True when a notice was recorded."""
        k = self.keys(message.chat_id)
        return bool(self._scripts["refuse"](
            keys=[k.told, k.control],
            args=[every_s, message.chat_id, message.to_json(), self.config.control_cap,
                  reason]))

    # replies that were given up
    def record_undelivered(self, chat_id: str, message_id: str, purpose: str,
                           error: str) -> None:
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
