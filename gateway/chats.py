"""A chat's durable state in Redis: inbox, lease, fence and dedupe, changed only by scripts.

Every per-chat key carries the hash tag `{chat_id}`. The lease is a hash
`{fence, state, task_id, message_id, worker, since_ms}` whose TTL is short while a
turn is being published (`claimed`), long while it waits in the broker (`queued`)
and heartbeat-extended while it runs (`running`). A chat's head message stays in
its inbox until its turn completes; every step that acts for a turn checks its
fence first, so a released turn cannot reply, pop the inbox or touch a lease.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal

import redis

from gateway.types import Message

INDEX_KEY = "gw:chats"
"""Sorted set: chat_id → when (ms) the sweeper should look at the chat next."""


@dataclass(frozen=True, slots=True)
class ChatKeys:
    chat_id: str

    @property
    def prefix(self) -> str:
        return f"gw:{{{self.chat_id}}}"

    @property
    def inbox(self) -> str:
        return f"{self.prefix}:inbox"

    @property
    def lease(self) -> str:
        return f"{self.prefix}:lease"

    @property
    def fence(self) -> str:
        return f"{self.prefix}:fence"

    @property
    def cancel(self) -> str:
        return f"{self.prefix}:cancel"

    @property
    def tries(self) -> str:
        return f"{self.prefix}:tries"

    @property
    def generation(self) -> str:
        return f"{self.prefix}:gen"

    def seen(self, message_id: str) -> str:
        return f"{self.prefix}:seen:{message_id}"


@dataclass(frozen=True, slots=True)
class Dispatch:
    """A turn that must be published: the chat's head message under a new fence."""

    chat_id: str
    message_id: str
    fence: int


@dataclass(frozen=True, slots=True)
class Admission:
    outcome: Literal["dispatch", "queued", "duplicate", "full"]
    ahead: int = 0
    dispatch: Dispatch | None = None


@dataclass(frozen=True, slots=True)
class Started:
    """A turn that may run: its message, the chat's session generation, and which
    attempt at this message it is; `exhausted` when earlier attempts used them all up."""

    message: Message
    generation: int
    attempt: int
    exhausted: bool = False


# A fresh lease for the head of the inbox; shared by the scripts below.
_CLAIM = """
local function claim(lease, inbox, fence, index, tries, chat, now, ttl)
  local head = redis.call('LINDEX', inbox, 0)
  if not head then
    redis.call('DEL', lease, tries)
    redis.call('ZREM', index, chat)
    return nil
  end
  local id = cjson.decode(head)['message_id']
  local tried = redis.call('HGET', tries, id)
  redis.call('DEL', tries)  -- only the head's tries are kept
  if tried then redis.call('HSET', tries, id, tried) end
  local f = redis.call('INCR', fence)
  redis.call('DEL', lease)
  redis.call('HSET', lease, 'fence', f, 'state', 'claimed', 'since_ms', now, 'message_id', id)
  redis.call('PEXPIRE', lease, ttl)
  redis.call('ZADD', index, now + ttl, chat)
  return {f, head}
end
"""

_INGEST = _CLAIM + """
-- KEYS: seen inbox lease fence index tries
-- ARGV: msg_json dedupe_ttl_s cap now_ms claim_ttl_ms chat
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[2]) then return {'duplicate'} end
local n = redis.call('LLEN', KEYS[2])
if n >= tonumber(ARGV[3]) then return {'full', n} end
redis.call('RPUSH', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('ZADD', KEYS[5], 'NX', tonumber(ARGV[4]) + tonumber(ARGV[5]), ARGV[6])
  return {'queued', n}
end
local c = claim(KEYS[3], KEYS[2], KEYS[4], KEYS[5], KEYS[6], ARGV[6], tonumber(ARGV[4]),
                tonumber(ARGV[5]))
return {'dispatch', n, c[1], c[2]}
"""

_CONFIRM = """
-- KEYS: lease index   ARGV: fence task_id queued_ttl_ms now_ms chat
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return 0 end
if redis.call('HGET', KEYS[1], 'state') ~= 'claimed' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'queued', 'task_id', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], tonumber(ARGV[4]) + tonumber(ARGV[3]), ARGV[5])
return 1
"""

