"""What Celery is configured with, computed from the settings (celeryconfig.py sets each
name as Celery reads it): the broker and its transport, the queues and routes, acks,
limits and events."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from kombu.entity import Exchange, Queue

from gateway.broker.names import (
    ALL_QUEUES,
    ON_REACTION,
    POST_MESSAGE,
    RELEASE_AGENT,
    RELEASE_QUEUE,
    RUN_TURN,
    TURNS_QUEUE,
)
from gateway.core.settings import Settings


def celery_config(settings: Settings) -> dict[str, Any]:
    """Every Celery setting, by the name Celery reads."""
    config: dict[str, Any] = {}
    broker_url = config["broker_url"] = settings.broker_url  # CELERY_BROKER_URL, else REDIS_URL
    if urlsplit(broker_url).scheme == "redis":
        # kombu 5.7.0 + celery 5.7.0: a Redis outage can kill a worker for good; see the module
        config["broker_transport"] = "gateway.broker.redis_transport:Transport"
    config["broker_connection_retry_on_startup"] = True
    config["broker_connection_max_retries"] = None  # a worker waits for Redis forever
    # Recovery never waits on this (leases and the sweeper do); it only bounds how long an
    # unacked message of a dead worker sits before Redis hands it out again, fenced off then.
    config["broker_transport_options"] = {"visibility_timeout": 3600} if urlsplit(
        broker_url).scheme.startswith(("redis", "unix")) else {}
    # each queue its own direct exchange and key: a turn never lands in the release queue,
    # nor a release among the turns
    config["task_queues"] = tuple(Queue(name, Exchange(name, type="direct"), routing_key=name)
                                  for name in ALL_QUEUES)
    config["task_default_queue"] = TURNS_QUEUE
    config["task_routes"] = {RUN_TURN: {"queue": TURNS_QUEUE},
                             POST_MESSAGE: {"queue": TURNS_QUEUE},
                             RELEASE_AGENT: {"queue": RELEASE_QUEUE},
                             ON_REACTION: {"queue": RELEASE_QUEUE}}
    # A turn that ignores /stop and never returns is killed here (prefork); its lease then
    # expires and the chat goes on (the message counts one attempt, GATEWAY_MAX_ATTEMPTS).
    config["task_time_limit"] = settings.turn_time_limit_s
    config.update(task_acks_late=True, task_reject_on_worker_lost=True,
                  worker_prefetch_multiplier=1, task_ignore_result=True,
                  task_serializer="json", accept_content=["json"])
    config["worker_concurrency"] = settings.worker_concurrency
    # Task events cost about a fifth of a worker's CPU (bench/): off unless Flower is
    # watching (GATEWAY_TASK_EVENTS=true, or Flower's own `enable_events` broadcast).
    config["worker_send_task_events"] = settings.task_events
    config["task_send_sent_event"] = settings.task_events
    return config
