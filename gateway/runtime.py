"""The composition root: builds a process's collaborators from the settings, once."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import redis

from gateway.agents import load_factory
from gateway.agents.cache import AgentCache
from gateway.cancel import Canceller
from gateway.chats import ChatStore
from gateway.dispatch import Publisher, TaskSender
from gateway.feishu.outbound import Outbound
from gateway.locks import LockRegistry
from gateway.runner import TurnRunner
from gateway.settings import Settings


def redis_client(url: str) -> redis.Redis:
    """A client that fails fast instead of hanging a thread on a dead server."""
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5,
                                health_check_interval=30)


@dataclass
class Runtime:
    settings: Settings
    sender: TaskSender

    @cached_property
    def redis(self) -> redis.Redis:
        return redis_client(self.settings.redis_url)

    @cached_property
    def store(self) -> ChatStore:
        s = self.settings
        return ChatStore(self.redis, claim_ttl_ms=s.claim_ttl_ms, queued_ttl_ms=s.queued_ttl_ms,
                         running_ttl_ms=s.lease_ttl_ms, dedupe_ttl_s=s.dedupe_ttl_s,
                         inbox_cap=s.inbox_cap, max_attempts=s.max_attempts)

    @cached_property
    def publisher(self) -> Publisher:
        return Publisher(self.sender, self.store)

    @cached_property
    def outbound(self) -> Outbound:
        return Outbound(self.settings)

    @cached_property
    def runner(self) -> TurnRunner:
        return TurnRunner(
            store=self.store,
            locks=LockRegistry(self.settings.lock_registry_cap),
            agents=AgentCache(load_factory(self.settings.agent), self.settings.agent_cache_cap),
            outbound=self.outbound,
            publisher=self.publisher,
            poll_s=min(self.settings.cancel_poll_s, self.settings.lease_ttl_s / 3),
            reply_chunk_chars=self.settings.reply_chunk_chars,
        )

    def revoke(self, task_id: str, terminate: bool) -> None:
        """Celery's revoke broadcast; terminate kills the pool process (prefork only)."""
        self.sender.control.revoke(task_id, terminate=terminate, signal="SIGKILL")

    @cached_property
    def canceller(self) -> Canceller:
        s = self.settings
        return Canceller(self.store, self.publisher, self.revoke, timeout_s=s.cancel_timeout_s,
                         lease_ttl_ms=s.lease_ttl_ms, terminate=s.cancel_terminate)
