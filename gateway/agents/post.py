"""How release parcels travel: the `release_agent` task on the release queue, and a short
Redis list per owning process for the tokens that a task run elsewhere hands back.

The release queue is bounded. A task is of use only until its `expires_s` has passed: by
then the owner released the agent in place (the lane's fallback), and a worker that gets
the task drops it (Celery's `expires`). Nothing consuming the queue (the release worker
down, workers started with `-Q gateway.turns` only) must not leave the tasks in the broker
for good:

- RabbitMQ: Celery turns `expires` into the message's TTL (`expiration`), which RabbitMQ
  enforces; nothing more is needed.
- Redis: kombu's Redis transport keeps a queue as a plain list (LPUSH to publish, BRPOP to
  consume) and honours no message TTL nor `x-max-length`/`x-message-ttl` (AMQP queue
  arguments it ignores); its only queue argument, `x-expires`, drops the whole list after
  a spell without publishes or polls, so it bounds nothing while agents keep being let go
  (and a changed queue argument makes RabbitMQ refuse the queue's declaration). `expires`
  alone leaves every task in the list until some worker takes it. So after each publish
  the producer bounds the list itself, on the connection it published on, in one script
  (`_BOUND_LUA`): the oldest tasks go past `RELEASE_QUEUE_CAP_MESSAGES`; from the oldest
  end, the tasks whose deadline (the `DEADLINE_HEADER` each carries) has passed go; and
  the list expires `expires_s` after the last publish, when every task in it is past its
  deadline. A task dropped there is a task skipped: its agent is released in place by the
  lane's fallback, as when no worker runs it.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict
from typing import Any

import redis
from kombu.transport import redis as kombu_redis

from gateway.agents.release import Parcel
from gateway.core.names import RELEASE_AGENT, RELEASE_QUEUE, TaskSender

logger = logging.getLogger(__name__)

TOKENS_TTL_S = 600
"""A handed-back token nobody reads (its owner died, its agent with it) expires."""
TAKE_AT_MOST = 100

RELEASE_QUEUE_CAP_MESSAGES = 1000
"""The most `release_agent` tasks a Redis broker's release queue keeps (about 1.3 KB each):
past it the oldest go. Tasks expire within the release fallback anyway; this bounds a burst
of evictions (a configuration change across many processes) that nothing consumes."""
DEADLINE_HEADER = "gateway_release_by_ms"
"""A `release_agent` message header: when (Unix ms on the broker's clock, a Redis broker's
TIME) the task is of no more use, its agent released in place."""

_BOUND_LUA = """
local t = redis.call('TIME')
local queue, cap = KEYS[1], tonumber(ARGV[2])
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local dropped = math.max(0, redis.call('LLEN', queue) - cap)
if dropped > 0 then
  redis.call('LTRIM', queue, 0, cap - 1)
end
while true do
  local oldest = redis.call('LINDEX', queue, -1)
  if not oldest then break end
  local ok, message = pcall(cjson.decode, oldest)
  local by = ok and type(message) == 'table' and type(message.headers) == 'table'
    and tonumber(message.headers[ARGV[3]])
  if not by or by > now then break end
  redis.call('RPOP', queue)
  dropped = dropped + 1
end
local ttl = redis.call('PTTL', queue)
if ttl ~= -2 and ttl < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', queue, ARGV[4])
end
return dropped
"""
"""KEYS[1]: the release queue's list (newest first: kombu publishes with LPUSH, consumers
BRPOP the oldest); ARGV: (unused), the cap (messages), the deadline header, the list's
expiry (ms; only ever lengthened, so a producer with a longer `expires_s` keeps its tasks).
Returns how many tasks it dropped. The tasks carry no priority, so they all sit in the
queue's own list."""


def _broker_now_ms(channel: Any) -> int:
    """The broker's clock (a Redis broker's TIME: the bound is judged on it), else this
    host's; the host's too while Redis fails (the publish itself then fails anyway)."""
    if isinstance(channel, kombu_redis.Channel):
        try:
            with channel.conn_or_acquire() as client:
                seconds, micros = client.time()
                return int(seconds) * 1000 + int(micros) // 1000
        except redis.RedisError:
            pass
    return int(time.time() * 1000)


def tokens_key(owner: str) -> str:
    return f"gw:release:{owner}"


class CeleryPost:
    def __init__(self, sender: TaskSender, client: redis.Redis, *, expires_s: float) -> None:
        """`expires_s`: a task not run by then is of no use (the owner released the agent in
        place meanwhile): a worker that gets it drops it, and the broker does not keep it
        much longer (see the module)."""
        self._sender = sender
        self._redis = client
        self._expires_s = expires_s
        self._bound_script: Any = None

    def send(self, parcel: Parcel) -> None:
        with self._sender.connection_or_acquire() as connection:
            deadline_ms = _broker_now_ms(connection.default_channel) + int(
                self._expires_s * 1000)
            self._sender.send_task(RELEASE_AGENT, queue=RELEASE_QUEUE, kwargs=asdict(parcel),
                                   task_id=f"release:{parcel.session}:{parcel.token}",
                                   expires=self._expires_s, connection=connection,
                                   headers={DEADLINE_HEADER: deadline_ms})
            self._bound(connection.default_channel)

    def _bound(self, channel: Any) -> int:
        """After a publish on a Redis broker: the release queue within its bounds (the
        module says how); how many tasks were dropped. Other brokers: nothing to do."""
        if not isinstance(channel, kombu_redis.Channel):
            return 0
        try:
            with channel.conn_or_acquire() as client:
                if self._bound_script is None:
                    self._bound_script = client.register_script(_BOUND_LUA)
                dropped = int(self._bound_script(
                    keys=[RELEASE_QUEUE], client=client,
                    args=[0, RELEASE_QUEUE_CAP_MESSAGES,
                          DEADLINE_HEADER, max(1, math.ceil(self._expires_s * 1000))]))
        except redis.RedisError as error:  # the task is out; the next publish bounds it
            logger.warning("release queue not bounded after a publish: %s", error)
            return 0
        if dropped:
            logger.debug("release queue: %d tasks nobody took dropped (their agents are "
                         "released in place)", dropped)
        return dropped

    def hand_back(self, owner: str, token: str) -> None:
        """What a `release_agent` task run in another process does with the token."""
        key = tokens_key(owner)
        with self._redis.pipeline(transaction=False) as pipe:
            pipe.rpush(key, token)
            pipe.expire(key, TOKENS_TTL_S)
            pipe.execute()

    def take(self, owner: str) -> list[str]:
        tokens = self._redis.lpop(tokens_key(owner), TAKE_AT_MOST)
        return [t.decode() if isinstance(t, bytes) else str(t) for t in tokens or []]
