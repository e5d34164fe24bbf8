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
  (gateway/broker/low_queue.py, lua/bound.lua): the oldest tasks go past
  `RELEASE_QUEUE_CAP_MESSAGES`; from the oldest end, the tasks whose deadline (the
  `DEADLINE_HEADER` each carries) has passed go; and the list expires `expires_s` after
  the last publish, when every task in it is past its deadline. A task dropped there is a
  task skipped: its agent is released in place by the lane's fallback, as when no worker
  runs it.
"""

from __future__ import annotations

import logging
from dataclasses import asdict

import redis

from gateway.agents.release import Parcel
from gateway.broker.low_queue import RELEASE_QUEUE_CAP_MESSAGES, LowQueue
from gateway.broker.names import RELEASE_AGENT, TaskSender

__all__ = ["RELEASE_QUEUE_CAP_MESSAGES", "CeleryPost", "tokens_key"]

logger = logging.getLogger(__name__)

TOKENS_TTL_S = 600
"""A handed-back token nobody reads (its owner died, its agent with it) expires."""
TAKE_AT_MOST = 100


def tokens_key(owner: str) -> str:
    return f"gw:release:{owner}"


class CeleryPost:
    def __init__(self, sender: TaskSender, client: redis.Redis, *, expires_s: float) -> None:
        """`expires_s`: a task not run by then is of no use (the owner released the agent in
        place meanwhile): a worker that gets it drops it, and the broker does not keep it
        much longer (see the module)."""
        self._redis = client
        self._queue = LowQueue(sender, expires_s=expires_s)

    def send(self, parcel: Parcel) -> None:
        self._queue.send(RELEASE_AGENT, asdict(parcel),
                         task_id=f"release:{parcel.session}:{parcel.token}")

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
