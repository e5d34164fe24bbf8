"""Where a pipelined command goes on a Redis Cluster.

redis-py's cluster pipeline asks a node (COMMAND GETKEYS, one blocking round trip) where
each queued EVALSHA or stream command goes before it sends the pipeline; naming the node
from the key's slot (known locally) skips that. On one Redis there is nothing to name.
"""

from __future__ import annotations

from typing import Any

from redis.cluster import RedisCluster


def route(client: Any, key: str) -> dict[str, Any]:
    """`execute_command` options that send a command about `key` straight to its node."""
    if isinstance(client, RedisCluster):
        return {"target_nodes": client.get_node_from_key(key)}  # type: ignore[no-untyped-call]
    return {}
