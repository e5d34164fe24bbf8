"""Publishing turns to Celery. Never called on the SDK's event loop."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import redis
from kombu.exceptions import ChannelError, KombuError

from gateway.broker.low_queue import LowQueue
from gateway.broker.names import ON_REACTION, RUN_TURN, TURNS_QUEUE, TaskSender
from gateway.chats.keys import turn_task_id
from gateway.chats.store_types import TurnRef
from gateway.core.model import Reaction

logger = logging.getLogger(__name__)

BROKER_ERRORS = (KombuError, redis.RedisError, OSError)
REACTION_EXPIRES_S = 3600
"""An `on_reaction` task nobody took within this is dropped by the worker that gets it."""


def bound_publishing(app: Any, timeout_s: float) -> None:
    """For processes that only publish (listener, CLI): a publish to an unreachable broker
    fails within a few seconds (the outbox and the sweeper heal it) instead of blocking for
    good. Workers keep kombu's defaults: a socket timeout there makes late acks fail
    silently during a long Redis pause and the worker stops taking work."""
    conf = app.conf
    if urlsplit(str(conf.broker_url)).scheme.startswith(("amqp", "pyamqp")):
        bounds = {"read_timeout": timeout_s, "write_timeout": timeout_s}
    else:
        bounds = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s}
    conf.broker_transport_options = {**conf.broker_transport_options, **bounds}
    conf.broker_connection_timeout = timeout_s
    conf.task_publish_retry_policy = {"max_retries": 1, "interval_start": 0.2,
                                      "interval_step": 0.5, "interval_max": 1.0}


class Publisher:
    def __init__(self, sender: TaskSender) -> None:
        self._sender = sender
        self._low = LowQueue(sender, expires_s=REACTION_EXPIRES_S)

    def _send_task(self, turn: TurnRef, producer: Any = None) -> str:
        """Publish `run_turn` (on `producer`, if given); its task id. Raises on a broker
        failure."""
        task_id = turn_task_id(turn.chat_id, turn.message_id, turn.fence)
        self._sender.send_task(
            RUN_TURN, task_id=task_id, queue=TURNS_QUEUE, producer=producer,
            kwargs={"chat_id": turn.chat_id, "message_id": turn.message_id,
                    "fence": turn.fence, "sent_ms": int(time.time() * 1000)},
            # what Flower shows; given, Celery skips its saferepr (a fifth of a publish)
            argsrepr="()", kwargsrepr=repr({"chat_id": turn.chat_id,
                                            "message_id": turn.message_id,
                                            "fence": turn.fence, "text": turn.preview}),
        )
        return task_id

    def _send(self, turn: TurnRef) -> bool:
        """Publish `run_turn`; False (logged) when the broker failed."""
        try:
            self._send_task(turn)
            return True
        except BROKER_ERRORS as error:
            logger.error("publish of %s failed (%s); the sweeper will publish it again",
                         turn_task_id(turn.chat_id, turn.message_id, turn.fence), error)
            return False

    def _send_together(self, turns: Sequence[TurnRef]) -> int | None:
        """Publish every turn in one round trip (kombu's publish batch: one pipeline on
        Redis): how many; None when the broker cannot batch or the batch failed (logged). A
        failed batch may have delivered some of its tasks: publishing them again is
        harmless."""
        acquire = getattr(self._sender, "producer_or_acquire", None)
        if acquire is None:
            return None
        try:
            with acquire() as producer:
                if not getattr(producer, "supports_batch_publish", False):
                    return None
                with producer.batch(max_size=len(turns)):
                    for turn in turns:
                        self._send_task(turn, producer)
                    return len(turns)
        except BROKER_ERRORS as error:
            logger.warning("publishing %d turns together failed (%s); publishing them one "
                           "by one", len(turns), error)
            return None

    def publish_many(self, turns: Sequence[TurnRef]) -> int:
        """`publish` for many turns: their tasks in one round trip where the broker allows
        (else one by one); how many were sent."""
        sent = self._send_together(turns) if len(turns) > 1 else None
        return sent if sent is not None else sum(self._send(turn) for turn in turns)

    def backlog(self) -> int | None:
        """Turns waiting in the broker's queue now; None when the broker cannot tell."""
        try:
            with self._sender.connection_or_acquire() as connection:
                declared = connection.default_channel.queue_declare(queue=TURNS_QUEUE,
                                                                    passive=True)
                return int(declared.message_count)
        except ChannelError as error:
            if getattr(error, "code", None) == 404 or "NOT_FOUND" in str(error):
                return 0  # kombu's Redis transport: an empty queue has no key
            logger.warning("cannot read the broker's backlog: %s", error)
            return None
        except BROKER_ERRORS as error:
            logger.warning("cannot read the broker's backlog: %s", error)
            return None

    def publish_reaction(self, reaction: Reaction) -> None:
        """Send the `on_reaction` task (the bounded low-priority queue, of use for
        REACTION_EXPIRES_S); raises on a broker failure."""
        self._low.send(ON_REACTION, {"reaction": reaction.to_dict()})

    def publish(self, turn: TurnRef) -> bool:
        """Publish `run_turn` (its claim wrote the lease as queued already).

        A failed publish is only logged: no worker starts the turn by its claim TTL, and the
        sweeper publishes it again, so nothing is lost. Publishing the same turn twice is
        harmless: the first copy a worker starts wins, the other is skipped as stale."""
        return self._send(turn)
