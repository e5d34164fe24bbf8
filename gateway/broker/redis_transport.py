"""kombu's Redis transport, with a connection close that closes every channel, one client
object per channel instead of a new one for every command, and a turn's delivery kept
unacknowledged in the worker's memory only.

Speed: kombu 5.7's Redis channel builds a new `redis.Redis` client (on its shared pool) for
every publish and every ack, about half a millisecond each on this machine, a third of a
publish. `Channel.conn_or_acquire` here reuses one client per channel and pool (clients are
thread-safe; the pool, and so the connections, are kombu's as before).

A turn held unacknowledged: kombu keeps a copy of every message a worker holds in Redis
(`unacked` and its index, written when it is delivered and deleted when it is acknowledged:
8 commands a message) so that a dead worker's messages come back after the visibility
timeout. A turn needs none of it: its chat's lease and the sweeper publish it again when
its worker dies, within the lease TTL (design.md). So `run_turn`'s delivery is held in the
worker's memory alone (kombu's own in-memory bookkeeping, which the prefetch limit
counts), and pushed back to its queue at once when the worker gives it back (a warm
shutdown, a reject with requeue), as kombu would from Redis. Every other task
(`post_message`, releases, reactions) keeps kombu's copy: nothing else would bring it back.

Outages:
Workaround for kombu 5.7.0 + celery 5.7.0 (no fixed release yet). When Redis dies, celery
5.7.0's consumer calls `connection.collect()` and then `connection.close()` (celery PR
#10242). kombu's `close_connection` stops at the first channel whose close raises (the
pending BRPOP read, a fanout queue_delete on a dead server), so the other channels stay
half open while `collect()` detaches the transport (`transport.client = None`); the later
`close()` closes the default channel again, restores its unacked messages through a new
pool built from `transport.client`, and the worker dies for good with
`AttributeError: 'NoneType' object has no attribute 'hostname'` (in about 5 % of Redis
outages that hit a running turn). Closing every channel while the transport is still
attached makes the later close a no-op. Only the public `close_connection` is overridden.
Enabled by `broker_transport` in celeryconfig.py for redis:// URLs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis, virtual

from gateway.broker.names import RUN_TURN

logger = logging.getLogger(__name__)


class QoS(redis.QoS):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        self._in_memory: set[str] = set()
        """The delivery tags of the turns held here, with no copy in Redis."""

    def append(self, message: Any, delivery_tag: str) -> None:
        if (message.headers or {}).get("task") == RUN_TURN:
            self._in_memory.add(delivery_tag)
            virtual.QoS.append(self, message, delivery_tag)  # type: ignore[no-untyped-call]
            return
        super().append(message, delivery_tag)  # type: ignore[no-untyped-call]

    def ack(self, delivery_tag: str) -> None:
        if delivery_tag in self._in_memory:
            self._in_memory.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]
            return
        super().ack(delivery_tag)  # type: ignore[no-untyped-call]

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        if delivery_tag in self._in_memory:
            if requeue:
                self.restore_by_tag(delivery_tag, leftmost=True)
            self._in_memory.discard(delivery_tag)
            virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]
            return
        super().reject(delivery_tag, requeue)  # type: ignore[no-untyped-call]

    def restore_by_tag(self, tag: str, client: Any = None, leftmost: bool = False) -> None:
        if tag not in self._in_memory:
            super().restore_by_tag(tag, client, leftmost)  # type: ignore[no-untyped-call]
            return
        message = self._delivered.get(tag)
        if message is not None:
            delivery = message.delivery_info
            with self.channel.conn_or_acquire(client) as redis_client:
                self.channel._do_restore_message(message._raw, delivery["exchange"],
                                                 delivery["routing_key"], redis_client,
                                                 leftmost)
        self._in_memory.discard(tag)  # (only once pushed back: a failed push may be retried)


class Channel(redis.Channel):
    QoS = QoS
    _client_for: tuple[Any, Any] | None = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        pool = self.pool  # kombu makes a new pool after a reset: then a new client too
        cached = self._client_for
        if cached is None or cached[0] is not pool:
            cached = self._client_for = (pool, self._create_client())  # type: ignore[no-untyped-call]
        yield cached[1]


class Transport(redis.Transport):
    Channel = Channel

    def close_connection(self, connection: Any) -> Any:
        # Each failed attempt has already dropped the channel whose close() raised, so the
        # next one goes on with the others; a channel can sit in both of kombu's channel
        # lists, hence the bound.
        for _ in range(2 * len(self.channels) + 1):
            try:
                return super().close_connection(connection)  # type: ignore[no-untyped-call]
            except self.connection_errors + self.channel_errors as error:
                logger.debug("closing a channel of a lost Redis connection: %r", error)
        return None