_START = """
-- KEYS: lease inbox index gen tries
-- ARGV: fence task_id worker running_ttl_ms now_ms chat max_attempts
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return {'stale'} end
if redis.call('HGET', KEYS[1], 'state') == 'running' then return {'stale'} end
local head = redis.call('LINDEX', KEYS[2], 0)
if not head then return {'stale'} end
redis.call('HSET', KEYS[1], 'state', 'running', 'task_id', ARGV[2], 'worker', ARGV[3],
           'since_ms', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[3], tonumber(ARGV[5]) + tonumber(ARGV[4]), ARGV[6])
local attempt = redis.call('HINCRBY', KEYS[5], cjson.decode(head)['message_id'], 1)
local gen = tonumber(redis.call('GET', KEYS[4]) or '0')
if attempt > tonumber(ARGV[7]) then return {'poison', head, gen, attempt - 1} end
return {'run', head, gen, attempt}
"""

_HEARTBEAT = """
-- KEYS: lease cancel   ARGV: fence ttl_ms      → 0 lost, 1 held, 2 held but cancelled
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if redis.call('GET', KEYS[2]) == ARGV[1] then return 2 end
return 1
"""

_COMPLETE = _CLAIM + """
-- KEYS: lease inbox fence index tries   ARGV: fence message_id now_ms claim_ttl_ms chat
if redis.call('HGET', KEYS[1], 'fence') ~= ARGV[1] then return {'stale'} end
local head = redis.call('LINDEX', KEYS[2], 0)
if head and cjson.decode(head)['message_id'] == ARGV[2] then redis.call('LPOP', KEYS[2]) end
local c = claim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[5], tonumber(ARGV[3]),
                tonumber(ARGV[4]))
if not c then return {'idle'} end
return {'dispatch', c[1], c[2]}
"""

_RECOVER = _CLAIM + """
-- KEYS: lease inbox fence index tries cancel   ARGV: now_ms claim_ttl_ms chat
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('ZADD', KEYS[4], tonumber(ARGV[1]) + ttl, ARGV[3])
  return {'held'}
end
local f = redis.call('GET', KEYS[3])
if f and redis.call('GET', KEYS[6]) == f then
  redis.call('LPOP', KEYS[2])  -- the head was /stopped: its lease ran out, it is done
end
local c = claim(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[3], tonumber(ARGV[1]),
                tonumber(ARGV[2]))
if not c then return {'empty'} end
return {'dispatch', c[1], c[2]}
"""


_BEAT_STATES: tuple[Literal["lost", "held", "cancelled"], ...] = ("lost", "held", "cancelled")


