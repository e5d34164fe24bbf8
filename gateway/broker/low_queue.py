"""The low-priority queue (`gateway.release`: agent releases, reaction hooks), bounded on a
Redis broker. A task there is of use only until its deadline; past it a worker that gets it
drops it (Celery's `expires`), and on a Redis broker, whose kombu transport honours no
message TTL, the producer bounds the list itself after each publish (lua/bound.lua): the
oldest tasks go past RELEASE_QUEUE_CAP_MESSAGES; from the oldest end, the tasks whose
deadline (DEADLINE_HEADER) has passed go; and the list expires that long after the last
publish, when every task in it is past its deadline (only ever lengthened: a producer with
a longer deadline keeps its tasks). RabbitMQ enforces `expires` as the message TTL itself.
gateway/broker/release_post.py says why at length.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import redis
from kombu.transport import redis as kombu_redis

from gateway.broker.names import RELEASE_QUEUE, TaskSender
from gateway.core.scripts import source

logger = logging.getLogger(__name__)

RELEASE_QUEUE_CAP_MESSAGES = 1000
"""The most `release_agent` tasks a Redis broker's release queue keeps (about 1.3 KB each):
past it the oldest go. Tasks expire within the release fallback anyway; this bounds a burst
of evictions (a configuration change across many processes) that nothing consumes."""
DEADLINE_HEADER = "gateway_release_by_ms"
"""A low-priority task's message header: when (Unix ms on the broker's clock, a Redis broker's
TIME) the task is of no more use, its agent released in place."""


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


class LowQueue:
    """Publishes tasks to the low-priority queue, each with its deadline, and bounds the
    queue after each publish."""

    def __init__(self, sender: TaskSender, *, expires_s: float) -> None:
        self._sender = sender
        self._expires_s = expires_s
        self._bound_script: Any = None

    def send(self, name: str, kwargs: dict[str, Any], *, task_id: str | None = None) -> None:
        """Publish task `name` (raises on a broker failure)."""
        with self._sender.connection_or_acquire() as connection:
            deadline_ms = _broker_now_ms(connection.default_channel) + int(
                self._expires_s * 1000)
            self._sender.send_task(name, queue=RELEASE_QUEUE, kwargs=kwargs, task_id=task_id,
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
                    self._bound_script = client.register_script(source("gateway.broker", "bound"))
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

