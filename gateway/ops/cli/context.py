"""What the commands share: what the error boundary learns of a run, and the operator's
context, each part built on first use: settings, Redis, the chat store, the Celery app and
the gateway's runtime (a read of Redis never imports Celery)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gateway.core.errors import Refused
from gateway.core.lazy import cached_property
from gateway.core.settings import Settings

if TYPE_CHECKING:
    import redis

    from gateway.chats.store import ChatStore
    from gateway.runtime import Runtime

WORKERS_TIMEOUT_S = 1.0
"""How long `status` and `retry` wait for Celery workers to answer."""


@dataclass
class Run:
    """What the boundary learns of a run while click parses it (the `cli` group fills it)."""

    command: str | None = None
    debug: bool = False


@dataclass
class Ops:
    settings: Settings

    @cached_property
    def redis(self) -> redis.Redis:
        from gateway.core.redis_client import redis_client

        s = self.settings
        return redis_client(s.redis_url, s.redis_timeout_s, retries=0, cluster=s.redis_cluster)

    @cached_property
    def store(self) -> ChatStore:
        from gateway.chats.store import ChatStore
        from gateway.chats.store_settings import keyspace, store_config

        return ChatStore(self.redis, store_config(self.settings), keyspace(self.settings))

    @cached_property
    def app(self) -> Any:
        """The Celery app, with publishing bounded in time (a dead broker fails fast)."""
        from gateway.broker.publisher import bound_publishing
        from tasks import app

        bound_publishing(app, 2 * self.settings.redis_timeout_s)
        return app

    @cached_property
    def runtime(self) -> Runtime:
        from gateway.runtime import Runtime

        return Runtime(self.settings, self.app)

    def require_chat(self, chat_id: str) -> None:
        """Refuse a chat id Redis knows nothing of (most likely a typo)."""
        from gateway.chats.admin import known

        if not known(self.store, chat_id):
            raise Refused(f"chat {chat_id} is unknown: Redis has no message, turn or history "
                          "of it (a typo? `feishu-gateway chats` lists the active ones)")

    def workers(self, timeout_s: float = WORKERS_TIMEOUT_S) -> dict[str, dict[str, Any]]:
        """Every Celery worker that answered within `timeout_s`: its stats (pool, ...)."""
        stats = self.app.control.inspect(timeout=timeout_s).stats()
        return dict(stats or {})

    def queue_lengths(self) -> dict[str, int | None]:
        """Messages waiting in each of the gateway's Celery queues (None: unreadable)."""
        from kombu.exceptions import ChannelError

        from gateway.broker.names import ALL_QUEUES

        lengths: dict[str, int | None] = {}
        with self.app.connection_for_write() as connection:
            for queue in ALL_QUEUES:
                try:
                    declared = connection.default_channel.queue_declare(queue=queue,
                                                                        passive=True)
                    lengths[queue] = int(declared.message_count)
                except ChannelError as error:  # Redis transport: an empty queue has no key
                    lengths[queue] = 0 if "NOT_FOUND" in str(error) or getattr(
                        error, "code", None) == 404 else None
        return lengths

    def require_workers(self) -> None:
        if not self.workers():
            raise Refused(f"no Celery worker answered within {WORKERS_TIMEOUT_S:.0f}s, so "
                          "nothing would run it; nothing was changed (start one: `celery -A "
                          "tasks worker`, or pass --anyway)")