def now_ms() -> int:
    return int(time.time() * 1000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _dispatch(chat_id: str, fence: Any, head: Any) -> Dispatch:
    return Dispatch(chat_id, Message.from_json(head).message_id, int(fence))


class ChatStore:
    """The scripts that move a chat's state; one instance per process and Redis client."""

    def __init__(self, client: redis.Redis, *, claim_ttl_ms: int, queued_ttl_ms: int,
                 running_ttl_ms: int, dedupe_ttl_s: int, inbox_cap: int,
                 max_attempts: int = 3) -> None:
        self.redis = client
        self.claim_ttl_ms = claim_ttl_ms
        self.queued_ttl_ms = queued_ttl_ms
        self.running_ttl_ms = running_ttl_ms
        self.dedupe_ttl_s = dedupe_ttl_s
        self.inbox_cap = inbox_cap
        self.max_attempts = max_attempts
        self._ingest = client.register_script(_INGEST)
        self._confirm = client.register_script(_CONFIRM)
        self._start = client.register_script(_START)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._complete = client.register_script(_COMPLETE)
        self._recover = client.register_script(_RECOVER)

    def ingest(self, message: Message) -> Admission:
        """Dedupe + append to the inbox + take the lease if free, in one atomic step."""
        k = ChatKeys(message.chat_id)
        reply = self._ingest(
            keys=[k.seen(message.message_id), k.inbox, k.lease, k.fence, INDEX_KEY, k.tries],
            args=[message.to_json(), self.dedupe_ttl_s, self.inbox_cap, now_ms(),
                  self.claim_ttl_ms, message.chat_id],
        )
        outcome = _text(reply[0])
        if outcome == "dispatch":
            return Admission("dispatch", int(reply[1]),
                             _dispatch(message.chat_id, reply[2], reply[3]))
        if outcome in ("queued", "full"):
            return Admission(outcome, int(reply[1]))  # type: ignore[arg-type]
        return Admission("duplicate")

    def confirm(self, turn: Dispatch, task_id: str) -> bool:
        """After a publish: give the queued turn the long lease while it waits for a worker."""
        k = ChatKeys(turn.chat_id)
        return bool(self._confirm(keys=[k.lease, INDEX_KEY], args=[
            turn.fence, task_id, self.queued_ttl_ms, now_ms(), turn.chat_id]))

    def start(self, turn: Dispatch, task_id: str, worker: str) -> Started | None:
        """Mark the turn running; None when its fence is stale or it already ran."""
        k = ChatKeys(turn.chat_id)
        reply = self._start(keys=[k.lease, k.inbox, INDEX_KEY, k.generation, k.tries], args=[
            turn.fence, task_id, worker, self.running_ttl_ms, now_ms(), turn.chat_id,
            self.max_attempts])
        outcome = _text(reply[0])
        if outcome == "stale":
            return None
        return Started(Message.from_json(reply[1]), int(reply[2]), int(reply[3]),
                       exhausted=outcome == "poison")

    def heartbeat(self, turn: Dispatch) -> Literal["held", "lost", "cancelled"]:
        """Extend a running turn's lease and report whether it may go on."""
        k = ChatKeys(turn.chat_id)
        state = int(self._heartbeat(keys=[k.lease, k.cancel],
                                    args=[turn.fence, self.running_ttl_ms]))
        return _BEAT_STATES[state]

    def may_reply(self, turn: Dispatch) -> bool:
        """True while this turn holds the chat's lease and was not asked to stop."""
        k = ChatKeys(turn.chat_id)
        with self.redis.pipeline() as pipe:
            pipe.hget(k.lease, "fence")
            pipe.get(k.cancel)
            fence, cancel = pipe.execute()
        return fence is not None and int(fence) == turn.fence and (
            cancel is None or int(cancel) != turn.fence)

    def holds(self, turn: Dispatch) -> bool:
        """True while this turn's fence is the chat's current one."""
        fence = self.redis.hget(ChatKeys(turn.chat_id).lease, "fence")
        return fence is not None and int(fence) == turn.fence

    def request_cancel(self, turn: Dispatch, ttl_ms: int) -> None:
        """Raise the cooperative flag for this fence; the turn's heartbeat sees it."""
        self.redis.set(ChatKeys(turn.chat_id).cancel, turn.fence, px=ttl_ms)

    def new_session(self, chat_id: str) -> int:
        """Start a fresh conversation: agents of older generations are never used again."""
        return int(self.redis.incr(ChatKeys(chat_id).generation))

    def mark_seen(self, chat_id: str, message_id: str) -> bool:
        """Dedupe for commands, which bypass the inbox; False when seen before."""
        return bool(self.redis.set(ChatKeys(chat_id).seen(message_id), 1, nx=True,
                                   ex=self.dedupe_ttl_s))

    def complete(self, turn: Dispatch) -> Dispatch | None | Literal[False]:
        """Pop the finished head; return the next turn to publish, None when idle,
        False when the turn's fence was stale (nothing was touched)."""
        k = ChatKeys(turn.chat_id)
        reply = self._complete(keys=[k.lease, k.inbox, k.fence, INDEX_KEY, k.tries], args=[
            turn.fence, turn.message_id, now_ms(), self.claim_ttl_ms, turn.chat_id])
        outcome = _text(reply[0])
        if outcome == "dispatch":
            return _dispatch(turn.chat_id, reply[1], reply[2])
        return None if outcome == "idle" else False

    def recover(self, chat_id: str) -> Dispatch | None:
        """Re-dispatch a chat whose inbox is not empty and whose lease is gone; a head
        whose turn was /stopped (flag still up for its fence) is dropped first."""
        k = ChatKeys(chat_id)
        reply = self._recover(keys=[k.lease, k.inbox, k.fence, INDEX_KEY, k.tries, k.cancel],
                              args=[now_ms(), self.claim_ttl_ms, chat_id])
        return _dispatch(chat_id, reply[1], reply[2]) if _text(reply[0]) == "dispatch" else None

    def due_chats(self, limit: int = 500) -> list[str]:
        """Chats the sweeper should look at now (lease deadline passed)."""
        return [_text(c) for c in self.redis.zrangebyscore(INDEX_KEY, "-inf", now_ms(), 0, limit)]

    def active_chats(self, limit: int) -> list[str]:
        """Chats with pending messages, soonest sweeper deadline first."""
        return [_text(c) for c in self.redis.zrange(INDEX_KEY, 0, limit - 1)]

    def pending(self, chat_id: str) -> list[Message]:
        return [Message.from_json(raw) for raw in self.redis.lrange(ChatKeys(chat_id).inbox, 0, -1)]

    def pending_count(self, chat_id: str) -> int:
        return int(self.redis.llen(ChatKeys(chat_id).inbox))

    def lease(self, chat_id: str) -> dict[str, str]:
        raw = self.redis.hgetall(ChatKeys(chat_id).lease)
        return {_text(k): _text(v) for k, v in raw.items()}
