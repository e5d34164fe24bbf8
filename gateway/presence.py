"""Live records of running processes in one Redis hash, for `feishu-gateway status`.

Field = who (a process, or a process and an app), value = JSON with the time it was taken
(`at`). Writers refresh their fields every few seconds (and the hash's TTL, so the hash
of a fleet that is gone goes too); a reader skips (and deletes) fields older than
`stale_s`, left by a process that died or stopped.

May import: nothing of the gateway.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

CONNECTIONS_KEY = "gw:connections"
"""Each listener's long connections, by `process|app_id` (gateway/feishu/listener.py)."""
CONNECTIONS_STALE_S = 30.0


def publish(client: redis.Redis, key: str, field: str, record: dict[str, Any], *,
            ttl_s: int = 3600) -> None:
    with client.pipeline(transaction=False) as pipe:
        pipe.hset(key, field, json.dumps({**record, "at": time.time()}, separators=(",", ":")))
        pipe.expire(key, ttl_s)
        pipe.execute()


def read_live(client: redis.Redis, key: str, stale_s: float) -> dict[str, dict[str, Any]]:
    """Every fresh record by field; stale and unreadable fields are dropped."""
    now = time.time()
    live, dead = {}, []
    for raw_field, raw in client.hgetall(key).items():
        field = raw_field.decode() if isinstance(raw_field, bytes) else str(raw_field)
        try:
            record = json.loads(raw)
            fresh = now - float(record["at"]) < stale_s
        except (ValueError, KeyError, TypeError):
            fresh = False
        if fresh:
            live[field] = record
        else:
            dead.append(field)
    if dead:
        client.hdel(key, *dead)
    return live


def read_connections(client: redis.Redis) -> dict[str, dict[str, Any]]:
    """Every live listener's connection states, by `process|app_id`."""
    return read_live(client, CONNECTIONS_KEY, CONNECTIONS_STALE_S)
