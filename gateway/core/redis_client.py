"""A Redis client that fails within bounded time instead of hanging a thread on a dead
server, standalone or Redis Cluster."""

from __future__ import annotations

from typing import cast

import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException
from redis.retry import Retry

from gateway.core.errors import GatewayError
from gateway.core.logs import masked_url


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


PASSING = (redis.exceptions.OutOfMemoryError, redis.exceptions.BusyLoadingError,
           redis.exceptions.NoScriptError, redis.exceptions.ReadOnlyError,
           redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError,
           redis.exceptions.MasterDownError, redis.exceptions.AuthenticationError,
           redis.exceptions.NoPermissionError)
"""Error replies of a Redis that will take the command in a moment (or once it is set
right: its memory, a failover, its loading, its password)."""


def refused_outright(error: redis.RedisError) -> bool:
    """Whether Redis refused this very command, so that another try would meet the same
    (a key of the wrong type, a script's own error), unlike a lost connection, a timeout or
    a PASSING reply (BUSY with a script included)."""
    return isinstance(error, redis.ResponseError) and not isinstance(error, PASSING) \
        and not str(error).startswith("BUSY")
