"""Every Celery setting of the gateway, taken from the one settings object."""

from urllib.parse import urlsplit

from kombu.entity import Exchange, Queue

from gateway.core.errors import SettingsError
from gateway.core.names import (
    ALL_QUEUES,
    ON_REACTION,
    POST_MESSAGE,
    RELEASE_AGENT,
    RELEASE_QUEUE,
    RUN_TURN,
    TURNS_QUEUE,
)
from gateway.core.settings import load_settings

try:
    _settings = load_settings()
except SettingsError as _error:
    raise SystemExit(f"feishu-gateway: {_error}") from None

broker_url = _settings.broker_url  # CELERY_BROKER_URL (Redis or RabbitMQ), else REDIS_URL
if urlsplit(broker_url).scheme == "redis":
    # kombu 5.7.0 + celery 5.7.0: a Redis outage can kill a worker for good; see the module
    broker_transport = "gateway.core.redis_transport:Transport"
broker_connection_retry_on_startup = True
broker_connection_max_retries = None  # a worker waits for Redis forever, never gives up
# Recovery never waits on this (leases and the sweeper do); it only bounds how long an
# unacked message of a dead worker sits before Redis hands it out again, fenced off then.
broker_transport_options = {"visibility_timeout": 3600} if urlsplit(
    broker_url).scheme.startswith(("redis", "unix")) else {}

# each queue its own direct exchange and key: a turn never lands in the release queue, nor a
# release among the turns
task_queues = tuple(Queue(name, Exchange(name, type="direct"), routing_key=name)
                    for name in ALL_QUEUES)
task_default_queue = TURNS_QUEUE
task_routes = {RUN_TURN: {"queue": TURNS_QUEUE}, POST_MESSAGE: {"queue": TURNS_QUEUE},
               RELEASE_AGENT: {"queue": RELEASE_QUEUE}, ON_REACTION: {"queue": RELEASE_QUEUE}}

# A turn that ignores /stop and never returns is killed here (prefork); its lease then
# expires and the chat goes on (the message counts one attempt, see GATEWAY_MAX_ATTEMPTS).
task_time_limit = _settings.turn_time_limit_s
task_acks_late = True
task_reject_on_worker_lost = True
worker_prefetch_multiplier = 1
task_ignore_result = True
task_serializer = "json"
accept_content = ["json"]

worker_concurrency = _settings.worker_concurrency
# Task events cost about a fifth of a worker's CPU (bench/): off unless Flower is watching
# (GATEWAY_TASK_EVENTS=true, or Flower's own `enable_events` broadcast turns them on).
worker_send_task_events = _settings.task_events
task_send_sent_event = _settings.task_events
