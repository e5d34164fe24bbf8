"""Redis clients and the chat store's layout and limits, from the settings: what every
process builds first (the CLI's reads need nothing more). May import: gateway.core.settings,
gateway.chats."""

from __future__ import annotations

from typing import cast

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from gateway.chats.keys import Keyspace
from gateway.chats.store import StoreConfig
from gateway.core.errors import GatewayError
from gateway.core.logs import masked_url
from gateway.core.settings import Settings


def redis_client(url: str, timeout_s: float = 5.0, *, retries: int = 1,
                 cluster: bool = False) -> redis.Redis:
    """A client that fails within bounded time instead of hanging a thread on a dead server:
    at most (1 + retries) attempts of `timeout_s` each. With `cluster`, a Redis Cluster
    client found from the node `url` names (it follows MOVED and failovers itself)."""
    if cluster:
        try:
            client = RedisCluster.from_url(url, socket_timeout=timeout_s,
                                           socket_connect_timeout=timeout_s,
                                           retry=Retry(NoBackoff(), retries))
        except (RedisClusterException, redis.RedisError) as error:  # it connects at once
            raise GatewayError(f"cannot reach the Redis Cluster at {masked_url(url)}: "
                               f"{error}") from None
        return cast(redis.Redis, client)  # the same command interface, for the store
    return redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                health_check_interval=30, retry=Retry(NoBackoff(), retries))


def keyspace(s: Settings) -> Keyspace:
    return Keyspace(s.state_shards if s.redis_cluster else 0)


def store_config(s: Settings) -> StoreConfig:
    return StoreConfig(
        claim_ttl_ms=s.claim_ttl_ms, queued_ttl_ms=s.queued_ttl_ms, running_ttl_ms=s.lease_ttl_ms,
        requeue_cap_ms=s.requeue_cap_ms, dedupe_ttl_s=s.dedupe_ttl_s, inbox_cap=s.inbox_cap,
        max_attempts=s.max_attempts, durable_ack=s.durable_ack,
        durable_ack_timeout_ms=s.durable_ack_timeout_ms, history_cap=s.history_turns,
        history_ttl_ms=s.retry_retention_s * 1000, late_after_ms=int(s.late_after_s * 1000),
        late_events=s.late_events,
        # the mark (set as a turn starts) outlives any agent that ran it: the longest turn,
        # the idle TTL, a sweep round and a minute
        ran_ttl_ms=int((s.turn_time_limit_s + s.agent_idle_ttl_s
                        + min(60.0, s.agent_idle_ttl_s / 2) + 60) * 1000))
